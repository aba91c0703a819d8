"""The NaLaFormer authors' checkpoint layout -> :class:`~mmlinattn.models.NaLaFormer` keys.

Layout of the authors' public ``NALAFORMER_*`` models (their ``NALA.py``; NaLaFormer,
arXiv 2506.21137): stem ``patch_embed.proj.{0..10}`` (conv / BN / GELU, convs with bias),
stages ``layers.{i}.blocks.{j}``, down-samplers ``layers.{i}.downsample.{reduction,norm}``
(conv with bias + BN) at the end of stages 1-3, a RoPE frequency buffer
``layers.{i}.RoPE.angle`` per stage, and the classifier head ``proj`` (Linear C -> 1024),
``norm`` (BN), ``head`` (1x1 conv).
"""
import re
from typing import Dict, Tuple

import torch

from .common import StateDict, downsampler_key, fold_conv_bias_into_bn, rename_prefix

# stem Sequential index -> our ConvStem unit (conv at 0/3/6/9, its BN right after)
_STEM = {0: 0, 3: 1, 6: 2, 9: 3}
_BLOCK = (('norm1.norm.', 'norm1.'), ('norm2.norm.', 'norm2.'), ('attn.out_proj.', 'attn.proj.'),
          ('attn.ln.', 'attn.norm.'), ('attn.qkvg.', 'attn.qkvg.'), ('attn.lepe.', 'attn.lepe.'),
          ('ffn.', 'ffn.'), ('cpe1.', 'cpe1.'), ('cpe2.', 'cpe2.'))
HEAD_PREFIXES = ('proj.', 'norm.', 'head.')


def rope_frequencies(length: int, theta: float = 10000.0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The authors' per-stage ``RoPE.angle``: ``theta ** -linspace(0, 1, length / 2)`` with
    every entry repeated twice (one per channel of a rotated pair), in ``dtype`` (their
    buffer is float32; not the default dtype, which may be float64)."""
    return (theta ** -torch.linspace(0, 1, length // 2, dtype=dtype)).repeat_interleave(2)


def _check_rope(key: str, angle: torch.Tensor) -> None:
    """The buffer is recomputed from (H, W) here; refuse a checkpoint whose differs."""
    expected = rope_frequencies(angle.numel(), dtype=torch.float32)   # compared as float32
    if angle.dim() != 1 or angle.numel() % 2 or not torch.allclose(
            angle.float(), expected, rtol=1e-6, atol=0):
        raise ValueError(f'{key}: the RoPE frequencies differ from theta ** -linspace(0, 1, '
                         f'd / 4) (each twice) that mmlinattn computes; this checkpoint is '
                         f'not in the NaLaFormer authors\' layout')


def _convert_key(key: str) -> str:
    """Our name for one of the authors' backbone keys (unknown keys unchanged)."""
    m = re.fullmatch(r'patch_embed\.proj\.(\d+)\.(.+)', key)
    if m:
        idx = int(m.group(1))
        if idx in _STEM:
            return f'patch_embeds.0.{_STEM[idx]}.conv.{m.group(2)}'
        if idx - 1 in _STEM:
            return f'patch_embeds.0.{_STEM[idx - 1]}.norm.{m.group(2)}'
        return key
    m = re.fullmatch(r'layers\.(\d+)\.downsample\.(reduction|norm)\.(.+)', key)
    if m:
        return downsampler_key(int(m.group(1)) + 1, m.group(2) == 'reduction', m.group(3))
    m = re.fullmatch(r'layers\.(\d+)\.blocks\.(\d+)\.(.+)', key)
    if m:
        rest = m.group(3)
        new = {'gamma_1': 'gamma1', 'gamma_2': 'gamma2'}.get(rest) or rename_prefix(rest, _BLOCK)
        if new is not None:
            return f'stages.{m.group(1)}.blocks.{m.group(2)}.{new}'
    return key


def checkpoint_depths(state_dict: StateDict) -> Tuple[int, ...]:
    """Blocks per stage of an authors' checkpoint (0 where a stage has none; empty when the
    checkpoint has no blocks)."""
    found: Dict[int, int] = {}
    for key in state_dict:
        m = re.match(r'layers\.(\d+)\.blocks\.(\d+)\.', key)
        if m:
            i, j = int(m.group(1)), int(m.group(2))
            found[i] = max(found.get(i, 0), j + 1)
    return tuple(found.get(i, 0) for i in range(max(found, default=-1) + 1))


def convert_nalaformer_checkpoint(state_dict: StateDict) -> Tuple[StateDict, StateDict]:
    """Split an authors' NaLaFormer checkpoint into (backbone, head) dicts in our names.

    * renames: stem ``patch_embed.proj.{0,3,6,9}`` / ``{1,4,7,10}`` ->
      ``patch_embeds.0.{0..3}.conv`` / ``.norm``; ``layers.{i}.downsample.reduction`` /
      ``.norm`` -> ``patch_embeds.{i+1}.conv`` / ``.norm``; in blocks ``norm{1,2}.norm`` ->
      ``norm{1,2}``, ``attn.out_proj`` -> ``attn.proj``, ``attn.ln`` -> ``attn.norm``;
    * LayerScale ``gamma_{1,2}`` (1, C, 1, 1) -> ``gamma{1,2}`` (C);
    * the conv biases in front of every BatchNorm are folded into its running mean
      (:func:`~.common.fold_conv_bias_into_bn`: exact);
    * ``layers.{i}.RoPE.angle`` is checked against the frequencies we compute and dropped;
    * the head (``proj``, ``norm``, ``head``) goes to the second dict, in the names of
      :class:`mmlinattn.timm.classifier.MapHead` (``head_type='nala'``): ``proj`` as the
      1x1 conv ``head.pre.0``, ``norm`` -> ``head.pre.1``, the 1x1 conv ``head`` as the
      Linear ``head.fc``.

    Unknown keys stay in the backbone dict unchanged, so the loader reports them.
    """
    out: StateDict = {}
    head: StateDict = {}
    for key, val in state_dict.items():
        if re.fullmatch(r'layers\.\d+\.RoPE\.angle', key):
            _check_rope(key, val)
        elif key.startswith(HEAD_PREFIXES):
            head[_head_key(key)] = _head_tensor(key, val)
        elif re.fullmatch(r'layers\.\d+\.blocks\.\d+\.gamma_[12]', key):
            out[_convert_key(key)] = val.flatten()
        else:
            out[_convert_key(key)] = val
    for key in [k for k in out if re.fullmatch(r'patch_embeds\.\d+(\.\d+)?\.conv\.bias', k)]:
        fold_conv_bias_into_bn(out, key, key[:-len('conv.bias')] + 'norm')
    return out, head


def _head_key(key: str) -> str:
    prefix, rest = key.split('.', 1)
    return {'proj': 'head.pre.0.', 'norm': 'head.pre.1.', 'head': 'head.fc.'}[prefix] + rest


def _head_tensor(key: str, val: torch.Tensor) -> torch.Tensor:
    """Linear (out, in) <-> 1x1 conv (out, in, 1, 1) where the two layouts differ."""
    if key == 'proj.weight':
        return val[:, :, None, None]
    if key == 'head.weight':
        return val.flatten(1)
    return val


def nalaformer_classifier_state_dict(state_dict: StateDict) -> Dict[str, torch.Tensor]:
    """An authors' classifier checkpoint as a state dict of our timm classifier
    (:class:`~mmlinattn.timm.classifier.LinAttnClassifier` with the ``'nala'`` head)."""
    backbone, head = convert_nalaformer_checkpoint(state_dict)
    return dict({f'backbone.{k}': v for k, v in backbone.items()}, **head)
