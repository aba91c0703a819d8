"""What the benchmark measures: model specs (``NAME:ARCH[:key=value ...]`` for ours, a peer
name for mmdet's backbones), their default sets and input sizes."""
import ast
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

__all__ = ['PEERS', 'FIXED_SIZE_EXPORT', 'DEFAULT_MODELS',
           'CPU_SIZES', 'QUICK_SIZES', 'GPU_SIZES',
           'GPU_EXTRA_SIZES', 'INTERLEAVE_ROUNDS', 'ModelSpec', 'parse_model_spec',
           'parse_size', 'build_model']

#: peers: canonical name -> (mmdet class, constructor keywords, arch label)
PEERS: Dict[str, Tuple[str, dict, str]] = {
    'Swin-T': ('SwinTransformer', {}, 'tiny'),
    'PVTv2-b1': ('PyramidVisionTransformerV2', dict(embed_dims=64, num_layers=[2, 2, 2, 2]),
                 'b1'),
    'PVTv2-b2': ('PyramidVisionTransformerV2', dict(embed_dims=64, num_layers=[3, 4, 6, 3]),
                 'b2'),
    'ResNet-50': ('ResNet', dict(depth=50), '50'),
}
#: peers whose mmdet forward takes Python ints from H and W (Swin's window padding): a
#: dynamic ONNX export of them fails only after a whole trace, so they are exported per
#: size straight away
FIXED_SIZE_EXPORT = frozenset({'Swin-T'})
_PEER_ALIASES = {k.lower().replace('-', '').replace('_', ''): k for k in PEERS}
_PEER_ALIASES.update({'swin': 'Swin-T', 'swintiny': 'Swin-T', 'r50': 'ResNet-50',
                      'resnet50': 'ResNet-50'})

#: default model set: every family's ``small`` (SOFT++ with the landmark cap and with the
#: paper's rule, by Newton-Schulz and by Cholesky), the paper's plain InfViT, and the peers.
DEFAULT_MODELS = ['SOFT:small:max_landmarks=49', 'SOFT:small', "SOFT:small:pinv='cholesky'",
                  'NaLaFormer:small', 'InfViT:small', 'LDN:small', 'InfViTPlain:l4', 'Swin-T',
                  'PVTv2-b1', 'PVTv2-b2', 'ResNet-50']
CPU_SIZES = [512, 1024, 2048]
QUICK_SIZES = [256, 512]
GPU_SIZES = [512, 1024, 2048, 4096, 8192]
#: extra sizes per model label on CUDA (the InfViT paper's headline: 9216^2, 4 layers)
GPU_EXTRA_SIZES = {'InfViTPlain:l4': [9216]}
#: rounds of the interleaved timing of a full CPU run (``--interleave``)
INTERLEAVE_ROUNDS = 4


@dataclass
class ModelSpec:
    """A parsed ``--models`` entry."""
    label: str
    model: str                       # registry name or peer name
    arch: Any = None                 # arch name / dict (ours) or peer arch label
    kwargs: Dict[str, Any] = field(default_factory=dict)
    peer: bool = False

    @property
    def arch_label(self) -> str:
        base = self.arch if isinstance(self.arch, str) else json.dumps(self.arch)
        if self.kwargs:
            base += '[' + ','.join(f'{k}={v!r}' for k, v in self.kwargs.items()) + ']'
        return base


def _split_top(text: str, sep: str = ':') -> List[str]:
    """Split on ``sep`` outside brackets and quotes (an arch dict may contain colons)."""
    parts, depth, quote, cur = [], 0, None, ''
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in '\'"':
            quote = ch
        elif ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        cur += ch
    parts.append(cur)
    return parts


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_model_spec(text: str) -> ModelSpec:
    """``NAME[:ARCH][:key=value ...]`` -> :class:`ModelSpec`.

    Ours: a registry name of ``mmlinattn.MODELS``, an arch name or dict, then constructor
    keywords, values parsed as Python literals (``SOFT:small:max_landmarks=64``); the peers
    by name, optionally with keywords (``Swin-T:embed_dims=24``).
    """
    parts = [p.strip() for p in _split_top(text.strip())]
    if not parts[0]:
        raise ValueError(f'model spec {text!r}: empty model name; expected NAME[:ARCH]'
                         f'[:key=value ...] or one of {list(PEERS)}')
    name, rest = parts[0], parts[1:]
    arch = None
    if rest and (rest[0].startswith('{') or '=' not in rest[0]):
        arch = _literal(rest[0]) if rest[0].startswith('{') else rest[0]
        rest = rest[1:]
    kwargs = {}
    for item in rest:
        key, eq, val = item.partition('=')
        if not eq or not key.strip().isidentifier():
            raise ValueError(f'model spec {text!r}: {item!r} is not key=value')
        kwargs[key.strip()] = _literal(val.strip())
    peer = _PEER_ALIASES.get(name.lower().replace('-', '').replace('_', ''))
    if peer is not None:
        if arch is not None:
            raise ValueError(f'model spec {text!r}: the peer {peer} takes no arch field, only '
                             f'key=value overrides')
        return ModelSpec(text, peer, PEERS[peer][2], kwargs, peer=True)
    if arch is None:
        raise ValueError(f'model spec {text!r}: our backbones need an arch, e.g. '
                         f'{name}:small; peers are {list(PEERS)}')
    return ModelSpec(text, name, arch, kwargs)


def build_model(spec: ModelSpec):
    """Build the backbone of a spec (imports mmdet only for peers)."""
    if spec.peer:
        from mmlinattn.engine.runner import build_in_scope
        cls_name, kwargs, _ = PEERS[spec.model]
        return build_in_scope(dict(type=cls_name, **{**kwargs, **spec.kwargs}), 'mmdet')
    import mmlinattn.models  # noqa: F401  (registers the backbones)
    from mmlinattn.registry import MODELS
    return MODELS.build(dict(type=spec.model, arch=spec.arch, **spec.kwargs))


def parse_size(text: str) -> Tuple[int, int]:
    """``S`` or ``HxW`` (also ``H×W``) -> (H, W), each at least 32."""
    t = str(text).lower().replace('×', 'x')
    h, _, w = t.partition('x')
    try:
        hw = (int(h), int(w or h))
    except ValueError:
        raise ValueError(f'--sizes entry {text!r}: expected S or HxW with integers')
    if min(hw) < 32:
        raise ValueError(f'--sizes entry {text!r}: sizes must be >= 32')
    return hw
