# The playing-card photos in data/photos/cards/ (296 train, 67 test phone photos, six classes;
# tools/dataset_converters/make_photo_data.py), 320-pixel long side, batch 4.  Its schedule:
# ../schedules/cards_6e.py.
_base_ = './photo_detection.py'
train_dataloader = dict(dataset=dict(
    data_root='data/photos/cards/',
    metainfo=dict(classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten'))))
val_dataloader = dict(dataset=dict(
    data_root='data/photos/cards/',
    metainfo=dict(classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten'))))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='data/photos/cards/annotations/instances_test.json')
test_evaluator = val_evaluator
