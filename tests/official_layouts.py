"""Synthetic checkpoints in the authors' key layouts, and a functional forward of the
NaLaFormer authors' model written from the facts of their public code (key names, shapes,
order of operations), for the converter parity tests.  Random weights: the tests check the
mapping and the arithmetic, not trained behaviour."""
import math
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F


def _bn(sd, prefix, c, g):
    sd[f'{prefix}.weight'] = 1 + 0.1 * torch.randn(c, generator=g)
    sd[f'{prefix}.bias'] = 0.1 * torch.randn(c, generator=g)
    sd[f'{prefix}.running_mean'] = 0.1 * torch.randn(c, generator=g)
    sd[f'{prefix}.running_var'] = 0.5 + torch.rand(c, generator=g)
    sd[f'{prefix}.num_batches_tracked'] = torch.tensor(7)


def _conv(sd, prefix, cout, cin, k, g, groups=1):
    sd[f'{prefix}.weight'] = torch.randn(cout, cin // groups, k, k, generator=g) / math.sqrt(
        cin // groups * k * k)
    sd[f'{prefix}.bias'] = 0.1 * torch.randn(cout, generator=g)


def _linear(sd, prefix, cout, cin, g):
    sd[f'{prefix}.weight'] = torch.randn(cout, cin, generator=g) / math.sqrt(cin)
    sd[f'{prefix}.bias'] = 0.1 * torch.randn(cout, generator=g)


def _ln(sd, prefix, c, g):
    sd[f'{prefix}.weight'] = 1 + 0.1 * torch.randn(c, generator=g)
    sd[f'{prefix}.bias'] = 0.1 * torch.randn(c, generator=g)


def rope_angle_buffer(head_dim: int, dtype=torch.float32) -> torch.Tensor:
    """``1 / 10000 ** linspace(0, 1, d / 4)``, each entry twice (the authors' buffer).
    Float64 parity tests recompute it in float64 (``as_float64``), as the model does."""
    return (1.0 / 10000 ** torch.linspace(0, 1, head_dim // 4, dtype=dtype)).repeat_interleave(2)


def as_float64(sd: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Float tensors in float64, the RoPE buffers recomputed in float64."""
    out = {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}
    for k in out:
        if k.endswith('RoPE.angle'):
            out[k] = rope_angle_buffer(2 * out[k].numel(), torch.float64)
    return out


def nalaformer_official_state_dict(embed_dims: Sequence[int], depths: Sequence[int],
                                   num_heads: Sequence[int], mlp_ratio: float = 4.0,
                                   num_classes: int = 10, projection: int = 24,
                                   seed: int = 0) -> Dict[str, torch.Tensor]:
    """Every tensor of an authors' ``NALAFORMER`` model, random, in their names and shapes."""
    g = torch.Generator().manual_seed(seed)
    sd: Dict[str, torch.Tensor] = {}
    half = embed_dims[0] // 2
    for idx, (cin, cout) in zip((0, 3, 6, 9), ((3, half), (half, half), (half, half),
                                              (half, embed_dims[0]))):
        _conv(sd, f'patch_embed.proj.{idx}', cout, cin, 3, g)
        _bn(sd, f'patch_embed.proj.{idx + 1}', cout, g)
    for i, (c, depth, heads) in enumerate(zip(embed_dims, depths, num_heads)):
        sd[f'layers.{i}.RoPE.angle'] = rope_angle_buffer(c // heads)
        hidden = int(mlp_ratio * c)
        for j in range(depth):
            p = f'layers.{i}.blocks.{j}'
            _ln(sd, f'{p}.norm1.norm', c, g)
            _ln(sd, f'{p}.norm2.norm', c, g)
            _linear(sd, f'{p}.attn.qkvg', 4 * c, c, g)
            _conv(sd, f'{p}.attn.lepe', c, c, 5, g, groups=c)
            _linear(sd, f'{p}.attn.out_proj', c, c, g)
            _ln(sd, f'{p}.attn.ln', c, g)
            _linear(sd, f'{p}.ffn.fc1', hidden, c, g)
            _linear(sd, f'{p}.ffn.fc2', c, hidden, g)
            _conv(sd, f'{p}.ffn.dwconv', hidden, hidden, 3, g, groups=hidden)
            _conv(sd, f'{p}.cpe1', c, c, 3, g, groups=c)
            _conv(sd, f'{p}.cpe2', c, c, 3, g, groups=c)
            sd[f'{p}.gamma_1'] = 1 + 0.1 * torch.randn(1, c, 1, 1, generator=g)
            sd[f'{p}.gamma_2'] = 1 + 0.1 * torch.randn(1, c, 1, 1, generator=g)
        if i + 1 < len(embed_dims):
            _conv(sd, f'layers.{i}.downsample.reduction', embed_dims[i + 1], c, 3, g)
            _bn(sd, f'layers.{i}.downsample.norm', embed_dims[i + 1], g)
    _linear(sd, 'proj', projection, embed_dims[-1], g)
    _bn(sd, 'norm', projection, g)
    _conv(sd, 'head', num_classes, projection, 1, g)
    return sd


# ------------------------------------------------------------------ the authors' forward
def _sin_cos(h: int, w: int, angle: torch.Tensor):
    """(N, d) sines / cosines: the first d/2 channels rotate with the row, the rest with the
    column, row-major tokens."""
    rows = torch.arange(h, dtype=angle.dtype)[:, None] * angle        # (h, d/2)
    cols = torch.arange(w, dtype=angle.dtype)[:, None] * angle        # (w, d/2)
    ang = torch.cat([rows[:, None].expand(h, w, -1), cols[None].expand(h, w, -1)], -1)
    ang = ang.reshape(h * w, -1)
    return ang.sin(), ang.cos()


def _rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Pairs (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), as complex multiplication."""
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())
    rot = torch.complex(cos[:, ::2], sin[:, ::2])  # the buffer repeats each angle twice
    return torch.view_as_real(z * rot).flatten(-2)


def _attention(sd, p, x, heads, kind, sin, cos, rope_in_nala=True, eps=1e-6):
    b, c, h, w = x.shape
    n, d = h * w, c // heads
    t = x.flatten(2).transpose(1, 2)
    q, k, v, gate = F.linear(t, sd[f'{p}.qkvg.weight'], sd[f'{p}.qkvg.bias']).reshape(
        b, n, 4, c).unbind(2)
    lepe = F.conv2d(v.transpose(1, 2).reshape(b, c, h, w), sd[f'{p}.lepe.weight'],
                    sd[f'{p}.lepe.bias'], padding=2, groups=c).flatten(2).transpose(1, 2)
    q, k, v = (a.reshape(b, n, heads, d).transpose(1, 2) for a in (q, k, v))
    if kind == 'l':
        k3 = k ** 3
        qn = q.norm(dim=-1, keepdim=True)
        power = 3 * (0.5 + torch.tanh(qn))
        parts_q = [(F.relu(q) / qn) ** power, (F.relu(-q) / qn) ** power]
        parts_k = [F.relu(k3), F.relu(-k3)]
        fq, fk = torch.cat(parts_q, -1), torch.cat(parts_k, -1)
        if rope_in_nala:
            rq = torch.cat([_rotate(a, sin, cos) for a in parts_q], -1)
            rk = torch.cat([_rotate(a, sin, cos) for a in parts_k], -1)
        else:
            rq, rk = fq, fk
        z = 1 / (fq @ fk.mean(-2, keepdim=True).transpose(-2, -1) + eps)
        o = rq @ ((rk.transpose(-2, -1) / math.sqrt(n)) @ (v / math.sqrt(n))) * z
    else:
        qr, kr = _rotate(q, sin, cos), _rotate(k, sin, cos)
        o = torch.softmax(d ** -0.5 * qr @ kr.transpose(-2, -1), -1) @ v
    o = o.transpose(1, 2).reshape(b, n, c) + lepe
    o = F.layer_norm(o, (c, ), sd[f'{p}.ln.weight'], sd[f'{p}.ln.bias']) * F.silu(gate)
    o = F.linear(o, sd[f'{p}.out_proj.weight'], sd[f'{p}.out_proj.bias'])
    return o.transpose(1, 2).reshape(b, c, h, w)


def _ln2d(sd, p, x):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1], ), sd[f'{p}.weight'],
                        sd[f'{p}.bias'], eps=1e-6).permute(0, 3, 1, 2)


def _ffn(sd, p, x):
    b, c, h, w = x.shape
    t = F.gelu(F.linear(x.flatten(2).transpose(1, 2), sd[f'{p}.fc1.weight'], sd[f'{p}.fc1.bias']))
    m = t.transpose(1, 2).reshape(b, -1, h, w)
    m = m + F.conv2d(m, sd[f'{p}.dwconv.weight'], sd[f'{p}.dwconv.bias'], padding=1,
                     groups=m.shape[1])
    t = F.linear(m.flatten(2).transpose(1, 2), sd[f'{p}.fc2.weight'], sd[f'{p}.fc2.bias'])
    return t.transpose(1, 2).reshape(b, c, h, w)


def _dwconv3(sd, p, x):
    return F.conv2d(x, sd[f'{p}.weight'], sd[f'{p}.bias'], padding=1, groups=x.shape[1])


def _conv_bn(sd, conv, bn, x, stride):
    x = F.conv2d(x, sd[f'{conv}.weight'], sd[f'{conv}.bias'], stride, 1)
    return F.batch_norm(x, sd[f'{bn}.running_mean'], sd[f'{bn}.running_var'],
                        sd[f'{bn}.weight'], sd[f'{bn}.bias'], False, 0.0, 1e-5)


def nalaformer_official_forward(sd: Dict[str, torch.Tensor], x: torch.Tensor,
                                num_heads: Sequence[int], flags: Sequence[str],
                                rope_in_nala: bool = True) -> List[torch.Tensor]:
    """The authors' model in eval mode on the weights ``sd``: the raw map of every stage
    (after its blocks, before the down-sampling), and the logits last.  ``flags[i]`` is
    ``'l'`` (NaLa) or ``'v'`` (softmax) for stage i."""
    for idx, stride in zip((0, 3, 6, 9), (2, 1, 1, 2)):
        x = _conv_bn(sd, f'patch_embed.proj.{idx}', f'patch_embed.proj.{idx + 1}', x, stride)
        x = F.gelu(x) if idx < 9 else x
    outs = []
    for i, heads in enumerate(num_heads):
        sin, cos = _sin_cos(x.shape[2], x.shape[3], sd[f'layers.{i}.RoPE.angle'].to(x.dtype))
        j = 0
        while f'layers.{i}.blocks.{j}.gamma_1' in sd:
            p = f'layers.{i}.blocks.{j}'
            x = x + _dwconv3(sd, f'{p}.cpe1', x)
            y = _ln2d(sd, f'{p}.norm1.norm', x)
            x = x + sd[f'{p}.gamma_1'] * _attention(sd, f'{p}.attn', y, heads, flags[i], sin,
                                                    cos, rope_in_nala)
            x = x + _dwconv3(sd, f'{p}.cpe2', x)
            x = x + sd[f'{p}.gamma_2'] * _ffn(sd, f'{p}.ffn', _ln2d(sd, f'{p}.norm2.norm', x))
            j += 1
        outs.append(x)
        if f'layers.{i}.downsample.reduction.weight' in sd:
            x = _conv_bn(sd, f'layers.{i}.downsample.reduction', f'layers.{i}.downsample.norm',
                         x, 2)
    t = F.linear(x.flatten(2).transpose(1, 2), sd['proj.weight'], sd['proj.bias'])
    m = t.transpose(1, 2).reshape(x.shape[0], -1, *x.shape[2:])
    m = F.batch_norm(m, sd['norm.running_mean'], sd['norm.running_var'], sd['norm.weight'],
                     sd['norm.bias'], False, 0.0, 1e-5)
    m = F.silu(m).mean((2, 3), keepdim=True)
    outs.append(F.conv2d(m, sd['head.weight'], sd['head.bias']).flatten(1))
    return outs


# ------------------------------------------------------------------ SOFT (fudan-zvg/SOFT)
def soft_official_state_dict(embed_dims: Sequence[int], depths: Sequence[int],
                             num_heads: Sequence[int], num_classes: int = 10,
                             landmark_scale: float = 0.3,
                             seed: int = 0) -> Dict[str, torch.Tensor]:
    """Every tensor of an authors' SOFT / SOFT-Norm classifier (one layout for both), random,
    in their names and shapes: 224-sized position tables, landmark ratios 8/4/2, V-conv
    kernels 9/5/3, stage-4 MLP ratio 4.  ``landmark_scale`` is the weight of the landmark
    LayerNorm: it sets the landmark spread, hence how far A is from I (A = I breaks the
    authors' SOFT-Norm Newton step)."""
    g = torch.Generator().manual_seed(seed)
    sd: Dict[str, torch.Tensor] = {}
    for idx, (cin, cout) in zip((0, 3, 6), ((3, 32), (32, 32), (32, embed_dims[0]))):
        _conv(sd, f'patch_embed1.proj.{idx}', cout, cin, 3, g)
        _bn(sd, f'patch_embed1.proj.{idx + 1}', cout, g)
    for k in (2, 3, 4):
        _conv(sd, f'patch_embed{k}.proj.0', embed_dims[k - 1], embed_dims[k - 2], 3, g)
        _bn(sd, f'patch_embed{k}.proj.1', embed_dims[k - 1], g)
    for k, n in zip((1, 2, 3, 4), (56 * 56, 28 * 28, 14 * 14, 1 + 7 * 7)):
        sd[f'pos_embed{k}'] = 0.1 * torch.randn(1, n, embed_dims[k - 1], generator=g)
    for k, (r, ks) in zip((1, 2, 3), ((8, 9), (4, 5), (2, 3))):
        c, d = embed_dims[k - 1], embed_dims[k - 1] // num_heads[k - 1]
        for j in range(depths[k - 1]):
            p = f'block{k}.{j}.att'
            for name in ('W_q', 'W_v', 'ff'):
                _linear(sd, f'{p}.mha.{name}', c, c, g)
            sd[f'{p}.mha.attn.Qlandmark_op.weight'] = torch.randn(d, d, r, r, generator=g) / (
                r * math.sqrt(d))
            sd[f'{p}.mha.attn.Qnorm_act.0.weight'] = landmark_scale * (
                1 + 0.1 * torch.randn(d, generator=g))
            sd[f'{p}.mha.attn.Qnorm_act.0.bias'] = 0.1 * torch.randn(d, generator=g)
            sd[f'{p}.mha.attn.conv.weight'] = torch.randn(num_heads[k - 1], 1, ks, ks,
                                                          generator=g) / ks
            _ln(sd, f'{p}.norm1', c, g)
            _linear(sd, f'{p}.ff1', 4 * c, c, g)
            _linear(sd, f'{p}.ff2', c, 4 * c, g)
            _ln(sd, f'{p}.norm2', c, g)
    c = embed_dims[3]
    for j in range(depths[3]):
        p = f'block4.{j}'
        _ln(sd, f'{p}.norm1', c, g)
        _linear(sd, f'{p}.attn.q', c, c, g)
        _linear(sd, f'{p}.attn.kv', 2 * c, c, g)
        _linear(sd, f'{p}.attn.proj', c, c, g)
        _ln(sd, f'{p}.norm2', c, g)
        _linear(sd, f'{p}.mlp.fc1', 4 * c, c, g)
        _linear(sd, f'{p}.mlp.fc2', c, 4 * c, g)
    _ln(sd, 'norm', c, g)
    sd['cls_token'] = 0.1 * torch.randn(1, 1, c, generator=g)
    _linear(sd, 'head', num_classes, c, g)
    return sd


def _soft_newton_norm(a: torch.Tensor, iters: int = 20, per_matrix: bool = False):
    """SOFT-Norm's pseudo-inverse: alpha = 2 / (max row sum)^2, halved (<= 10 times) while
    max_col_sum |I - alpha A A| > 1.01, both maxima over the whole batch (``per_matrix``:
    each matrix on its own, as ``newton_init='paper'`` does); then V <- 2V - V A V."""
    def reduce(t):  # (B, h) per-matrix values -> the rule's maximum
        return t if per_matrix else t.amax().expand_as(t)

    eye = torch.eye(a.shape[-1], dtype=a.dtype)
    alpha = 2 / reduce(a.sum(-1).amax(-1)) ** 2
    for _ in range(10):  # a halving stops once the test passes, as their while loop
        err = reduce((eye - alpha[..., None, None] * (a @ a)).abs().sum(-2).amax(-1))
        alpha = torch.where(err > 1.01, alpha / 2, alpha)
    v = alpha[..., None, None] * a
    for _ in range(iters):
        v = 2 * v - v @ a @ v
    return v


def _soft_newton_plain(a: torch.Tensor, iters: int = 20):
    """Plain SOFT's pseudo-inverse: alpha = 0.9 * 2 / (max row sum of A)^2 per matrix, then
    the iteration on A + 0.01 I."""
    alpha = 0.9 * 2 / a.sum(-1).amax(-1) ** 2
    p = a + 0.01 * torch.eye(a.shape[-1], dtype=a.dtype)
    v = alpha[..., None, None] * p
    for _ in range(iters):
        v = 2 * v - v @ p @ v
    return v


def _soft_attention(sd, p, x, hw, heads, ratio, kind, per_matrix):
    b, n, c = x.shape
    d = c // heads
    q = F.linear(x, sd[f'{p}.W_q.weight'], sd[f'{p}.W_q.bias'])
    v = F.linear(x, sd[f'{p}.W_v.weight'], sd[f'{p}.W_v.bias'])
    q, v = (t.reshape(b, n, heads, d).transpose(1, 2) for t in (q, v))
    q = q / math.sqrt(math.sqrt(d))
    lm = F.conv2d(q.reshape(b * heads, *hw, d).permute(0, 3, 1, 2),
                  sd[f'{p}.attn.Qlandmark_op.weight'], stride=ratio)   # no padding: floor
    lm = lm.flatten(2).transpose(1, 2).reshape(b, heads, -1, d)
    lm = F.gelu(F.layer_norm(lm, (d, ), sd[f'{p}.attn.Qnorm_act.0.weight'],
                             sd[f'{p}.attn.Qnorm_act.0.bias']))

    def kernel(a, bb):  # exp(-||a_i - b_j||^2 / 2), expanded as their code does
        sq = a.square().sum(-1)[..., None] + bb.square().sum(-1)[..., None, :]
        return torch.exp(-(sq - 2 * a @ bb.transpose(-1, -2)) / 2)

    k1, k2 = kernel(q, lm), kernel(lm, lm)
    if kind == 'norm':
        dinv = 1 / k2.sum(-1, keepdim=True).sqrt()
        inv = dinv * _soft_newton_norm(k2, per_matrix=per_matrix) * dinv.transpose(-1, -2)
    else:
        inv = _soft_newton_plain(k2)
    out = (k1 @ inv) @ (k1.transpose(-1, -2) @ v)
    w = sd[f'{p}.attn.conv.weight']
    vv = v.reshape(b, heads, *hw, d).permute(0, 4, 1, 2, 3).reshape(b * d, heads, *hw)
    vv = F.conv2d(vv, w, padding=w.shape[-1] // 2, groups=heads)
    out = out + vv.reshape(b, d, heads, *hw).flatten(3).permute(0, 2, 3, 1)
    return F.linear(out.transpose(1, 2).reshape(b, n, c), sd[f'{p}.ff.weight'],
                    sd[f'{p}.ff.bias'])


def _pos(table: torch.Tensor, hw) -> torch.Tensor:
    """(1, s*s, C) -> bilinearly resized (1, h*w, C), align_corners=False."""
    s = int(table.shape[1] ** 0.5)
    grid = table.transpose(1, 2).reshape(1, -1, s, s)
    return F.interpolate(grid, size=hw, mode='bilinear', align_corners=False).flatten(
        2).transpose(1, 2)


def _ln_(sd, p, x, eps):
    return F.layer_norm(x, (x.shape[-1], ), sd[f'{p}.weight'], sd[f'{p}.bias'], eps)


def soft_official_forward(sd: Dict[str, torch.Tensor], x: torch.Tensor,
                          num_heads: Sequence[int], kind: str = 'norm',
                          per_matrix: bool = False) -> List[torch.Tensor]:
    """The authors' SOFT (``kind='plain'``) or SOFT-Norm (``'norm'``) classifier in eval mode
    on the weights ``sd``: the map after each stage's blocks (stage 4: after the final norm,
    class token dropped), then the logits (final norm -> class token -> head)."""
    b, outs = x.shape[0], []
    units = [(f'patch_embed1.proj.{i}', f'patch_embed1.proj.{i + 1}', s)
             for i, s in ((0, 2), (3, 1), (6, 2))]
    for k in (1, 2, 3, 4):
        if k > 1:
            units = [(f'patch_embed{k}.proj.0', f'patch_embed{k}.proj.1', 2)]
        for conv, bn, stride in units:
            x = F.conv2d(x, sd[f'{conv}.weight'], sd[f'{conv}.bias'], stride, 1)
            x = F.relu(F.batch_norm(x, sd[f'{bn}.running_mean'], sd[f'{bn}.running_var'],
                                    sd[f'{bn}.weight'], sd[f'{bn}.bias'], False, 0.0, 1e-5))
        hw, c = tuple(x.shape[2:]), x.shape[1]
        t = x.flatten(2).transpose(1, 2)
        heads = num_heads[k - 1]
        if k < 4:
            t = t + _pos(sd[f'pos_embed{k}'], hw)
            j = 0
            while f'block{k}.{j}.att.norm1.weight' in sd:
                p = f'block{k}.{j}.att'
                a = _soft_attention(sd, f'{p}.mha', t, hw, heads, 2 ** (4 - k), kind, per_matrix)
                t = _ln_(sd, f'{p}.norm1', t + a, 1e-5)
                y = F.linear(t, sd[f'{p}.ff1.weight'], sd[f'{p}.ff1.bias'])
                y = F.linear(F.gelu(y, approximate='tanh'), sd[f'{p}.ff2.weight'],
                             sd[f'{p}.ff2.bias'])
                t = _ln_(sd, f'{p}.norm2', t + y, 1e-5)
                j += 1
            x = t.transpose(1, 2).reshape(b, c, *hw)
            outs.append(x)
            continue
        pe = sd['pos_embed4']
        t = torch.cat([sd['cls_token'].expand(b, -1, -1), t], 1)
        t = t + torch.cat([pe[:, :1], _pos(pe[:, 1:], hw)], 1)
        j, d = 0, c // heads
        while f'block4.{j}.norm1.weight' in sd:
            p = f'block4.{j}'
            y = _ln_(sd, f'{p}.norm1', t, 1e-6)
            q = F.linear(y, sd[f'{p}.attn.q.weight'], sd[f'{p}.attn.q.bias'])
            kv = F.linear(y, sd[f'{p}.attn.kv.weight'], sd[f'{p}.attn.kv.bias'])
            q, kk, v = (z.reshape(b, -1, heads, d).transpose(1, 2)
                        for z in (q, kv[..., :c], kv[..., c:]))
            att = torch.softmax(q @ kk.transpose(-1, -2) * d ** -0.5, -1) @ v
            t = t + F.linear(att.transpose(1, 2).reshape(b, -1, c), sd[f'{p}.attn.proj.weight'],
                             sd[f'{p}.attn.proj.bias'])
            y = _ln_(sd, f'{p}.norm2', t, 1e-6)
            y = F.linear(F.gelu(F.linear(y, sd[f'{p}.mlp.fc1.weight'], sd[f'{p}.mlp.fc1.bias'])),
                         sd[f'{p}.mlp.fc2.weight'], sd[f'{p}.mlp.fc2.bias'])
            t = t + y
            j += 1
        t = _ln_(sd, 'norm', t, 1e-6)
        outs.append(t[:, 1:].transpose(1, 2).reshape(b, c, *hw))
        outs.append(F.linear(t[:, 0], sd['head.weight'], sd['head.bias']))
    return outs


def soft_norm_authors_state_dict(arch, seed=0):
    """A state dict with the key names and shapes of the authors' SOFT-Norm model
    (soft_norm_* in fudan-zvg/SOFT models/softmax_free_vision_transformer.py), written
    from reading that code: conv stem with bias + BN, PVT-style pos_embed1..4 (the last with
    a class slot), block1-3 = SoftmaxFreeTransformerBlock (att.mha.W_q/W_v/ff,
    att.mha.attn.Qlandmark_op/Qnorm_act/conv, att.norm1/2, att.ff1/ff2), block4 = PVT Block
    (attn.q, attn.kv), final norm, cls_token, head."""
    g = torch.Generator().manual_seed(seed)
    dims, heads, depths = arch['embed_dims'], arch['num_heads'], arch['depths']
    sd = {}

    def t(*shape):
        return torch.randn(*shape, generator=g)

    def conv(name, cin, cout):
        sd[name + '.weight'], sd[name + '.bias'] = t(cout, cin, 3, 3), t(cout)

    def bn(name, c):
        sd.update({name + '.weight': t(c), name + '.bias': t(c), name + '.running_mean': t(c),
                   name + '.running_var': t(c).abs() + 0.5,
                   name + '.num_batches_tracked': torch.tensor(7)})

    def lin(name, cin, cout):
        sd[name + '.weight'], sd[name + '.bias'] = t(cout, cin), t(cout)

    def ln(name, c):
        sd[name + '.weight'], sd[name + '.bias'] = t(c), t(c)

    conv('patch_embed1.proj.0', 3, 32), bn('patch_embed1.proj.1', 32)
    conv('patch_embed1.proj.3', 32, 32), bn('patch_embed1.proj.4', 32)
    conv('patch_embed1.proj.6', 32, dims[0]), bn('patch_embed1.proj.7', dims[0])
    for k in (2, 3, 4):
        conv(f'patch_embed{k}.proj.0', dims[k - 2], dims[k - 1])
        bn(f'patch_embed{k}.proj.1', dims[k - 1])
    for k, n in zip((1, 2, 3, 4), (3136, 784, 196, 50)):
        sd[f'pos_embed{k}'] = t(1, n, dims[k - 1])
    for k, (r, ks) in zip((1, 2, 3), ((8, 9), (4, 5), (2, 3))):
        c, h = dims[k - 1], heads[k - 1]
        for j in range(depths[k - 1]):
            p = f'block{k}.{j}.att.'
            lin(p + 'mha.W_q', c, c), lin(p + 'mha.W_v', c, c), lin(p + 'mha.ff', c, c)
            sd[p + 'mha.attn.Qlandmark_op.weight'] = t(c // h, c // h, r, r)
            ln(p + 'mha.attn.Qnorm_act.0', c // h)
            sd[p + 'mha.attn.conv.weight'] = t(h, 1, ks, ks)
            ln(p + 'norm1', c), lin(p + 'ff1', c, 4 * c), lin(p + 'ff2', 4 * c, c)
            ln(p + 'norm2', c)
    c = dims[3]
    for j in range(depths[3]):
        p = f'block4.{j}.'
        ln(p + 'norm1', c), lin(p + 'attn.q', c, c), lin(p + 'attn.kv', c, 2 * c)
        lin(p + 'attn.proj', c, c), ln(p + 'norm2', c)
        lin(p + 'mlp.fc1', c, 4 * c), lin(p + 'mlp.fc2', 4 * c, c)
    ln('norm', c)
    sd['cls_token'] = t(1, 1, c)
    lin('head', c, 1000)
    return sd
