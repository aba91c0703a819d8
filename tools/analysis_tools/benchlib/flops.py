"""FLOP counting: ``torch.utils.flop_counter.FlopCounterMode`` (a multiply-add is 2 FLOPs;
every matmul, einsum, convolution and attention kernel) with the backward of grouped
convolutions counted per group, and a nested count of the FLOPs spent inside one function
(SOFT++'s Newton-Schulz pseudo-inverse); and the bytes of every block's input and output,
the memory side of a roofline bound."""
from contextlib import contextmanager, nullcontext
from typing import Dict

__all__ = ['flop_counter', 'scoped_flops', 'newton_flops', 'count_flops', 'BLOCK_SUFFIXES',
           'block_modules', 'count_block_bytes']


def _conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding,
                         _dilation, transposed, _output_padding, _groups, output_mask,
                         out_shape=None, **kwargs) -> int:
    """Convolution backward FLOPs, grouped convolutions counted per group.

    torch's own formula treats the input as the weight of a dense convolution for
    ``grad_weight``, which for a depthwise conv counts ``C x (H W)^2`` products; each of
    ``grad_input`` and ``grad_weight`` costs exactly the forward's multiply-adds.
    """
    from torch.utils.flop_counter import conv_flop_count
    fwd = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return fwd * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def flop_counter(**kwargs):
    """``FlopCounterMode`` with the grouped-convolution backward fixed."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    mapping = {torch.ops.aten.convolution_backward: _conv_backward_flops}
    return FlopCounterMode(display=False, custom_mapping=mapping, **kwargs)


@contextmanager
def scoped_flops(module, attr: str, totals: Dict[str, int], key: str):
    """Count the FLOPs spent inside ``module.attr`` (a function) into ``totals[key]``.

    A nested counter sees the function's ops; the enclosing counter still counts them
    too, because each dispatch mode forwards every op to the next one on the stack.
    """
    orig = getattr(module, attr, None)
    if orig is None:
        yield
        return

    def wrapped(*args, **kwargs):
        with flop_counter() as inner:
            out = orig(*args, **kwargs)
        totals[key] = totals.get(key, 0) + inner.get_total_flops()
        return out

    setattr(module, attr, wrapped)
    try:
        yield
    finally:
        setattr(module, attr, orig)


def newton_flops(totals: Dict[str, int]):
    """:func:`scoped_flops` of SOFT++'s Newton-Schulz iterations (SOFT++, arXiv:2207.03341,
    Eq. 10) into ``totals['newton']``; a no-op where mmlinattn's ops do not import."""
    try:
        import mmlinattn.ops.soft as soft_ops
    except ImportError:  # a peer-only environment
        return nullcontext()
    return scoped_flops(soft_ops, 'newton_schulz_pinv', totals, 'newton')


@contextmanager
def count_flops(totals: Dict[str, int]):
    """Count every FLOP of the enclosed code into ``totals['total']`` and SOFT++'s
    Newton-Schulz iterations into ``totals['newton']``."""
    totals.setdefault('newton', 0)
    with newton_flops(totals), flop_counter() as fc:
        yield
    totals['total'] = fc.get_total_flops()


#: class-name endings of a network's blocks: ours (``SOFTBlock``, ``NaLaBlock``,
#: ``InfSABlock``, ``LDNBlock``, ``SoftmaxBlock``) and the peers' (mmdet's ``SwinBlock``,
#: ``Bottleneck`` / ``BasicBlock`` of ResNet, ``PVTEncoderLayer``; timm's ``Block``)
BLOCK_SUFFIXES = ('Block', 'Bottleneck', 'EncoderLayer')


def block_modules(model):
    """The outermost modules of ``model`` whose class name ends with :data:`BLOCK_SUFFIXES`
    (a block inside a block counts once, as the outer one)."""
    found = []

    def visit(module):
        for child in module.children():
            if type(child).__name__.endswith(BLOCK_SUFFIXES):
                found.append(child)
            else:
                visit(child)
    visit(model)
    return found


def _tensor_bytes(value) -> int:
    import torch
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


@contextmanager
def count_block_bytes(model, totals: Dict[str, int]):
    """Add into ``totals['block_bytes']`` the bytes of every tensor each block of ``model``
    (:func:`block_modules`) takes and returns in the enclosed forward passes: the traffic of
    reading each block's input and writing its output once.  Works on fake tensors."""
    totals.setdefault('block_bytes', 0)

    def hook(_module, args, kwargs, output):
        totals['block_bytes'] += _tensor_bytes(args) + _tensor_bytes(kwargs) + \
            _tensor_bytes(output)
    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in block_modules(model)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
