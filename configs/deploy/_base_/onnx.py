# mmdeploy's ONNX settings (the fields of its configs/_base_/onnx_config.py): the
# TorchScript-based exporter at opset 11, which every mmlinattn backbone exports with
# symbolic H and W (mmlinattn.deployment.mmdeploy_rewriters keeps mmdeploy 1.3 on that
# exporter under PyTorch >= 2.9; listed in custom_imports, so mmdeploy's own tools/deploy.py
# registers it on loading these deploy configs).
custom_imports = dict(imports=['mmlinattn.deployment.mmdeploy_rewriters'],
                      allow_failed_imports=False)
onnx_config = dict(
    type='onnx',
    export_params=True,
    keep_initializers_as_inputs=False,
    opset_version=11,
    save_file='end2end.onnx',
    input_names=['input'],
    output_names=['output'],
    input_shape=None,
    optimize=True)
backend_config = dict(type='onnxruntime')
