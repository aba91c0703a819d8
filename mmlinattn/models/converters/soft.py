"""The SOFT authors' checkpoint layout -> :class:`~mmlinattn.models.SOFT` keys.

Lu et al., "Softmax-free Linear Transformers" (IJCV 2024, arXiv 2207.03341).  The authors'
released ImageNet models (github.com/fudan-zvg/SOFT: ``soft_norm_*`` = SOFT-Norm, and the
plain ``soft_*`` of the NeurIPS 2021 release, e.g. ``SOFT_Tiny``) share one key layout; they
differ only in how the attention computes (symmetric normalisation, Newton step): model
options (``OFFICIAL_PRESETS`` in :mod:`mmlinattn.models.backbones.soft`), not keys.

Layout: conv stem ``patch_embed1.proj.{0,1,3,4,6,7}`` (convs with bias, BN), down-samplers
``patch_embed{2,3,4}.proj.{0,1}``, position tables ``pos_embed{1..4}`` (1, h*w, C) (the last
with a class slot first), SOFT blocks ``block{1,2,3}.{j}.att.*``, softmax blocks
``block4.{j}.*`` (``attn.q`` + ``attn.kv``), ``cls_token``, final ``norm``, ``head``.
"""
import re
from typing import Dict, Optional, Tuple

import torch

from .common import StateDict, downsampler_key, rename_prefix

_STEM_UNITS = {'0': '0.conv', '1': '0.norm', '3': '1.conv', '4': '1.norm', '6': '2.conv',
               '7': '2.norm'}
_SOFT_BLOCK = (('mha.W_q.', 'attn.qk.'), ('mha.W_v.', 'attn.v.'), ('mha.ff.', 'attn.proj.'),
               ('mha.attn.Qlandmark_op.', 'attn.sampler.conv.'),
               ('mha.attn.Qnorm_act.0.', 'attn.sampler.norm.'),
               ('mha.attn.conv.', 'attn.v_conv.'), ('norm1.', 'norm1.'), ('norm2.', 'norm2.'),
               ('ff1.', 'mlp.fc1.'), ('ff2.', 'mlp.fc2.'))


def _convert_key(key: str) -> Optional[str]:
    """Our name for one of the authors' keys (not pos/cls/q/kv/norm/head); None if unknown."""
    m = re.fullmatch(r'patch_embed1\.proj\.(\d+)\.(.+)', key)
    if m and m.group(1) in _STEM_UNITS:
        return f'patch_embeds.0.{_STEM_UNITS[m.group(1)]}.{m.group(2)}'
    m = re.fullmatch(r'patch_embed([234])\.proj\.([01])\.(.+)', key)
    if m:
        return downsampler_key(int(m.group(1)) - 1, m.group(2) == '0', m.group(3))
    m = re.fullmatch(r'block([123])\.(\d+)\.att\.(.+)', key)
    if m:
        new = rename_prefix(m.group(3), _SOFT_BLOCK)
        return None if new is None else f'stages.{int(m.group(1)) - 1}.blocks.{m.group(2)}.{new}'
    m = re.fullmatch(r'block4\.(\d+)\.((?:norm[12]|attn\.proj|mlp\.fc[12])\.(?:weight|bias))',
                     key)
    if m:
        return f'stages.3.blocks.{m.group(1)}.{m.group(2)}'
    return None


def _tokens_to_grid(key: str, pe: torch.Tensor) -> torch.Tensor:
    """(1, h*w, C) position table -> (1, C, h, w) for a square h = w."""
    n = pe.shape[1]
    s = int(round(n ** 0.5))
    if pe.dim() != 3 or s * s != n:
        raise ValueError(f'{key}: expected a (1, h*w, C) position table with a square grid, '
                         f'got shape {tuple(pe.shape)}')
    return pe.transpose(1, 2).reshape(pe.shape[0], pe.shape[2], s, s)


def checkpoint_depths(state_dict: StateDict) -> Tuple[int, ...]:
    """Blocks per stage of an authors' checkpoint (0 where a stage has none)."""
    return tuple(len({k.split('.')[1] for k in state_dict if k.startswith(f'block{i}.')})
                 for i in range(1, 5))


def convert_soft_checkpoint(state_dict: StateDict,
                            keep_final_norm: bool = True) -> Tuple[StateDict, StateDict]:
    """Split an authors' SOFT / SOFT-Norm checkpoint into (backbone, head) dicts in our names.

    * ``patch_embed1.proj.{0,1,3,4,6,7}`` -> ``patch_embeds.0.{0,1,2}.{conv,norm}``;
      ``patch_embed{2,3,4}.proj.{0,1}`` -> ``patch_embeds.{1,2,3}.{conv,norm}`` (our convs
      keep their bias: ``conv_bias`` in the ``*-norm`` archs);
    * ``pos_embed{1,2,3}`` (1, h*w, C) -> ``stages.{0,1,2}.pos_embed.weight`` (1, C, h, w);
      ``pos_embed4`` (1, 1 + h*w, C): the grid part -> ``stages.3.pos_embed.weight``, the
      class slot is added to ``cls_token`` -> ``stages.3.cls_token`` (the two are only ever
      summed in their forward);
    * SOFT blocks ``block{k}.{j}.att.``: ``mha.W_q`` -> ``attn.qk``, ``mha.W_v`` -> ``attn.v``,
      ``mha.ff`` -> ``attn.proj``, ``mha.attn.Qlandmark_op`` -> ``attn.sampler.conv``,
      ``mha.attn.Qnorm_act.0`` -> ``attn.sampler.norm``, ``mha.attn.conv`` -> ``attn.v_conv``,
      ``norm1``/``norm2`` -> same, ``ff1``/``ff2`` -> ``mlp.fc1``/``mlp.fc2``;
    * softmax blocks ``block4.{j}``: ``attn.q`` and ``attn.kv`` concatenated (rows q, k, v)
      into ``attn.qkv``; ``norm1``, ``norm2``, ``attn.proj``, ``mlp.fc1/2`` keep their names;
    * ``norm`` -> ``out_norms.3`` (dropped unless ``keep_final_norm``);
    * ``head`` -> the second dict as ``head.fc`` (:class:`mmlinattn.timm.classifier.TokenHead`).

    Unknown keys stay in the backbone dict unchanged, so the loader reports them.
    """
    out: StateDict = {}
    head: StateDict = {}
    qkv: Dict[str, Dict[str, torch.Tensor]] = {}
    cls_token = cls_pos = None
    for key, val in state_dict.items():
        m = re.fullmatch(r'pos_embed([1234])', key)
        if m:
            k = int(m.group(1))
            if k == 4:
                cls_pos, val = val[:, :1], val[:, 1:]
            out[f'stages.{k - 1}.pos_embed.weight'] = _tokens_to_grid(key, val)
            continue
        m = re.fullmatch(r'block4\.(\d+)\.attn\.(q|kv)\.(weight|bias)', key)
        if m:
            qkv.setdefault(f'stages.3.blocks.{m.group(1)}.attn.qkv.{m.group(3)}',
                           {})[m.group(2)] = val
        elif key == 'cls_token':
            cls_token = val
        elif key in ('norm.weight', 'norm.bias'):
            if keep_final_norm:
                out[f'out_norms.3.{key[5:]}'] = val
        elif key.startswith('head.'):
            head[f'head.fc.{key[5:]}'] = val
        else:
            new = _convert_key(key)
            out[new if new is not None else key] = val
    if cls_token is not None:
        out['stages.3.cls_token'] = cls_token + cls_pos if cls_pos is not None else cls_token
    for new, parts in qkv.items():
        if set(parts) != {'q', 'kv'}:
            raise ValueError(f'checkpoint has only attn.{"".join(parts)} for {new}; the '
                             f'softmax blocks need both attn.q and attn.kv')
        out[new] = torch.cat([parts['q'], parts['kv']], dim=0)
    return out, head


def soft_classifier_state_dict(state_dict: StateDict) -> StateDict:
    """An authors' classifier checkpoint as a state dict of our timm classifier
    (:class:`~mmlinattn.timm.classifier.LinAttnClassifier` with the ``'cls_token'`` head)."""
    backbone, head = convert_soft_checkpoint(state_dict)
    return dict({f'backbone.{k}': v for k, v in backbone.items()}, **head)
