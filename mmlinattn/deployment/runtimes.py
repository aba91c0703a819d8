"""Run an exported ``.onnx`` graph on the CPU with ONNX Runtime or OpenVINO.

``load_runtime(path, 'onnxruntime' | 'openvino')`` returns a callable that maps the graph's
inputs (float32 arrays or tensors, in the graph's input order: an image graph takes one
``(B, 3, H, W)`` batch) to its outputs as a list of numpy arrays.
"""
from collections import OrderedDict
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch

DEPLOY_HINT = ('install the deployment extra: bash tools/setup.sh --with deploy '
               '(onnx, onnxscript, onnxruntime, openvino)')

RUNTIMES = ('onnxruntime', 'openvino')

#: OpenVINO's inference precisions on the CPU.  Its own default is bf16 on CPUs with bf16
#: instructions (AVX512_BF16, AMX) and f32 elsewhere; ours is f32 everywhere, the precision
#: the export was checked in.
PRECISIONS = ('f32', 'bf16')


def _as_array(x) -> np.ndarray:
    if hasattr(x, 'detach'):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def load_runtime(path: str, runtime: str = 'onnxruntime', threads: Optional[int] = None,
                 static_shapes: bool = False,
                 precision: str = 'f32') -> Callable[..., List[np.ndarray]]:
    """A CPU session for ``path`` (``threads``: intra-op threads; default torch's
    ``torch.get_num_threads()``, so the runtime follows ``OMP_NUM_THREADS`` /
    ``torch.set_num_threads`` as the eager model does, instead of taking every core: two
    runs that share a machine then do not crowd each other out).

    ``static_shapes`` (OpenVINO only): compile the graph once per distinct set of input
    shapes, with its symbolic dimensions fixed to them (the last :data:`STATIC_SHAPES_KEPT`
    kept).  OpenVINO picks faster kernels for static shapes (docs/user_guides/deployment.md) at a
    compile per new shape: for inputs of few sizes (a benchmark, a fixed-size service), not
    for RoI graphs whose RoI count changes every image.  ONNX Runtime gained nothing from
    fixed dimensions in the same measurement, so it takes no such option.

    ``precision`` (OpenVINO only, :data:`PRECISIONS`): ``'bf16'`` lets OpenVINO run the
    graph in bfloat16 (its tensors rounded to 8 bits of mantissa), on CPUs with bf16
    instructions only (elsewhere OpenVINO would quietly run f32, so this refuses);
    docs/user_guides/deployment.md has its speed and metric.
    """
    if precision not in PRECISIONS:
        raise ValueError(f'unknown precision {precision!r}; choose one of {PRECISIONS}')
    threads = threads or torch.get_num_threads()
    if runtime == 'onnxruntime':
        if static_shapes or precision != 'f32':
            raise ValueError(f'{"static_shapes" if static_shapes else "precision"} is an '
                             'OpenVINO option; ONNX Runtime runs the graph as exported, '
                             'in float32')
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ImportError(f'onnxruntime is not installed; {DEPLOY_HINT}') from err
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        names = [i.name for i in session.get_inputs()]
        return lambda *xs: session.run(None, {n: _as_array(x) for n, x in zip(names, xs)})
    if runtime == 'openvino':
        return _openvino_runner(path, threads, static_shapes, precision)
    raise ValueError(f'unknown runtime {runtime!r}; choose one of {RUNTIMES}')


#: compiled shapes an OpenVINO runner with ``static_shapes`` keeps (least recently used out)
STATIC_SHAPES_KEPT = 4


def _openvino_runner(path: str, threads: int, static_shapes: bool, precision: str):
    try:
        import openvino as ov
    except ImportError as err:
        raise ImportError(f'openvino is not installed; {DEPLOY_HINT}') from err
    core = ov.Core()
    if precision == 'bf16' and 'BF16' not in core.get_property('CPU',
                                                               'OPTIMIZATION_CAPABILITIES'):
        raise ValueError('precision bf16: this CPU has no bf16 instructions (AVX512_BF16 or '
                         'AMX), and OpenVINO would run f32 instead; use f32')
    # the precision always set: OpenVINO's own default is bf16 on CPUs that have it
    config = {'INFERENCE_NUM_THREADS': threads, 'INFERENCE_PRECISION_HINT': precision}

    def compile_for(shapes=None):
        model = core.read_model(path)
        if shapes is not None:
            model.reshape({port: ov.PartialShape(list(shape))
                           for port, shape in zip(model.inputs, shapes)})
        compiled = core.compile_model(model, 'CPU', config)
        return compiled, compiled.create_infer_request()

    kept = OrderedDict()
    if static_shapes:
        core.read_model(path)  # a missing or broken file fails here, not at the first call
    else:
        kept[None] = compile_for()

    def run(*xs):
        arrays = [_as_array(x) for x in xs]
        key = tuple(a.shape for a in arrays) if static_shapes else None
        if key not in kept:
            kept[key] = compile_for(key)
            if len(kept) > STATIC_SHAPES_KEPT:
                kept.popitem(last=False)
        kept.move_to_end(key)
        compiled, request = kept[key]
        result = request.infer(dict(enumerate(arrays)))
        return [np.asarray(result[out]) for out in compiled.outputs]
    return run


def difference_from_eager(outs, module, x, tol: float, refs=None) -> Tuple[float, float]:
    """``(difference, allowed)``: how far a graph's outputs ``outs`` for ``x`` are from
    ``module``'s (:func:`max_relative_difference`), and how far they may be.  Within ``tol``
    of eager float32 they pass; beyond it they are measured against ``module`` in float64,
    and may be up to four times float32 eager's own error there: a trained network can run
    above ``tol`` in float32 alone (NaLaFormer's demo detector: 1.2e-4 from float64), while a
    graph fixed to its example's size is off by 1e-2 or more."""
    import copy
    if refs is None:
        with torch.no_grad():
            refs = module(x)
    diff = max_relative_difference(outs, refs)
    if diff <= tol:
        return diff, tol
    with torch.no_grad():
        exact = copy.deepcopy(module).double()(x.double())
    return (max_relative_difference(outs, exact),
            max(tol, 4 * max_relative_difference(refs, exact)))


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
