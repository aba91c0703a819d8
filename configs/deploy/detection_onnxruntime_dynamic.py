# mmdeploy deploy config: an mmdet detector (RetinaNet, Faster R-CNN) as one ONNX graph
# with NMS inside (``dets`` (B, N, 5), ``labels`` (B, N)), any batch, height and width,
# run by ONNX Runtime.  The same fields as mmdeploy's
# configs/mmdet/detection/detection_onnxruntime_dynamic.py, which works equally.
_base_ = ['./_base_/onnx.py']
onnx_config = dict(
    output_names=['dets', 'labels'],
    dynamic_axes=dict(
        input={0: 'batch', 2: 'height', 3: 'width'},
        dets={0: 'batch', 1: 'num_dets'},
        labels={0: 'batch', 1: 'num_dets'}))
codebase_config = dict(
    type='mmdet',
    task='ObjectDetection',
    model_type='end2end',
    # used where the model's test_cfg says nothing (mmdeploy's defaults)
    post_processing=dict(
        score_threshold=0.05,
        confidence_threshold=0.005,
        iou_threshold=0.5,
        max_output_boxes_per_class=200,
        pre_top_k=5000,
        keep_top_k=100,
        background_label_id=-1))
