# The blood-smear photos in data/photos/bccd/ (205 train, 72 test microscope images, three
# classes of many small cells; tools/dataset_converters/make_photo_data.py), 320x240, batch 4.
# Its schedule: ../schedules/bccd_8e.py.
_base_ = './photo_detection.py'
train_dataloader = dict(dataset=dict(
    data_root='data/photos/bccd/',
    metainfo=dict(classes=('RBC', 'WBC', 'Platelets'))))
val_dataloader = dict(dataset=dict(
    data_root='data/photos/bccd/',
    metainfo=dict(classes=('RBC', 'WBC', 'Platelets'))))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='data/photos/bccd/annotations/instances_test.json')
test_evaluator = val_evaluator
