"""ONNX export through ``torch.export`` (``torch.onnx.export(dynamo=True)``).

H and W are exported as symbolic dimensions, so the graph runs at sizes it never saw;
the batch size stays the one of the example input (the token grid of a padded batch is
resolved from Python sizes, see docs/user_guides/deployment.md).
"""
import inspect
import os
import re
from typing import Iterable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log

from .runtimes import DEPLOY_HINT, difference_from_eager

#: The domains of the standard ONNX operator sets; anything else needs a custom kernel.
STANDARD_DOMAINS = ('', 'ai.onnx', 'ai.onnx.ml')


def _require(module: str):
    try:
        return __import__(module)
    except ImportError as err:
        raise ImportError(f'{module} is not installed; {DEPLOY_HINT}') from err


def require_export_onnx() -> None:
    """Raise where this torch has no ``torch.onnx.export(dynamo=True)`` (torch < 2.5), which
    every export here goes through; the models themselves run on that torch."""
    if 'dynamo' not in inspect.signature(torch.onnx.export).parameters:
        raise RuntimeError(
            f'ONNX export goes through torch.export (torch.onnx.export(dynamo=True)), which '
            f'torch {torch.__version__} does not have; export from an environment with a newer '
            f'torch (the default lane: bash tools/setup.sh --with deploy); the model and its '
            f'checkpoints run on this torch as they are')


def export_onnx(module: nn.Module, example: torch.Tensor, path: str, *,
                dynamic_hw: bool = True, opset: int = 18, min_size: int = 64,
                max_size: int = 8192, output_names: Optional[Sequence[str]] = None) -> str:
    """Export ``module(example)`` (a tensor in, a tuple of tensors out) to ``path``.

    ``dynamic_hw`` marks H and W of the input as symbolic (``min_size``..``max_size``;
    64 keeps every stage of a stride-32 pyramid at least 2 x 2 tokens) and checks the
    traced program against ``module`` at two other sizes (:func:`check_program`); the ONNX
    file is then checked with :func:`check_onnx`.  Returns ``path``.
    """
    require_export_onnx()
    _require('onnx'), _require('onnxscript')
    if example.dim() != 4:
        raise ValueError(f'export_onnx: the example input must be (B, C, H, W), got shape '
                         f'{tuple(example.shape)}')
    module = module.eval()
    with torch.no_grad():
        program, min_size = _export_program(module, example, dynamic_hw, min_size, max_size)
        if dynamic_hw:
            check_program(program, module, example, min_size)
            print_log(f'{type(module).__name__}: one graph for H, W in {min_size}..{max_size}',
                      logger='current')
        export_program_onnx(program, [example], path, opset, ['input'], output_names)
    try:
        check_onnx(path)
        if dynamic_hw:
            check_onnx_sizes(path, module, example, min_size)
            _check_sizes_symbolic(path, example)
    except Exception as err:
        raise _set_aside(path, err) from err
    return path


def _check_sizes_symbolic(path: str, example: torch.Tensor) -> None:
    fixed = [name for name, dim in zip('HW', _input_dims(path)[2:]) if dim is not None]
    if fixed:
        raise RuntimeError(
            f'{path}: {" and ".join(fixed)} of the input came out fixed although dynamic '
            f'sizes were asked for: a Python int taken from the input size inside the '
            f'model pins the graph to {tuple(example.shape[2:])}; export with '
            f'dynamic_hw=False (then it runs at this size only) or report the model')


def _set_aside(path: str, err: Exception) -> Exception:
    """A written graph that failed a check moves to ``NAME.rejected.onnx``: nothing is
    left at ``path`` that a later step could take for a good export, and the graph stays
    for a look.  Returns ``err``'s message with where it went."""
    rejected = (path[:-len('.onnx')] if path.endswith('.onnx') else path) + '.rejected.onnx'
    os.replace(path, rejected)
    msg = f'{err}\n(the graph that failed is kept as {rejected}; nothing is left at {path})'
    return type(err)(msg) if isinstance(err, (RuntimeError, ValueError)) else RuntimeError(msg)


def export_program_onnx(program, inputs: Sequence[torch.Tensor], path: str, opset: int,
                        input_names: Sequence[str],
                        output_names: Optional[Sequence[str]] = None) -> None:
    """Translate a ``torch.export`` program to ONNX and write it to ``path``, with every
    value computed from the weights alone folded into a constant (:func:`fold_weights`)."""
    onnx_program = torch.onnx.export(program, tuple(inputs), dynamo=True, opset_version=opset,
                                     input_names=list(input_names),
                                     output_names=list(output_names) if output_names
                                     else None, verbose=False)
    onnx_program.save(path)
    fold_weights(path)


def fold_weights(path: str) -> None:
    """Replace every node of the graph at ``path`` whose inputs are all constants by the
    constants it computes, whatever their size (the exporter's own folding stops at
    8192-element inputs and at nodes with several outputs).  The blocks fold a LayerScale
    or another per-channel scale into a linear's weight in the forward pass, and split fused
    weights, so the exported graph derives those weights from the parameters at every run;
    folded, they are initializers, which the int8 quantizers need: neither ONNX Runtime's
    nor NNCF quantizes a product whose weight is computed (NaLaFormer-small: 137 of its 267
    products).  The values are the same float32 results, computed once."""
    onnx = _require('onnx')
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(path)
    graph = model.graph
    values = {t.name: t for t in graph.initializer}
    values.update({o: numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), o)
                   for n in graph.node if n.op_type == 'Constant' and n.attribute
                   and n.attribute[0].name == 'value' for o in n.output})
    kept, folded = [], []
    for node in graph.node:     # topological order: a folded output feeds later nodes
        if _foldable(node) and all(not i or i in values for i in node.input):
            inputs = [i for i in node.input if i]
            arrays = ReferenceEvaluator(onnx.helper.make_model(onnx.helper.make_graph(
                [node], 'fold', [onnx.helper.make_tensor_value_info(i, values[i].data_type,
                                                                    None) for i in inputs],
                [onnx.helper.make_empty_tensor_value_info(o) for o in node.output]),
                opset_imports=model.opset_import)).run(
                None, {i: numpy_helper.to_array(values[i]) for i in inputs})
            for name, array in zip(node.output, arrays):
                values[name] = numpy_helper.from_array(array, name)
                folded.append(values[name])
        else:
            kept.append(node)
    if not folded:
        return
    used = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    kept = [n for n in kept if n.op_type != 'Constant' or any(o in used for o in n.output)]
    initializers = [t for t in list(graph.initializer) + folded if t.name in used]
    del graph.node[:], graph.initializer[:]
    graph.node.extend(kept)
    graph.initializer.extend(initializers)
    onnx.save(model, path)


#: operators whose output is not a function of their inputs' values
_RANDOM_OPS = ('RandomNormalLike', 'RandomUniformLike', 'Multinomial', 'Bernoulli')


def _foldable(node) -> bool:
    """A standard operator without subgraphs (whose bodies may read other values) or
    randomness, with inputs."""
    return (node.op_type != 'Constant' and bool(node.input) and node.domain in STANDARD_DOMAINS
            and node.op_type not in _RANDOM_OPS
            and not any(a.g.node or a.graphs for a in node.attribute))


def _dims(min_size: int, max_size: int):
    return ({2: torch.export.Dim('height', min=min_size, max=max_size),
             3: torch.export.Dim('width', min=min_size, max=max_size)}, )


def _export_program(module: nn.Module, example: torch.Tensor, dynamic_hw: bool,
                    min_size: int, max_size: int):
    """``torch.export`` with symbolic H, W -> (program, smallest size it accepts).

    A fact about sizes the shape solver cannot prove (typically ``N mod k != 0`` from a
    view of a conv's token count, true for every size in the range) becomes a runtime
    assertion of the program instead of an error (``prefer_deferred_runtime_asserts``,
    from the first attempt: a refused first trace cost as much as the second); whether
    the graph is right at other sizes is checked by :func:`check_program`.  Where the
    model needs larger inputs, the range is raised to the model's minimum: a range the
    solver states (``65 <= H``) takes a second trace, one hidden in an assertion
    (``ceil(W / 64) != 1``) is found by running the program (:func:`_smallest_size`).  A
    model whose forward pass fixes H or W to the example's size (mmdet's Swin) raises
    ``RuntimeError`` after the first attempt: export it with ``dynamic_hw=False``."""
    if not dynamic_hw:
        return torch.export.export(module, (example, ), strict=False), None
    for _ in range(3):
        try:
            program = torch.export.export(
                module, (example, ), dynamic_shapes=_dims(min_size, max_size), strict=False,
                prefer_deferred_runtime_asserts_over_guards=True)
            return program, _smallest_size(program, example, min_size)
        except Exception as err:  # ConstraintViolationError, wrapped as UserError
            text = str(err)
            if 'Constraints violated' not in text:
                raise
            mins = [int(v) for v in re.findall(r"Dim\('(?:height|width)', min=(\d+)", text)]
            mins += [int(v) for v in re.findall(
                r"guard (\d+) <= L\['x'\]\.size\(\)\[[23]\]", text)]
            if mins and max(mins) > min_size:
                min_size = max(mins)
                if min(example.shape[2:]) < min_size:
                    raise ValueError(f'{type(module).__name__} needs inputs of at least '
                                     f'{min_size} x {min_size}; export with a larger '
                                     f'example (--shape), got {tuple(example.shape[2:])}')
            elif ('Specializations unexpectedly required' in text
                  or re.search(r'^\s*(height|width) = \d+\s*$', text, re.M)):
                # the forward pass fixes H or W to the example's (a Python int taken from
                # the input size, a branch on it): another attempt cannot undo that, and
                # would take as long as the first (~50 s for a small Swin)
                raise RuntimeError(
                    f'{type(module).__name__}: H, W cannot stay symbolic, the forward pass '
                    f'fixes them to the example size {tuple(example.shape[2:])}; export '
                    'with dynamic_hw=False (the graph then runs at that size only)') from err
            else:
                raise
    raise RuntimeError(f'{type(module).__name__}: no dynamic export found (last range '
                       f'{min_size}..{max_size})')


def _runs_at(graph, example: torch.Tensor, size: int) -> bool:
    """The program's runtime assertions accept a ``size`` x ``size`` input."""
    x = torch.zeros(*example.shape[:2], size, size, dtype=example.dtype)
    try:
        graph(x)
    except RuntimeError as err:
        if 'Runtime assertion failed' in str(err):
            return False
        raise
    return True


def _smallest_size(program, example: torch.Tensor, min_size: int) -> int:
    """The smallest square size from ``min_size`` up that the program's runtime assertions
    accept (the example's smaller side does): ``min_size`` itself unless an assertion
    hides a larger minimum, such as a stride-64 level that needs two cells."""
    graph = program.module()
    if _runs_at(graph, example, min_size):
        return min_size
    low, high = min_size, min(example.shape[2:])  # refused, accepted
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _runs_at(graph, example, mid) else (mid, high)
    return high


def check_sizes(h: int, w: int, min_size: int) -> List[Tuple[int, int]]:
    """Sizes other than the example's, with other residues mod 32 and other aspect ratios,
    at which :func:`check_program` compares the graph with eager PyTorch."""
    return [(max(min_size, h + 13), max(min_size, w - 7)),
            (max(min_size, w + 32), max(min_size, h + 1))]


def check_program(program, module: nn.Module, example: torch.Tensor, min_size: int,
                  tol: float = 1e-4) -> None:
    """Run the exported program (with its runtime assertions) and ``module`` at two other
    sizes; a different output means the trace fixed a branch on the input size."""
    graph = program.module()
    for h, w in check_sizes(*example.shape[2:], min_size):
        x = torch.randn(example.shape[0], example.shape[1], h, w, dtype=example.dtype)
        try:
            outs = graph(x)
        except Exception as err:
            raise RuntimeError(f'{type(module).__name__}: the exported graph does not run at '
                               f'{h} x {w} ({type(err).__name__}: {str(err)[:300]}); export '
                               'with dynamic_hw=False') from err
        diff, allowed = difference_from_eager(outs, module, x, tol)
        if not diff <= allowed:
            raise RuntimeError(
                f'{type(module).__name__}: the graph traced at {tuple(example.shape[2:])} is '
                f'wrong at {h} x {w} (relative difference {diff:.1e}, allowed '
                f'{allowed:.1e}): the forward pass '
                'branches on the input size; export with dynamic_hw=False (the graph then '
                'runs at the example size only)')


def check_onnx_sizes(path: str, module: nn.Module, example: torch.Tensor, min_size: int,
                     tol: float = 1e-4) -> None:
    """The written graph in ONNX Runtime against ``module`` at :func:`check_sizes` (the
    ONNX translation of an op can fix a size the traced program kept symbolic).  Skipped
    when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    for h, w in check_sizes(*example.shape[2:], min_size):
        x = torch.randn(example.shape[0], example.shape[1], h, w, dtype=example.dtype)
        try:
            outs = session.run(None, {name: x.numpy()})
        except Exception as err:
            raise RuntimeError(f'{path}: ONNX Runtime cannot run the graph at {h} x {w} '
                               f'({str(err)[:300]}); an operator was exported for the '
                               'example size only; export with dynamic_hw=False') from err
        diff, allowed = difference_from_eager(outs, module, x, tol)
        if not diff <= allowed:
            raise RuntimeError(f'{path}: in ONNX Runtime the graph differs from eager at '
                               f'{h} x {w} (relative difference {diff:.1e}, allowed '
                               f'{allowed:.1e}); export with dynamic_hw=False')


def _input_dims(path: str) -> List[Optional[int]]:
    """The first input's dimensions: an int where fixed, None where symbolic."""
    onnx = _require('onnx')
    dims = onnx.load(path, load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField('dim_value') else None for d in dims]


def check_onnx(path: str) -> List[str]:
    """Run the ONNX checker on ``path`` and fail if an operator is outside the standard
    domains (it would need a custom runtime kernel).  Returns the op types used."""
    onnx = _require('onnx')
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=False)
    nodes = list(_all_nodes(model.graph))
    custom = sorted({f'{n.domain}::{n.op_type}' for n in nodes
                     if n.domain not in STANDARD_DOMAINS})
    local = {f.name for f in model.functions}
    custom = [c for c in custom if c.split('::')[1] not in local]
    if custom:
        raise RuntimeError(f'{path}: the graph uses operators outside the standard ONNX '
                           f'domains, which ONNX Runtime / OpenVINO cannot run: {custom}')
    return sorted({n.op_type for n in nodes})


def _all_nodes(graph) -> Iterable:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.g is not None and len(attr.g.node):
                yield from _all_nodes(attr.g)
            for sub in attr.graphs:
                yield from _all_nodes(sub)
