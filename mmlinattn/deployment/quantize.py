"""Post-training int8 quantization of an exported graph with ONNX Runtime (static, QDQ).

The graph's input is what the config's data preprocessor hands the model (see
:mod:`.onnx_export`), so calibration feeds it real images through the config's own dataset
pipeline and preprocessor.  Only the matrix products are quantized (``Conv``, ``MatMul``,
``Gemm``: int8 weights per output channel, uint8 activations); everything else runs in
float32.  That keeps the parts of linear attention that need range or precision in float:
the feature maps (ELU + 1, ReLU powers, exponentials), the normalisers' sums and divisions,
SOFT++'s Newton-Schulz iteration (products of near-identity matrices whose error compounds
over 20 steps) and the norms; :data:`KEEP_FLOAT` says which node names stay float on top of
that, per family, with the measured reason (docs/deployment.md).
"""
import re
from typing import Dict, Iterator, Optional, Sequence

import numpy as np

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
                    keep_float: Sequence[str] = (), per_channel: bool = True) -> dict:
    """Write the int8 (QDQ) form of ``fp32_path`` to ``out_path``, calibrated (min-max) on
    ``inputs`` (arrays for ``input_name``); nodes whose name matches a pattern of
    ``keep_float`` stay float32.  Returns counts of the quantized and float nodes."""
    try:
        import onnx
        from onnxruntime import quantization as q
    except ImportError as err:
        raise ImportError(f'onnxruntime is not installed; {DEPLOY_HINT}') from err
    graph = onnx.load(fp32_path).graph
    patterns = [re.compile(p) for p in keep_float]
    kept = [n.name for n in graph.node if n.op_type in QUANTIZED_OPS
            and any(p.search(n.name) for p in patterns)]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.items = iter(inputs)

        def get_next(self) -> Optional[dict]:
            item = next(self.items, None)
            return None if item is None else {input_name: np.ascontiguousarray(item)}

    q.quantize_static(fp32_path, out_path, Reader(), quant_format=q.QuantFormat.QDQ,
                      op_types_to_quantize=list(QUANTIZED_OPS), per_channel=per_channel,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                      nodes_to_exclude=kept,
                      extra_options={'ActivationSymmetric': False, 'WeightSymmetric': True})
    total = sum(n.op_type in QUANTIZED_OPS for n in graph.node)
    return {'quantized': total - len(kept), 'kept_float': len(kept)}
