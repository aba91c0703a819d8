"""Post-training int8 quantization of an exported graph with ONNX Runtime (static, QDQ),
or with OpenVINO's NNCF (:func:`quantize_nncf`).

The graph's input is what the config's data preprocessor hands the model (see
:mod:`.onnx_export`), so calibration feeds it real images through the config's own dataset
pipeline and preprocessor.  Only the matrix products with a weight are quantized (``Conv``,
``MatMul``, ``Gemm``: int8 weights per output channel, uint8 activations).  Everything else
runs in float32: the products of two activations (the attention cores, SOFT++'s landmark
kernel and its Newton-Schulz iteration, whose error would compound over 20 steps), the
feature maps, the normalisers' sums and divisions, and the norms.  Measured with that rule,
every family's RetinaNet keeps its float32 bbox mAP within 0.003 (docs/user_guides/deployment.md), so
:data:`KEEP_FLOAT` (node names kept in float on top, per family) is empty.
"""
import re
from typing import Dict, Iterator, Optional, Sequence

import numpy as np

from ..utils.machine import has_int8_dot_product
from .runtimes import DEPLOY_HINT

#: The operator types that are quantized.
QUANTIZED_OPS = ('Conv', 'MatMul', 'Gemm')

#: Regular expressions of node names kept in float32 per backbone family, with why.
KEEP_FLOAT: Dict[str, Sequence[str]] = {}


def calibration_inputs(cfg, model, num_images: int, split: str = 'train') -> Iterator:
    """(1, 3, H, W) float32 arrays: ``num_images`` images of the config's ``split``
    dataloader through its test pipeline (no augmentation) and ``model``'s preprocessor."""
    import copy

    import torch
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import DATASETS, DefaultScope

    from ..engine.runner import register_library
    loader = cfg.get(f'{split}_dataloader')
    if loader is None:
        raise ValueError(f'the config has no {split}_dataloader to calibrate on')
    dataset = copy.deepcopy(loader.dataset)
    dataset.pipeline = copy.deepcopy(cfg.test_dataloader.dataset.pipeline)
    dataset.pop('filter_cfg', None)
    scope = cfg.get('default_scope')
    register_library(scope)
    with DefaultScope.overwrite_default_scope(scope):
        data = DATASETS.build(dataset)
    if len(data) == 0:
        raise ValueError(f'the {split} set of the config is empty: nothing to calibrate on')
    step = max(1, len(data) // num_images)
    for i in range(0, min(len(data), step * num_images), step):
        with torch.no_grad():
            batch = model.data_preprocessor(pseudo_collate([data[i]]), False)
        yield batch['inputs'].float().numpy()


def quantize_static(fp32_path: str, out_path: str, inputs, input_name: str = 'input',
                    keep_float: Sequence[str] = (), per_channel: bool = True,
                    float_depthwise: bool = False, reduce_range: Optional[bool] = None) -> dict:
    """Write the int8 (QDQ) form of ``fp32_path`` to ``out_path``, calibrated (min-max) on
    ``inputs`` (arrays for ``input_name``); nodes whose name matches a pattern of
    ``keep_float`` stay float32, and with ``float_depthwise`` the grouped (depthwise)
    convolutions too.  Returns counts of the quantized and float nodes.

    ``float_depthwise`` is a choice per runtime: OpenVINO ran NaLaFormer's depthwise
    convolutions slower in int8 than in float32, ONNX Runtime faster (docs/user_guides/deployment.md).

    ``reduce_range`` quantizes the weights to 7 bits.  ONNX Runtime advises it on x86 CPUs
    without an int8 dot-product instruction (VNNI): their u8 x s8 kernels add pairs of
    products in saturating int16, which 8-bit weights can overflow.  ``None`` (the default)
    decides by the CPU that quantizes, which should be the one that runs the graph."""
    try:
        import onnx
        from onnxruntime import quantization as q
    except ImportError as err:
        raise ImportError(f'onnxruntime is not installed; {DEPLOY_HINT}') from err
    graph = onnx.load(fp32_path).graph
    patterns = [re.compile(p) for p in keep_float]
    weights = {t.name for t in graph.initializer} | {
        o for n in graph.node if n.op_type == 'Constant' for o in n.output}
    # a product of two activations (the attention cores: phi(Q) (phi(K)^T V), the landmark
    # kernels, Newton-Schulz) stays float: both operands would be re-quantized per call
    kept = [n.name for n in graph.node if n.op_type in QUANTIZED_OPS
            and (any(p.search(n.name) for p in patterns)
                 or not any(i in weights for i in n.input)
                 or float_depthwise and _grouped(n))]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.items = iter(inputs)

        def get_next(self) -> Optional[dict]:
            item = next(self.items, None)
            return None if item is None else {input_name: np.ascontiguousarray(item)}

    if reduce_range is None:
        reduce_range = not has_int8_dot_product()
    q.quantize_static(fp32_path, out_path, Reader(), quant_format=q.QuantFormat.QDQ,
                      op_types_to_quantize=list(QUANTIZED_OPS), per_channel=per_channel,
                      reduce_range=reduce_range,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                      nodes_to_exclude=kept,
                      extra_options={'ActivationSymmetric': False, 'WeightSymmetric': True})
    total = sum(n.op_type in QUANTIZED_OPS for n in graph.node)
    return {'quantized': total - len(kept), 'kept_float': len(kept)}


def _grouped(node) -> bool:
    """A Conv with more than one group (our depthwise convolutions)."""
    return node.op_type == 'Conv' and any(a.name == 'group' and a.i > 1
                                          for a in node.attribute)


def quantize_nncf(fp32_path: str, out_path: str, inputs, float_depthwise: bool = False) -> dict:
    """Write OpenVINO's own int8 form of ``fp32_path`` (NNCF's post-training quantization,
    its default preset, calibrated on ``inputs``) to ``out_path`` (an OpenVINO IR ``.xml``
    with its ``.bin``).  NNCF chooses what to quantize itself (activation products
    included); its activation quantizers are one scale per tensor, so the graph runs at any
    input size.  ``float_depthwise`` keeps the grouped (depthwise) convolutions and their
    inputs in float.  Returns the count of its FakeQuantize nodes."""
    try:
        import nncf
        import openvino as ov
        from nncf.quantization.advanced_parameters import (AdvancedQuantizationParameters,
                                                           QuantizationParameters)
    except ImportError as err:
        raise ImportError(f'nncf or openvino is not installed; {DEPLOY_HINT}') from err
    items = [np.ascontiguousarray(x) for x in inputs]
    # NNCF's CPU preset gives a depthwise convolution's input one scale per channel; InfViT's
    # Mix-FFN reaches its convolution through a token-to-grid transpose, above which NNCF
    # places that quantizer with one scale per token: a graph fixed to the calibration's
    # token count, which fails at any other size.
    per_tensor = AdvancedQuantizationParameters(
        activations_quantization_params=QuantizationParameters(per_channel=False))
    ignored = nncf.IgnoredScope(types=['GroupConvolution']) if float_depthwise else None
    model = nncf.quantize(ov.Core().read_model(fp32_path), nncf.Dataset(items),
                          subset_size=len(items), advanced_parameters=per_tensor,
                          ignored_scope=ignored)
    ov.save_model(model, out_path)
    return {'fake_quantize': sum(op.get_type_name() == 'FakeQuantize'
                                 for op in model.get_ops())}
