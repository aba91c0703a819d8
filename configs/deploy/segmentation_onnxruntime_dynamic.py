# mmdeploy deploy config: an mmseg segmentor (UperNet, Semantic FPN) as one ONNX graph
# that ends in the class map (argmax inside), any batch, height and width, run by ONNX
# Runtime.  The same fields as mmdeploy's configs/mmseg/segmentation_onnxruntime_dynamic.py.
_base_ = ['./_base_/onnx.py']
onnx_config = dict(
    dynamic_axes=dict(
        input={0: 'batch', 2: 'height', 3: 'width'},
        output={0: 'batch', 2: 'height', 3: 'width'}))
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
