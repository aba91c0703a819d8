"""Row stripes (:mod:`mmlinattn.kernels.row_stripes`) against the whole-map branch, in
float64: a ConvFFN in both orders, timm's Mlp and LDN's linear attention (two passes) on a
padded batch with a LayerScale, a convolutional stem, and every family's backbone with every
FFN, two-pass mixer and stem in stripes against its plain forward."""
import pytest
import torch
from archs import FAMILIES, build

from mmlinattn.kernels import Stripes, policy, residual, row_stripes
from mmlinattn.models.layers import ConvFFN, ConvStem, LayerNorm2d, PatchConv
from mmlinattn.models.layers.ffn import Mlp
from mmlinattn.models.layers.infsa_attention import LinearInfSA
from mmlinattn.models.layers.ldn_block import LinearAttention
from mmlinattn.models.layers.nala_attention import NaLaAttention
from mmlinattn.models.layers.soft_attention import SoftAttention
from mmlinattn.models.layers.token_grid import TokenGrid

f64 = torch.float64


@pytest.fixture
def stripes(monkeypatch):
    """Every FFN and two-pass mixer in stripes of ``rows`` rows (set the returned function);
    the striped branches' grids counted."""
    calls = []
    original = residual.accumulate_striped

    def counted(*args):
        calls.append(args[3].hw)
        return original(*args)
    monkeypatch.setattr(residual, 'accumulate_striped', counted)
    monkeypatch.setattr(policy, 'STRIPE_HIDDEN_BYTES', 0)
    monkeypatch.setattr(policy, 'STRIPE_MAP_BYTES', 0)

    def rows(n, row_bytes=2 * 24 * 64 * 8):  # n rows of a hidden tensor of row_bytes per row
        monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', n * row_bytes)
    return rows, calls


def branch_align(branch) -> int:
    return branch.row_align


def _plain(monkeypatch, fn):
    with monkeypatch.context() as m:
        m.setenv(policy.KERNELS_ENV, 'plain')
        return fn()


@pytest.mark.parametrize('branch', ['convffn nala', 'convffn mix', 'mlp', 'ldn attention',
                                    'nala attention'])
@pytest.mark.parametrize('n', [1, 3])
def test_striped_branch_equals_the_whole_branch(branch, n, stripes, monkeypatch):
    torch.manual_seed(0)
    dim, hidden = 6, 24
    ffn = {'convffn nala': lambda: ConvFFN(dim, hidden, dw_residual=True, act_before_dw=True),
           'convffn mix': lambda: ConvFFN(dim, hidden),
           'mlp': lambda: Mlp(dim, hidden),
           'ldn attention': lambda: LinearAttention(dim, 2),
           'nala attention': lambda: NaLaAttention(dim, 2)}[branch]().to(f64).eval()
    norm, gamma = torch.nn.LayerNorm(dim).to(f64), torch.rand(dim, dtype=f64)
    grid = TokenGrid((9, 7), [(9, 7), (6, 5)])  # the second image padded
    x = torch.randn(2, 63, dim, dtype=f64)
    set_rows, calls = stripes
    width = ffn.out_proj.in_features
    set_rows(n, 2 * 7 * width * 8)

    def step():
        with torch.no_grad():
            return residual.residual_step(x, ffn, grid, norm, gamma)
    want = _plain(monkeypatch, step)
    got = step()
    assert row_stripes.branch_stripes(ffn, x, grid).step == n
    assert calls == [(9, 7)]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize('tie_qk', [True, False])
@pytest.mark.parametrize('n', [1, 3])
def test_linear_infsa_from_striped_sums_equals_the_whole_mixer(tie_qk, n, stripes, monkeypatch):
    """Linear-InfSA's context from its two summary passes over stripes of n rows (a padded
    batch, a learned γ per head, untied keys too) against the whole mixer's plain forward."""
    torch.manual_seed(0)
    dim = 8
    mixer = LinearInfSA(dim, 2, learn_gamma=True, tie_qk=tie_qk).to(f64).eval()
    with torch.no_grad():
        mixer.gamma.logit.uniform_(-1, 1)  # two different heads
    norm, gamma = torch.nn.LayerNorm(dim).to(f64), torch.rand(dim, dtype=f64)
    grid = TokenGrid((9, 7), [(9, 7), (6, 5)])
    x = torch.randn(2, 63, dim, dtype=f64)
    set_rows, _ = stripes
    set_rows(n, 2 * 7 * dim * 8)
    summaries = []
    original = residual.summarize
    monkeypatch.setattr(residual, 'summarize', lambda *a: summaries.append(1) or original(*a))

    def step():
        with torch.no_grad():
            return residual.residual_step(x, mixer, grid, norm, gamma)
    want = _plain(monkeypatch, step)
    got = step()
    assert row_stripes.branch_stripes(mixer, x, grid).step == n and summaries == [1]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize('options', [
    dict(), dict(v_conv_size=3), dict(landmark_grid='crop'), dict(max_landmarks=4),
    dict(sym_norm=False, landmark_grid='crop', v_conv_size=5), dict(pinv='cholesky')])
@pytest.mark.parametrize('n', [1, 3])
def test_soft_attention_in_passes_equals_the_whole_mixer(options, n, stripes, monkeypatch):
    """SOFT++'s attention over stripes of n rows rounded up to the sampler's stride 2 (so a
    last stripe of one row, which ``'crop'`` drops): the landmarks from the stripes' sampled
    rows, ``P^T V`` summed over them, each stripe's output with its ``v_conv`` halo; a padded
    batch, against the whole mixer's plain forward."""
    torch.manual_seed(0)
    dim = 8
    mixer = SoftAttention(dim, 2, sr_ratio=2, **options).to(f64).eval()
    norm, gamma = torch.nn.LayerNorm(dim).to(f64), torch.rand(dim, dtype=f64)
    grid = TokenGrid((9, 7), [(9, 7), (6, 5)])
    x = torch.randn(2, 63, dim, dtype=f64)
    set_rows, calls = stripes
    set_rows(n, 2 * 7 * mixer.stripe_width * 8)
    summaries = []
    original = residual.summarize
    monkeypatch.setattr(row_stripes, 'summarize',
                        lambda *a: summaries.append(1) or original(*a))

    def step():
        with torch.no_grad():
            return residual.residual_step(x, mixer, grid, norm, gamma)
    want = _plain(monkeypatch, step)
    got = step()
    assert row_stripes.branch_stripes(mixer, x, grid).step == 2 * ((n + 1) // 2)
    assert calls == [(9, 7)] and summaries == [1]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize('n', [1, 3])
def test_striped_in_place_equals_the_whole_branch(n, stripes, monkeypatch):
    """``owned=True``: the sum written into the input itself, each stripe's halo above (two
    rows of a 5x5 depthwise conv: more than a stripe of one row) read from the copy."""
    torch.manual_seed(0)
    dim, hidden = 6, 24
    ffn = ConvFFN(dim, hidden)
    ffn.dwconv = torch.nn.Conv2d(hidden, hidden, 5, 1, 2, groups=hidden)
    ffn.row_halo = 2
    ffn = ffn.to(f64).eval()
    norm, gamma = torch.nn.LayerNorm(dim).to(f64), torch.rand(dim, dtype=f64)
    grid = TokenGrid((9, 7), [(9, 7), (6, 5)])
    x = torch.randn(2, 63, dim, dtype=f64)
    set_rows, calls = stripes
    set_rows(n, 2 * 7 * hidden * 8)

    def step(t, owned):
        with torch.no_grad():
            return residual.residual_step(t, ffn, grid, norm, gamma, owned=owned)
    want = _plain(monkeypatch, lambda: step(x, False))
    stream = x.clone()
    got = step(stream, True)
    assert got.data_ptr() == stream.data_ptr() and calls == [(9, 7)]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    assert not step(x, False).data_ptr() == x.data_ptr()  # not owned: a new tensor


@pytest.mark.parametrize('family', [f for f in FAMILIES if f != 'InfViTPlain'])
@pytest.mark.parametrize('n', [1, 3])
def test_backbone_with_ffn_stripes_equals_its_plain_forward(family, n, stripes, monkeypatch):
    """64x96 images, batch 2 with the second padded: every stage's FFNs (and LDN's attention)
    in stripes."""
    model = build(family).to(f64)
    x = torch.randn(2, 3, 64, 96, dtype=f64)
    valid = [(64, 96), (50, 70)]

    def forward():
        with torch.no_grad():
            return model(x, valid_hw=valid)
    want = _plain(monkeypatch, forward)
    set_rows, calls = stripes
    # n rows of every FFN and mixer (SOFT++'s: rounded up to its sampler's stride)
    monkeypatch.setattr(row_stripes, 'branch_stripes',
                        lambda branch, *args: Stripes(n, branch.row_halo, branch.row_align))
    monkeypatch.setattr(row_stripes, '_stem_rows', lambda *args: n + 1)  # and of a conv stem
    got = forward()
    assert {hw for hw in calls} >= {(16, 24), (8, 12)}  # stages 1 and 2 at least
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-11)


def _whole_then_stripes(units: torch.nn.Module, channels: int, hw, valid, monkeypatch):
    """A channels-last input on ``hw`` (a batch of two with ``valid``), the plain output of
    ``units`` (batch norms given running statistics) on it, then stripes of the fewest rows
    set: ``(x, grid, output, its grid)``."""
    for m in units.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    x = torch.randn(1 if valid is None else 2, channels, *hw, dtype=f64)
    x = x.contiguous(memory_format=torch.channels_last)
    grid = TokenGrid(hw, valid)
    with torch.no_grad():
        want, want_grid = _plain(monkeypatch, lambda: units(x, grid))
    monkeypatch.setattr(policy, 'STRIPE_HIDDEN_BYTES', 0)
    monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', 1)  # the fewest rows: 4 margins
    return x, grid, want, want_grid


@pytest.mark.parametrize('strides', [(2, 1, 1, 2), (2, 1, 2)])  # NaLaFormer's, SOFT++'s
@pytest.mark.parametrize('hw, valid', [((61, 45), None), ((64, 48), [(64, 48), (50, 33)]),
                                       ((130, 20), None)])
def test_striped_stem_equals_the_whole_stem(strides, hw, valid, monkeypatch):
    """A conv-BN-ReLU stem on odd sizes and a padded batch: each stripe of output rows from
    its input rows with the receptive field's margin, equal to the whole stem (and the same
    output grid)."""
    torch.manual_seed(0)
    relu = dict(type='ReLU')
    units = len(strides)
    stem = ConvStem(3, (8, ) * (units - 1) + (16, ), strides, (relu, ) * (units - 1) + (None, ),
                    norm_cfg=dict(type='BN')).to(f64).eval()
    x, grid, want, want_grid = _whole_then_stripes(stem, 3, hw, valid, monkeypatch)
    with torch.no_grad():
        assert row_stripes.stem_stripes.runs(stem, x, grid)
        got, got_grid = stem(x, grid)
    assert (got_grid.hw, got_grid.valid_hw) == (want_grid.hw, want_grid.valid_hw)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize('unit', [
    dict(kernel_size=3, stride=2, norm_cfg=dict(type='BN'), act_cfg=dict(type='GELU')),
    dict(kernel_size=4, stride=4, norm_cfg=dict(type='LN2d'))], ids=['3x3 s2', 'patchify'])
@pytest.mark.parametrize('hw, valid', [((61, 45), None), ((64, 48), [(64, 48), (50, 33)])])
def test_striped_patch_conv_equals_the_whole_unit(unit, hw, valid, monkeypatch):
    """A single down-sampling unit (a stage's patch embedding) in stripes of its output rows,
    on odd sizes and a padded batch; with a group norm, which reads the whole map, whole."""
    torch.manual_seed(0)
    conv = PatchConv(8, 16, **unit).to(f64).eval()
    x, grid, want, want_grid = _whole_then_stripes(conv, 8, hw, valid, monkeypatch)
    with torch.no_grad():
        assert row_stripes.stem_stripes.runs((conv, ), x, grid)
        got, got_grid = conv(x, grid)
        grouped = PatchConv(8, 16, 3, 2, dict(type='GN', num_groups=4)).to(f64).eval()
        assert not row_stripes.stem_stripes.runs((grouped, ), x, grid)
    assert (got_grid.hw, got_grid.valid_hw) == (want_grid.hw, want_grid.valid_hw)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


def test_per_pixel_rows_equals_the_whole_norm(monkeypatch):
    """A stage output's norm written into the contiguous output a few rows at a time (a
    padded batch, its padding zeroed) equals the whole norm's contiguous copy."""
    torch.manual_seed(0)
    norm = LayerNorm2d(8).to(f64).eval()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2)
        norm.bias.uniform_(-1, 1)
    x = torch.randn(2, 8, 11, 5, dtype=f64).contiguous(memory_format=torch.channels_last)
    grid = TokenGrid((11, 5), [(11, 5), (7, 3)])

    def fn(t, g):
        return g.zero_padding(norm(t))
    calls = []
    with torch.no_grad():
        want = fn(x, grid).contiguous()
        monkeypatch.setattr(policy, 'STRIPE_MAP_BYTES', 0)
        monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', 3 * 2 * 8 * 5 * 8)  # 3 rows
        got = row_stripes.per_pixel_rows(lambda t, g: calls.append(g.hw) or fn(t, g), x, grid,
                                         [norm])
    assert calls == [(3, 5), (3, 5), (3, 5), (2, 5)]
    assert got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-14)


def test_no_stripes_in_training_or_on_small_maps(stripes):
    set_rows, calls = stripes
    set_rows(1, 1)
    ffn = ConvFFN(6, 24).to(f64)
    x = torch.randn(1, 63, 6, dtype=f64)
    residual.residual_step(x, ffn, TokenGrid((9, 7)))  # training: autograd records
    ffn.eval()
    with torch.no_grad():
        residual.residual_step(x[:, :21], ffn, TokenGrid((3, 7)))  # 3 rows: nothing to cut
        handle = ffn.fc1.register_forward_hook(lambda *args: None)
        residual.residual_step(x, ffn, TokenGrid((9, 7)))  # a hook inside: called whole
        handle.remove()
        assert calls == []
        residual.residual_step(x, ffn, TokenGrid((9, 7)))
    assert calls == [(9, 7)]
