"""The classes of the drawn demo datasets, which
``tools/dataset_converters/make_demo_data.py`` writes in the COCO, ADE20K and Cityscapes
layouts (the demo configs read them)."""

#: Shape classes, in label order (COCO category id = index + 1, ADE value = index + 1).
DEMO_CLASSES = ('triangle', 'square', 'pentagon', 'circle', 'ellipse', 'star', 'cross')
#: RGB base colour of each class (objects jitter around it); usable as ``metainfo['palette']``.
DEMO_PALETTE = [(220, 40, 40), (40, 170, 60), (40, 80, 220), (230, 200, 30),
                (200, 50, 200), (245, 130, 20), (30, 200, 210)]
