"""Leaving eager PyTorch: ONNX export with dynamic H and W, and the ONNX Runtime /
OpenVINO CPU runtimes that run the exported graph (``tools/deployment/``)."""
from .deployed_model import DeployedModel
from .onnx_export import check_onnx, export_onnx
from .runtimes import DEPLOY_HINT, RUNTIMES, load_runtime, max_relative_difference
from .tensor_graph import TensorGraph, flatten_outputs

__all__ = ['DEPLOY_HINT', 'DeployedModel', 'RUNTIMES', 'TensorGraph', 'check_onnx', 'export_onnx',
           'flatten_outputs', 'load_runtime', 'max_relative_difference']
