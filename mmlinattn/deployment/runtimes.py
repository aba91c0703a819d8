"""Run an exported ``.onnx`` graph on the CPU with ONNX Runtime or OpenVINO.

``load_runtime(path, 'onnxruntime' | 'openvino')`` returns a callable that maps the graph's
inputs (float32 arrays or tensors, in the graph's input order: an image graph takes one
``(B, 3, H, W)`` batch) to its outputs as a list of numpy arrays.
"""
from typing import Callable, List, Optional

import numpy as np

DEPLOY_HINT = ('install the deployment extra: bash tools/setup.sh --with deploy '
               '(onnx, onnxscript, onnxruntime, openvino)')

RUNTIMES = ('onnxruntime', 'openvino')


def _as_array(x) -> np.ndarray:
    if hasattr(x, 'detach'):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def load_runtime(path: str, runtime: str = 'onnxruntime',
                 threads: Optional[int] = None) -> Callable[..., List[np.ndarray]]:
    """A CPU session for ``path`` (``threads``: intra-op threads, default the runtime's)."""
    if runtime == 'onnxruntime':
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ImportError(f'onnxruntime is not installed; {DEPLOY_HINT}') from err
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        names = [i.name for i in session.get_inputs()]
        return lambda *xs: session.run(None, {n: _as_array(x) for n, x in zip(names, xs)})
    if runtime == 'openvino':
        try:
            import openvino as ov
        except ImportError as err:
            raise ImportError(f'openvino is not installed; {DEPLOY_HINT}') from err
        core = ov.Core()
        config = {'INFERENCE_NUM_THREADS': threads} if threads else {}
        # f32 inference precision: OpenVINO may otherwise run bf16 on CPUs that have it.
        config['INFERENCE_PRECISION_HINT'] = 'f32'
        compiled = core.compile_model(core.read_model(path), 'CPU', config)
        request = compiled.create_infer_request()

        def run(*xs):
            result = request.infer({i: _as_array(x) for i, x in enumerate(xs)})
            return [np.asarray(result[out]) for out in compiled.outputs]
        return run
    raise ValueError(f'unknown runtime {runtime!r}; choose one of {RUNTIMES}')


def max_relative_difference(outs, refs) -> float:
    """max |out - ref| / max |ref| over paired outputs (arrays or tensors), the worst pair;
    ``inf`` when the counts or shapes differ."""
    if len(outs) != len(refs):
        return float('inf')
    worst = 0.0
    for out, ref in zip(outs, refs):
        out, ref = (np.asarray(t.detach().cpu() if hasattr(t, 'detach') else t,
                               dtype=np.float64) for t in (out, ref))
        if out.shape != ref.shape:
            return float('inf')
        worst = max(worst, float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-12)))
    return worst
