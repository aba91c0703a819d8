# mmdeploy deploy config: Mask R-CNN as one ONNX graph (``dets``, ``labels`` and per-box
# ``masks``), any batch, height and width, run by ONNX Runtime; mmdeploy pastes the masks
# into the image in Python.  The same fields as mmdeploy's
# configs/mmdet/instance-seg/instance-seg_onnxruntime_dynamic.py.
_base_ = ['./detection_onnxruntime_dynamic.py']
onnx_config = dict(
    output_names=['dets', 'labels', 'masks'],
    dynamic_axes=dict(
        masks={0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'}))
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
