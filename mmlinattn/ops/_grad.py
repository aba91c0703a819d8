"""When an op must keep autograd-friendly (out-of-place) code."""
import torch


def needs_grad(*tensors: torch.Tensor) -> bool:
    """True when autograd will record an op on ``tensors`` (grad mode on and any input
    requires grad); fast paths that work in place or skip autograd check this first."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
