"""mmdeploy 1.3 on today's PyTorch: its ONNX export through the TorchScript-based exporter.

mmdeploy 1.3.1 calls ``torch.onnx.export(model, args, f, dynamic_axes=...)`` and relies on
the tracer (its function rewriters patch the model's Python while ``torch.jit.trace`` runs).
Since PyTorch 2.9 that call defaults to ``dynamo=True``, which rejects mmdeploy's inputs; the
rewriter below restores the exporter mmdeploy was written for, inside mmdeploy's own export
context only (``mmdeploy.core.RewriterContext``), as the maintained fork (onedl-mmdeploy)
does.  Its RoIAlign symbolic (Mask / Faster R-CNN) still imports a private helper that
PyTorch removed, ``torch.onnx.symbolic_opset9._cast_Long``; :func:`_restore_cast_long` puts
back its one-line equivalent (a Cast to int64).  Both are registered when this module is
imported with mmdeploy installed: the deploy configs of ``configs/deploy/`` list it in their
``custom_imports`` (so mmdeploy's own ``tools/deploy.py`` works unchanged with them), and
:mod:`.mmdeploy_api`, which this repository's mmdeploy tools use, imports it.
"""
import inspect

try:
    from mmdeploy.core import FUNCTION_REWRITER
except ImportError:  # mmdeploy not installed: nothing to register
    FUNCTION_REWRITER = None

__all__ = ['REGISTERED']


def _takes_dynamo_flag(func) -> bool:
    try:
        return 'dynamo' in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


if FUNCTION_REWRITER is not None:
    @FUNCTION_REWRITER.register_rewriter('torch.onnx.export')
    def torchscript_onnx_export(*args, **kwargs):
        """``torch.onnx.export`` with ``dynamo=False`` unless the caller says otherwise."""
        origin = FUNCTION_REWRITER.get_context().origin_func
        if _takes_dynamo_flag(origin):
            kwargs.setdefault('dynamo', False)
        return origin(*args, **kwargs)


def _restore_cast_long() -> None:
    from torch.onnx import symbolic_opset9
    if hasattr(symbolic_opset9, '_cast_Long'):
        return

    def _cast_Long(g, input, non_blocking):  # noqa: N802 (the removed helper's name)
        return g.op('Cast', input, to_i=7)  # 7: onnx.TensorProto.INT64

    symbolic_opset9._cast_Long = _cast_Long


if FUNCTION_REWRITER is not None:
    _restore_cast_long()

#: Whether the rewriter is registered (mmdeploy importable).
REGISTERED = FUNCTION_REWRITER is not None
