"""InfSA diagnostics: Neumann / Katz identities (§3.1-3.3), eigenvector alignment (§4.5),
attention maps and the PNG overlay, and the attention-map command-line tool."""
import sys

import numpy as np
import pytest
import torch

from mmlinattn.analysis import (attention_maps, eigenvector_alignment, katz_centrality,
                                model_eigenvector_alignment, neumann_kernel, power_iteration,
                                save_attention_overlay, summarize_alignment)
from mmlinattn.models.backbones.infvit import InfViT, InfViTPlain
from mmlinattn.models.layers.infsa_attention import LinearInfSA
from mmlinattn.ops import infsa_attention_matrix
from tool_runs import tool as tool_process

D64 = dict(dtype=torch.float64)


def small_a_hat(n=64, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, n, d, generator=g, **D64)
    k = torch.randn(1, 1, n, d, generator=g, **D64)
    return infsa_attention_matrix(q, k, eps=0.0)[0, 0]


@pytest.mark.parametrize('gamma', [0.3, 0.7, 0.95])
def test_neumann_identity_truncated_series_converges(gamma):
    """Σ_{t=1..T} (γÂ)^t -> (I − γÂ)⁻¹ − I (Eq. 7), with the tail bounded by γ^{T+1}/(1−γ)
    because ρ(Â) <= ‖Â‖₂ <= ‖Â‖_F = 1."""
    a_hat = small_a_hat()
    assert torch.linalg.eigvals(a_hat).abs().max() <= 1.0 + 1e-12
    exact = torch.linalg.inv(torch.eye(64, **D64) - gamma * a_hat) - torch.eye(64, **D64)
    torch.testing.assert_close(neumann_kernel(a_hat, gamma), exact)
    partial, power = torch.zeros(64, 64, **D64), torch.eye(64, **D64)
    for t in range(1, 401):
        power = power @ (gamma * a_hat)
        partial = partial + power
        if t in (1, 5, 20, 400):
            err = torch.linalg.matrix_norm(partial - exact, 2)
            assert err <= gamma ** (t + 1) / (1 - gamma) + 1e-12
    assert err < 1e-8
    assert torch.linalg.matrix_norm(gamma * a_hat - exact, 2) > 1e-3  # T = 1 is not enough


def test_katz_centrality_from_linear_solves():
    """c_out = (I − γÂ)⁻¹ 1 and c_in = (I − γÂ)⁻ᵀ 1 (§3.3, Eq. 15)."""
    a_hat, gamma = small_a_hat(32), 0.7
    c_out, c_in = katz_centrality(a_hat, gamma)
    m = torch.eye(32, **D64) - gamma * a_hat
    ones = torch.ones(32, 1, **D64)
    torch.testing.assert_close(c_out, torch.linalg.solve(m, ones)[:, 0])
    torch.testing.assert_close(c_in, torch.linalg.solve(m.T, ones)[:, 0])


def test_power_iteration_finds_perron_vector():
    q = torch.randn(40, 6, **D64) + 1.0  # ReLU(QQᵀ) is symmetric and positive here
    a_hat = infsa_attention_matrix(q[None, None], q[None, None], eps=0.0)[0, 0]
    evals, evecs = torch.linalg.eigh(a_hat)
    perron = evecs[:, -1].abs()
    torch.testing.assert_close(power_iteration(a_hat), perron / perron.sum())


def test_alignment_is_exact_for_rank_one_positive_queries():
    """Q_i = s_i u with s > 0: Â ∝ s sᵀ so v ∝ s, and α ∝ s, a ∝ s: cos(a, v) = 1, while
    the uniform baseline is below 1 for non-constant s."""
    s = torch.rand(2, 3, 30, 1, **D64) + 0.1
    u = torch.randn(1, 3, 1, 5, **D64)
    res = eigenvector_alignment(s * u)
    assert len(res['cos_a']) == 6 and res['degenerate'] == 0
    for key in ('cos_a', 'spearman_a', 'cos_alpha', 'spearman_alpha'):
        assert min(res[key]) > 1 - 1e-9, key
    assert max(res['cos_uniform']) < 0.99
    summary = summarize_alignment(res)
    assert summary['samples'] == 6 and summary['cos_a'][0] == pytest.approx(1.0)


def test_alignment_baselines_on_random_queries():
    """Zero-mean isotropic Q: a is one power step, far from exact (cos(a, v) ~0.74)."""
    res = summarize_alignment(eigenvector_alignment(torch.randn(4, 8, 197, 16)))
    assert 0.5 < res['cos_a'][0] < 0.95
    assert 0.5 < res['cos_uniform'][0] < 1.0
    assert res['samples'] + res['degenerate'] == 32


def test_alignment_drops_padded_tokens():
    q = torch.randn(1, 2, 20, 4, **D64)
    qp = torch.cat([q, 10 * torch.randn(1, 2, 5, 4, **D64)], 2)
    valid = torch.arange(25)[None] < 20
    assert eigenvector_alignment(qp, valid) == eigenvector_alignment(q)


def test_model_alignment_and_attention_maps_pyramid():
    arch = dict(embed_dims=(16, 32, 48, 64), depths=(1, 1, 1, 1), mlp_ratios=(2, 2, 2, 2))
    model = InfViT(arch=arch, stage_mixers=('linear', 'linear', 'linear', 'pure')).eval()
    x = torch.randn(1, 3, 64, 96)
    maps = attention_maps(model, x)
    assert {k: tuple(v.shape) for k, v in maps.items()} == {
        'stages.0.blocks.0.attn': (1, 16, 24), 'stages.1.blocks.0.attn': (1, 8, 12),
        'stages.2.blocks.0.attn': (1, 4, 6), 'stages.3.blocks.0.attn': (1, 2, 3)}
    for m in maps.values():
        assert m.min() == 0 and m.max() == 1

    # A model whose queries have a known alignment: with W_q = U wᵀ and b_q = c U, every
    # head's query is Q_i = s_i u_h, s_i = wᵀx_i + c > 0, so (as in the rank-one test
    # above) a ∝ α ∝ v ∝ s and cos = 1, while cos(1, v) = Σs / (√T ‖s‖) follows from the
    # block's own input tokens x_i, captured here by a hook.
    model = model.double()
    gen = torch.Generator().manual_seed(0)
    s_by_block = {}
    for name, m in model.named_modules():
        if isinstance(m, LinearInfSA):
            dim = m.q.weight.shape[0]
            u = torch.rand(dim, generator=gen, dtype=torch.float64) + 0.5
            w = 0.1 * torch.randn(dim, generator=gen, dtype=torch.float64)
            with torch.no_grad():
                m.q.weight.copy_(u[:, None] * w[None, :])
                m.q.bias.copy_(3.0 * u)
            m.register_forward_pre_hook(
                lambda mod, args, name=name, w=w: s_by_block.__setitem__(name,
                                                                         args[0] @ w + 3.0))
    res = model_eigenvector_alignment(model, x.double(), num_iters=50)
    blocks = {'stages.0.blocks.0.attn', 'stages.1.blocks.0.attn', 'stages.2.blocks.0.attn'}
    assert set(res) == blocks | {'all'} and set(s_by_block) == blocks
    assert res['all']['samples'] == 1 + 2 + 3
    for name in blocks:
        s = s_by_block[name][0]                                        # (T,)
        assert s.min() > 0 and s.std() > 1e-3                          # the premise holds
        expected_uniform = (s.sum() / (s.numel() ** 0.5 * s.norm())).item()
        assert expected_uniform < 1 - 1e-6                             # not trivially 1
        assert res[name]['cos_uniform'][0] == pytest.approx(expected_uniform, abs=1e-9)
        for key in ('cos_a', 'cos_alpha', 'spearman_a', 'spearman_alpha'):
            assert res[name][key][0] == pytest.approx(1.0, abs=1e-9), (name, key)


@pytest.mark.parametrize('mixer', ['linear', 'pure'])
def test_attention_maps_plain_drop_class_token(mixer):
    model = InfViTPlain(arch=dict(embed_dims=32, num_layers=2, num_heads=4, mlp_ratio=2.0),
                        mixer=mixer).eval()
    maps = attention_maps(model, torch.randn(2, 3, 80, 48))
    assert list(maps) == ['stages.0.attn', 'stages.1.attn']
    assert all(tuple(m.shape) == (2, 5, 3) for m in maps.values())


def test_overlay_png(tmp_path):
    """A grid (4 columns: image + 5 maps -> 2 rows), readable titles, one colour bar."""
    from PIL import Image
    from mmlinattn.analysis.infsa import panel_title
    assert panel_title('backbone.stages.1.blocks.0.attn') == 'stage 2, block 1'
    assert panel_title('stages.3.attn') == 'block 4'
    img = np.zeros((40, 60, 3), np.uint8)
    maps = {f'stages.0.blocks.{j}.attn': torch.full((5, 6), 0.0) for j in range(5)}
    maps['stages.0.blocks.4.attn'] = torch.ones(5, 6)  # one panel fully at the top colour
    path = save_attention_overlay(img, maps, str(tmp_path / 'attn.png'))
    with Image.open(path) as png:
        rgb = np.asarray(png.convert('RGB')).astype(int)
    h, w, _ = rgb.shape
    assert 0.3 < h / w < 0.9, (h, w)  # two rows of four, not a 1 x 6 strip
    # the colour bar: a column right of the panels whose colour runs from viridis's yellow
    # (top) to its purple (bottom)
    yellow, purple = np.array([253, 231, 37]), np.array([68, 1, 84])
    def near(c, ref):
        return np.abs(c - ref).sum(-1) < 60
    cols = [x for x in range(int(0.8 * w), w) if near(rgb[:, x], yellow).any()
            and near(rgb[:, x], purple).any()]
    assert cols, 'no colour bar found'
    bar = rgb[:, cols[len(cols) // 2]]
    assert np.flatnonzero(near(bar, yellow)).mean() < np.flatnonzero(near(bar, purple)).mean()


def test_attention_map_tool(tmp_path):
    """The tool's PNG, read back: the grid's size (4 columns, image + 8 maps -> 3 rows, 2.6 in
    each, at 120 dpi), and in every panel after the first (the plain image) the map over the
    image: removing the image at opacity 0.5 leaves viridis colours, peaking at 1, not
    constant, far from the plain image where the map is high."""
    from png_checks import heat_under_overlay, panels, read_rgb
    out = tmp_path / 'demo.png'
    proc = tool_process([sys.executable, 'tools/analysis_tools/infsa_attention_map.py',
                         '--demo', '--size', '64', '--out', str(out), '--alignment'])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert 'cos(1,v)' in text and 'cos(alpha,v)' in text and '\nall ' in text
    maps = int(text.split('(')[1].split()[0])
    pixels = read_rgb(out)
    rows = -(-(maps + 1) // 4)
    assert pixels.shape[:2] == (round((2.6 * rows + 0.9) * 120), round((2.6 * 4 + 1.0) * 120))
    image, *overlays = [p for p in panels(pixels) if p[3] - p[2] > 100]
    assert len(overlays) == maps
    plain = pixels[image[0]:image[1], image[2]:image[3]]
    for y0, y1, x0, x1 in overlays:
        panel = pixels[y0:y1, x0:x1]
        value, dist = heat_under_overlay(panel, plain, 0.5)
        assert np.percentile(dist, 90) < 25
        assert value.max() > 0.95 and value.std() > 0.02
        h, w = value.shape
        high = value > 0.9
        assert np.abs(panel[:h, :w][high] - plain[:h, :w][high]).sum(-1).mean() > 60
