"""LDN backbone: the shared pyramid contract plus the paper's structural claims
(linear cost, §3.5; multi-scale diffusion with its own parameters per layer, §3.4)."""
import pytest
import torch
from backbone_checks import (check_all_params_get_grad, check_bf16_autocast,
                             check_frozen_stages, check_output_shapes, check_strict_reload)
from mmengine.registry import MODELS as ROOT_MODELS
from torch.utils.flop_counter import FlopCounterMode

from mmlinattn.models.backbones import LDN
from mmlinattn.models.layers import LDNBlock, TokenGrid
from mmlinattn.registry import MODELS

# A narrow arch with every stage present keeps the contract checks fast on 2 CPU cores.
SMALL_ARCH = dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2, 1], num_heads=[1, 2, 2, 2])


def build(**kwargs):
    kwargs.setdefault('arch', SMALL_ARCH)
    model = LDN(**kwargs)
    model.init_weights()
    return model


def test_tiny_at_224_gives_the_documented_pyramid():
    model = MODELS.build(dict(type='LDN', arch='tiny')).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, 64, 56, 56), (1, 128, 28, 28),
                                              (1, 320, 14, 14), (1, 512, 7, 7)]


def test_scope_prefixed_build_from_root_registry():
    model = ROOT_MODELS.build(dict(type='mmlinattn.LDN', arch='small'))
    assert isinstance(model, LDN) and model.depths == [3, 4, 6, 3]


@pytest.mark.parametrize('arch,depths', [('tiny', [2, 2, 6, 2]), ('small', [3, 4, 6, 3]),
                                         ('base', [3, 4, 18, 3])])
def test_arch_table(arch, depths):
    model = LDN(arch=arch)
    assert model.embed_dims == [64, 128, 320, 512]
    assert model.num_heads == [2, 4, 10, 16]
    assert [len(s.blocks) for s in model.stages] == depths


def test_bad_arguments():
    with pytest.raises(ValueError, match='huge'):
        LDN(arch='huge')
    with pytest.raises(ValueError, match='pos_enc'):
        LDN(pos_enc='learned')
    with pytest.raises(ValueError, match='step_init'):
        LDN(step_init=(0.8, 0.2))
    with pytest.raises(ValueError, match='at least one'):
        LDN(use_diffusion=False, use_local=False, use_attn=False)
    with pytest.raises(ValueError, match='groups'):
        LDN(diffusion_groups=3)


def test_output_shapes():
    check_output_shapes(build())


@pytest.mark.parametrize('kwargs', [
    dict(taps='k3'),
    dict(integrator='implicit_dct', step_init=(0.5, 4.0)),
    dict(n_steps=3, diffusion_groups=2),
    dict(pos_enc=None, feature_map='relu', layer_scale_init_value=None),
    dict(out_indices=(1, 3)),
])
def test_output_shapes_options(kwargs):
    check_output_shapes(build(**kwargs), sizes=[(112, 137), (33, 33)])


def test_strict_reload_across_resolutions():
    check_strict_reload(build)
    check_strict_reload(lambda: build(taps='k3', integrator='euler', n_steps=2),
                        size_a=(160, 96), size_b=(33, 47))


def test_every_parameter_gets_a_gradient():
    check_all_params_get_grad(build(drop_path_rate=0.0))


def test_finite_under_bf16_autocast_at_512():
    check_bf16_autocast(build(), size=(512, 512))


def test_frozen_stages():
    check_frozen_stages(build, frozen=1)


# ------------------------------------------------------------------ Table 4 ablation switches
@pytest.mark.parametrize('switches,present,absent', [
    (dict(), ['diffusion', 'local', 'attn'], []),
    (dict(use_diffusion=False), ['local', 'attn'], ['diffusion']),
    (dict(use_local=False), ['diffusion', 'attn'], ['local', 'norm1', 'ls1']),
    (dict(use_attn=False), ['diffusion', 'local'], ['attn', 'norm2', 'ls2']),
    (dict(use_local=False, use_attn=False), ['diffusion'], ['local', 'attn']),
])
def test_branch_switches_build_the_ablation_models(switches, present, absent):
    model = build(**switches)
    names = {n.split('.')[4] for n, _ in model.named_parameters() if n.startswith('stages.')}
    assert set(present) <= names
    assert not set(absent) & names
    check_output_shapes(model, sizes=[(64, 96)])
    check_all_params_get_grad(model)


def test_block_is_the_sum_of_its_branches_from_the_same_state():
    """E4: H' = H + diffusion(H) + F(H) + A_lin(H): the full block's increment is exactly the
    sum of the single-branch blocks' increments (same weights, same input)."""
    torch.manual_seed(0)
    full = LDNBlock(16, 2, layer_scale_init_value=0.5).double().eval()
    sd = full.state_dict()
    parts = []
    for flags in [dict(use_local=False, use_attn=False), dict(use_diffusion=False,
                                                            use_attn=False),
                  dict(use_diffusion=False, use_local=False)]:
        blk = LDNBlock(16, 2, layer_scale_init_value=0.5, **flags).double().eval()
        blk.load_state_dict({k: v for k, v in sd.items() if k in blk.state_dict()})
        parts.append(blk)
    x, hw = torch.randn(2, 5 * 7, 16, dtype=torch.float64), TokenGrid((5, 7))
    total = sum(p(x, hw) - x for p in parts)
    torch.testing.assert_close(full(x, hw) - x, total, rtol=0, atol=1e-12)
    assert all((p(x, hw) - x).abs().max() > 1e-3 for p in parts)


@pytest.mark.parametrize('switches', [dict(), dict(use_diffusion=False), dict(use_local=False),
                                      dict(use_attn=False), dict(layer_scale_init_value=None)])
@pytest.mark.parametrize('padded', [False, True])
def test_block_inference_accumulates_its_branches_into_the_state(switches, padded, gemm_spy):
    """Eager inference folds the LayerScales and biases into the branches' last linears, whose
    GEMMs accumulate into the state: the same block output as the plain sum (run under
    autograd, where the fused path is off); a forward hook on such a linear sees it called."""
    torch.manual_seed(0)
    block = LDNBlock(8, 2, mlp_ratio=2.0, drop_path=0.1, **switches).double().eval()
    for name, param in block.named_parameters():
        if name.endswith('gamma'):
            param.data.uniform_(0.5, 1.5)
    last = [block.local.fc2] if block.use_local else []
    last += [block.attn.proj] if block.use_attn else []
    grid = TokenGrid((4, 5), [(4, 5), (2, 3)] if padded else None)
    x = torch.randn(2, 20, 8, dtype=torch.float64)
    x0 = x.clone()
    with torch.no_grad():
        fused = block(x, grid)
    assert len(gemm_spy) == len(last) and torch.equal(x, x0)
    plain = block(x.clone().requires_grad_(), grid)
    torch.testing.assert_close(fused, plain.detach(), rtol=0, atol=1e-12)
    seen = []
    for linear in last:
        linear.register_forward_hook(lambda *_: seen.append(1))
    with torch.no_grad():
        torch.testing.assert_close(block(x, grid), fused, rtol=0, atol=1e-12)
    assert len(seen) == len(last)


def test_pure_diffusion_model_keeps_the_max_principle():
    """With only the diffusion branch, every stage is a stack of convex combinations: its
    output stays within the range of its input, per channel."""
    model = build(use_local=False, use_attn=False).eval()
    x = torch.randn(1, 16, 20, 28)
    stage = model.stages[0]
    stage.pos_embed = None
    with torch.no_grad():
        y = stage(x)
    assert (y.amin(dim=(2, 3)) >= x.amin(dim=(2, 3)) - 1e-5).all()
    assert (y.amax(dim=(2, 3)) <= x.amax(dim=(2, 3)) + 1e-5).all()


# ------------------------------------------------------------------- §3.4 multi-scale diffusion
def test_each_layer_owns_distinct_diffusion_with_spread_initial_steps():
    model = LDN(arch='tiny')
    seen = set()
    for stage, depth in zip(model.stages, model.depths):
        steps = [blk.diffusion.step().item() for blk in stage.blocks]
        if depth > 1:
            assert steps[0] == pytest.approx(0.2, abs=1e-6)
            assert steps[-1] == pytest.approx(0.8, abs=1e-6)
            assert all(b > a for a, b in zip(steps, steps[1:]))
        for blk in stage.blocks:
            for p in blk.diffusion.parameters():
                assert id(p) not in seen
                seen.add(id(p))
    assert len(seen) == 2 * sum(model.depths)


# --------------------------------------------------------------------------- linear cost (§3.5)
def test_flops_scale_linearly_with_image_area():
    model = build().eval()

    def flops(h, w):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.randn(1, 3, h, w))
        return counter.get_total_flops()
    ratio = flops(128, 192) / flops(64, 96)
    assert abs(ratio - 4.0) / 4.0 < 0.02, ratio


def test_one_layer_of_the_full_block_is_global():
    blk = LDNBlock(8, 2, layer_scale_init_value=1.0).double()
    h, w = 4, 6
    x = torch.randn(1, h * w, 8, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: blk(t, TokenGrid((h, w)))[0], x,
                                               vectorize=True)[:, :, 0]
    assert (jac.abs().amax(dim=(1, 3)) > 0).all()
