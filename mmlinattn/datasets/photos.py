"""The reduced photo sets that ship in ``data/photos/`` (cards, bccd, nuts; each with its
source's licence): their sources and classes, for the configs' checks and the converter that
re-creates them (``tools/dataset_converters/make_photo_data.py``)."""
from typing import Dict

__all__ = ['PHOTO_SETS', 'PHOTO_ROOT', 'is_photo_root']

PHOTO_ROOT = 'data/photos'

#: name -> what the converter needs to know about the source; ``classes`` in label order.
PHOTO_SETS: Dict[str, dict] = {
    'cards': dict(
        url='https://github.com/EdjeElectronics/TensorFlow-Object-Detection-API-Tutorial-'
            'Train-Multiple-Objects-Windows-10',
        licence='Apache-2.0', classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten'),
        splits=('train', 'test'), long_side=320, semantic=False),
    'bccd': dict(
        url='https://github.com/Shenggan/BCCD_Dataset', licence='MIT',
        classes=('RBC', 'WBC', 'Platelets'), splits=('train', 'val', 'test'), long_side=320,
        semantic=False),
    'nuts': dict(
        url='https://github.com/Tony607/mmdetection_instance_segmentation_demo',
        licence='MIT', classes=('date', 'fig', 'hazelnut'), splits=('train', 'val'),
        long_side=512, semantic=True),
}


def is_photo_root(root: str) -> bool:
    """Whether a dataset root lies in the photo sets that ship with the repository."""
    return f'{PHOTO_ROOT}/' in root.replace('\\', '/').rstrip('/') + '/'
