"""Checks every backbone family must pass (the README's backbone contract); each family's test file
parametrises these over its archs so the contract is stated once."""
import torch
from archs import expected_shapes

SIZES = [(224, 224), (511, 511), (112, 137), (33, 33)]


def check_output_shapes(model, sizes=SIZES, batch=1):
    """The shape contract (:func:`archs.expected_shapes`) at each size, all finite."""
    model.eval()
    for h, w in sizes:
        with torch.no_grad():
            outs = model(torch.randn(batch, model.in_channels, h, w))
        assert [tuple(o.shape) for o in outs] == expected_shapes(model, batch, h, w), (h, w)
        assert all(torch.isfinite(o).all() for o in outs)


def check_strict_reload(build, size_a=(64, 64), size_b=(96, 128)):
    """A model used at one resolution reloads strictly into a fresh one used at another,
    and both then give identical outputs."""
    torch.manual_seed(0)
    a = build().eval()
    with torch.no_grad():
        a(torch.randn(1, a.in_channels, *size_a))
    b = build().eval()
    with torch.no_grad():
        b(torch.randn(1, b.in_channels, *size_b))
    b.load_state_dict(a.state_dict(), strict=True)
    x = torch.randn(1, a.in_channels, *size_b)
    with torch.no_grad():
        for oa, ob in zip(a(x), b(x)):
            torch.testing.assert_close(oa, ob)


def check_all_params_get_grad(model, size=(64, 64)):
    """Every parameter receives a finite, non-None gradient from a sum over all outputs."""
    model.train()
    outs = model(torch.randn(2, model.in_channels, *size))
    sum(o.float().pow(2).mean() for o in outs).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f'no gradient for {missing}'
    bad = [n for n, p in model.named_parameters()
           if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f'non-finite gradient for {bad}'


def check_bf16_autocast(model, size=(512, 512)):
    """Forward and backward under CPU bf16 autocast stay finite; outputs keep bf16/fp32."""
    model.train()
    x = torch.randn(1, model.in_channels, *size)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
        loss = sum(o.float().pow(2).mean() for o in outs)
    loss.backward()
    for o in outs:
        assert torch.isfinite(o.float()).all()
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), n


def check_frozen_stages(build, frozen=1):
    """Parameters of stages 0..frozen (and their embeddings/out norms) get no gradient and
    frozen BatchNorms stay in eval mode after .train()."""
    model = build(frozen_stages=frozen)
    model.train()
    for i in range(frozen + 1):
        # an isotropic backbone has one patch embedding (frozen with block 0)
        mods = [model.patch_embeds[min(i, len(model.patch_embeds) - 1)], model.stages[i]]
        for m in mods:
            assert not m.training
            assert all(not p.requires_grad for p in m.parameters())
    for i in range(frozen + 1, model.num_stages):
        assert all(p.requires_grad for p in model.stages[i].parameters())
