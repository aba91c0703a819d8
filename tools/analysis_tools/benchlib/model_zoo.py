"""The model zoo in the OpenMMLab form: one page and one ``metafile.yml`` per backbone family
under ``docs/model_zoo/``, an overview page, and the root ``model-index.yml`` that imports the
metafiles (the layout of mmdet's ``configs/<method>/README.md`` + ``metafile.yml``).

Every number comes from a record: params and FLOPs per config from ``records/model_zoo.json``
(:mod:`.model_flops` at the dataset's standard input, cached by :func:`model_key` so configs
with equal models share one measurement), the backbone's CPU latency against mmdet's Swin-T
from a ``benchmark.py`` record (:data:`LATENCY_RECORD`), and the accuracy from what the authors
published (:data:`PUBLISHED`, each with its source: nothing here is trained)."""
import hashlib
import json
import os.path as osp
import re
from typing import Dict, List, Optional, Tuple

import yaml

__all__ = ['PUBLISHED', 'FAMILIES', 'SECTIONS', 'LATENCY_RECORD', 'ZOO_RECORD', 'model_key',
           'family_of', 'variant_of', 'bench_label', 'load_latency', 'render_family',
           'render_metafile', 'render_overview', 'render_model_index', 'render_all',
           'param_gaps', 'config_row', 'train_meta']

ZOO_RECORD = 'records/model_zoo.json'
LATENCY_RECORD = 'records/benchmark_zoo_1024_zen4.json'
LATENCY_MACHINE = 'AMD EPYC, AVX-512, family 25 model 17 (Zen 4), 2 cores'
LATENCY_SIZES = ('512x512', '1024x1024')
PEERS = ('Swin-T', 'ResNet-50')

# What the authors published for the exact setting of a config: (metrics, params in M, FLOPs
# in G, source).  Each number is the authors' result for their own model, ImageNet weights and
# recipe, not reproduced here; a config that is not here has none.
_S4 = 'SOFT++ paper, Table 4'
_S5 = 'SOFT++ paper, Table 5'
_S7 = 'SOFT++ paper, Table 7'
# github.com/fudan-zvg/SOFT README (master d3febc3): their released SOFT-Norm models
_SR = "SOFT authors' README (SOFT-Norm), not the paper"
_N2 = 'NaLaFormer paper, Table 2'
_N3 = 'NaLaFormer paper, Table 3'
PUBLISHED_KEY = 'Published results (not reproduced)'
PUBLISHED: Dict[str, tuple] = {
    'retinanet_soft_tiny_1x': ({'box AP': 41.9}, 23, None, _S4),
    'retinanet_soft_small_1x': ({'box AP': 43.7}, 38, None, _S4),
    'retinanet_soft_medium_1x': ({'box AP': 44.3}, 59, None, _S4),
    'retinanet_soft_large_1x': ({'box AP': 47.0}, 98, None, _S4),
    'maskrcnn_soft_tiny_1x': ({'box AP': 41.2, 'mask AP': 38.2}, 32, None, _S5),
    'maskrcnn_soft_small_1x': ({'box AP': 43.8, 'mask AP': 40.1}, 48, None, _S5),
    'maskrcnn_soft_medium_1x': ({'box AP': 46.6, 'mask AP': 42.0}, 69, None, _S5),
    'maskrcnn_soft_large_1x': ({'box AP': 47.0, 'mask AP': 42.2}, 106, None, _S5),
    'upernet_soft_small_ade20k_160k': ({'mIoU': 46.5}, 60, 237, _S7),
    'upernet_soft_medium_ade20k_160k': ({'mIoU': 48.9}, 81, 260, _S7),
    'upernet_soft_large_ade20k_160k': ({'mIoU': 49.2}, 121, 301, _S7),
    'upernet_soft_small_cityscapes_40k': ({'mIoU': 81.2}, 60, 545, _S7),
    'upernet_soft_medium_cityscapes_40k': ({'mIoU': 82.0}, 81, 607, _S7),
    'upernet_soft_large_cityscapes_40k': ({'mIoU': 82.6}, 121, 899, _S7),
    'retinanet_soft_tiny-norm_1x': ({'box AP': 40.0}, 23, None, _SR),
    'retinanet_soft_small-norm_1x': ({'box AP': 42.8}, 34, None, _SR),
    'retinanet_soft_medium-norm_1x': ({'box AP': 44.3}, 55, None, _SR),
    'retinanet_soft_large-norm_1x': ({'box AP': 45.3}, 74, None, _SR),
    'maskrcnn_soft_tiny-norm_1x': ({'box AP': 41.2, 'mask AP': 38.2}, 33, None, _SR),
    'maskrcnn_soft_small-norm_1x': ({'box AP': 43.8, 'mask AP': 40.1}, 44, None, _SR),
    'maskrcnn_soft_medium-norm_1x': ({'box AP': 46.6, 'mask AP': 42.0}, 65, None, _SR),
    'maskrcnn_soft_large-norm_1x': ({'box AP': 47.0, 'mask AP': 42.2}, 84, None, _SR),
    'upernet_soft_small-norm_ade20k_160k': ({'mIoU': 46.2}, 54, None, _SR),
    'upernet_soft_medium-norm_ade20k_160k': ({'mIoU': 48.0}, 76, None, _SR),
    # computed with the authors' model (their code's attention, OFFICIAL_PRESET), not with
    # the paper's kernel: shown for the `*-official` configs only
    'retinanet_nalaformer_tiny-official_1x': ({'box AP': 46.2}, None, None, _N2),
    'retinanet_nalaformer_small-official_1x': ({'box AP': 47.2}, None, None, _N2),
    'maskrcnn_nalaformer_tiny-official_1x': ({'box AP': 47.6, 'mask AP': 43.0}, None, None, _N2),
    'maskrcnn_nalaformer_small-official_1x': ({'box AP': 49.5, 'mask AP': 44.2}, None, None,
                                              _N2),
    'maskrcnn_nalaformer_tiny-official_3x': ({'box AP': 46.7, 'mask AP': 42.0}, None, None, _N3),
    'maskrcnn_nalaformer_small-official_3x': ({'box AP': 49.7, 'mask AP': 44.3}, None, None,
                                              _N3),
    'semfpn_nalaformer_tiny-official_ade20k_40k': ({'mIoU': 45.4}, None, None, _N3),
    'semfpn_nalaformer_small-official_ade20k_40k': ({'mIoU': 48.0}, None, None, _N3),
    'upernet_nalaformer_tiny-official_ade20k_160k': ({'mIoU': 46.9}, None, None, _N3),
    'upernet_nalaformer_small-official_ade20k_160k': ({'mIoU': 48.5}, None, None, _N3),
}

# One collection per backbone family.  ``weights``: what ImageNet weights exist (the configs
# fine-tune the checkpoints/*_in1k.pth they name; no detection or segmentation checkpoint
# exists); ``accuracy``: which model the published numbers are for; ``released`` / ``ready``:
# the config variant (:func:`variant_of`) that loads ImageNet weights that exist today / that
# is ready for the authors' files once they release them.
FAMILIES: Dict[str, dict] = {
    'soft': dict(
        collection='SOFT++', title='SOFT++: Softmax-free Linear Transformers',
        paper='Softmax-free Linear Transformers', url='https://arxiv.org/abs/2207.03341',
        venue='IJCV 2024; SOFT: NeurIPS 2021',
        code='mmlinattn/models/backbones/soft.py', backbone='mmlinattn.SOFT',
        architecture=['SOFT attention (Gaussian kernel, Nystrom landmarks)',
                      'Newton-Schulz pseudo-inverse', 'Symmetric normalisation'],
        summary=(
            'A Gaussian-kernel self-attention approximated through m landmarks '
            '(Nystrom, Eq. 9), its pseudo-inverse by Newton-Schulz iterations (Eq. 10) and '
            'the symmetric normalisation of SOFT++ (Eq. 17), in a four-stage pyramid '
            '(Table 1: archs `tiny`, `small`, `medium`, `large`); the authors\' released '
            'SOFT-Norm models are the archs `tiny-norm` ... `large-norm`.'),
        weights=(
            "the authors released ImageNet files for their SOFT-Norm models (archs "
            '`tiny-norm`, `small-norm`, `medium-norm`, `large-norm`) and plain SOFT-Tiny; the '
            '`*-norm` configs fine-tune the converted SOFT-Norm files '
            '(`checkpoints/soft_<arch>_in1k.pth`, see [weights](../../user_guides/weights.md)). '
            'No weights exist for the SOFT++ archs (`tiny` ... `large`): pretrain them '
            'yourself.'),
        accuracy=(
            "The `*-norm` configs build the authors' released SOFT-Norm models with their "
            "attention (`OFFICIAL_PRESETS['norm']`); their accuracy is the authors' own, from "
            "their repository's README (SOFT-Norm), not from the paper. These configs replace "
            "A⁺ by a ridge-regularised Cholesky solve where the authors' model ran 20 "
            "Newton-Schulz steps (`pinv='newton'` runs theirs). The other configs build the SOFT++ paper's "
            'Table 1 archs: their accuracy is what the IJCV paper reports for those archs, '
            'for which no weights exist.'),
        released='norm',
        bibtex="""@article{lu2024soft,
  title   = {Softmax-free Linear Transformers},
  author  = {Lu, Jiachen and Zhang, Junge and Zhu, Xiatian and Feng, Jianfeng and
             Xiang, Tao and Zhang, Li},
  journal = {International Journal of Computer Vision},
  year    = {2024},
  eprint  = {2207.03341},
  archivePrefix = {arXiv}
}"""),
    'nalaformer': dict(
        collection='NaLaFormer',
        title='NaLaFormer: Norm-Aware Linear Attention for Transformer Models',
        paper='NaLaFormer: Norm-Aware Linear Attention for Transformer Models',
        url='https://arxiv.org/abs/2506.21137', venue='arXiv 2025',
        code='mmlinattn/models/backbones/nalaformer.py', backbone='mmlinattn.NaLaFormer',
        architecture=['Norm-aware linear attention', 'Query-norm power kernel',
                      'Depthwise-conv position encoding'],
        summary=(
            'Linear attention that splits queries and keys into norm and direction: the '
            'query norm sets the spikiness of the kernel (Eq. 10-11) and a cosine / sine '
            'feature map keeps the sign of the inner products (Eq. 16), in a four-stage '
            'pyramid (archs `tiny`, `small`, `base`).'),
        weights=(
            'the authors have released none yet (their README lists them as coming soon). '
            "The `*-official` configs build the authors' model (their code's attention, "
            '`OFFICIAL_PRESET`) and are ready for their `NALAFORMER_{T,S}` files once released '
            '(`checkpoints/nalaformer_<arch>_official_in1k.pth`, see '
            '[weights](../../user_guides/weights.md)); the other configs run the paper\'s '
            'kernel, which those files do not fit.'),
        accuracy=(
            "The paper's dense numbers (Tables 2 and 3) were computed with the authors' model, "
            "their code's attention (`attn_types='official'`, `kernel='relu_split_rope'`, "
            "`out_norm=False`): they are shown for the `*-official` configs, which build that "
            "model. The other configs run the paper's kernel (Eq. 16), a different "
            'computation for which nothing is published ("–").'),
        ready='official',
        bibtex="""@article{meng2025nalaformer,
  title   = {{NaLaFormer}: Norm-Aware Linear Attention for Transformer Models},
  author  = {Meng, Weikang and Luo, Yadan and Huo, Liangyu and Wang, Yaowei and
             Li, Xin and Zhang, Zheng},
  journal = {arXiv preprint arXiv:2506.21137},
  year    = {2025}
}"""),
    'infvit': dict(
        collection='InfViT', title='InfViT: Infinite Self-Attention',
        paper='Infinite Self-Attention', url='https://arxiv.org/abs/2603.00175',
        venue='arXiv 2026', code='mmlinattn/models/backbones/infvit.py',
        backbone='mmlinattn.InfViT, mmlinattn.InfViTPlain',
        architecture=['Linear-InfSA (principal-eigenvector token weights)',
                      'Neumann-series attention'],
        summary=(
            'Self-attention as a discounted Neumann series over attention matrices; its '
            'linear form, Linear-InfSA, weights the tokens by the principal eigenvector of '
            'the implicit attention operator (Eq. 20).  A four-stage pyramid (`InfViT`, '
            'archs `tiny`, `small`) and the paper\'s isotropic 4-layer ViT (`InfViTPlain`, '
            'arch `l4`).'),
        weights='none are released.',
        accuracy='The paper reports no detection or segmentation results.',
        bibtex="""@article{roffo2026infinite,
  title   = {Infinite Self-Attention},
  author  = {Roffo, Giorgio},
  journal = {arXiv preprint arXiv:2603.00175},
  year    = {2026}
}"""),
    'ldn': dict(
        collection='LDN',
        title='LDN: Linear Diffusion Networks',
        paper='Linear Diffusion Networks: Harnessing Diffusion Processes for Global '
              'Interactions',
        url='https://arxiv.org/abs/2502.12381', venue='arXiv 2025',
        code='mmlinattn/models/backbones/ldn.py', backbone='mmlinattn.LDN',
        architecture=['Graph diffusion step', 'Local gated update',
                      'Normalised linear attention'],
        summary=(
            'One explicit diffusion step over the tokens, a local update and a normalised '
            'linear attention summed in one residual step (Sec. 3.3).  The paper is about '
            'sequences; the four-stage pyramid (archs `tiny`, `small`) is this '
            'project\'s.'),
        weights='none are released.',
        accuracy='The paper reports no detection or segmentation results.',
        bibtex="""@article{feinashley2025ldn,
  title   = {Linear Diffusion Networks: Harnessing Diffusion Processes for Global
             Interactions},
  author  = {Fein-Ashley, Jacob},
  journal = {arXiv preprint arXiv:2502.12381},
  year    = {2025}
}"""),
}
# config name part -> family page (the plain InfViT lives on InfViT's page)
_FAMILY_OF = {'soft': 'soft', 'nalaformer': 'nalaformer', 'infvit': 'infvit',
              'infvitplain': 'infvit', 'ldn': 'ldn'}

SECTIONS = [('COCO', 'CocoDataset', '800x1280'),
            ('ADE20K', 'ADE20KDataset', '512x512'),
            ('Cityscapes', 'CityscapesDataset', '1024x2048')]
_TASKS = {'retinanet': [('Object Detection', 'box AP')],
          'maskrcnn': [('Object Detection', 'box AP'), ('Instance Segmentation', 'mask AP')],
          'semfpn': [('Semantic Segmentation', 'mIoU')],
          'upernet': [('Semantic Segmentation', 'mIoU')]}
_DETECTOR = {'retinanet': 'RetinaNet', 'maskrcnn': 'Mask R-CNN', 'semfpn': 'Semantic FPN',
             'upernet': 'UperNet'}
FAMILY_ORDER = ('soft', 'nalaformer', 'infvit', 'ldn', 'infvitplain')
SIZE_ORDER = ('tiny', 'small', 'medium', 'base', 'large', 'l4')
ALGO_ORDER = ('retinanet', 'maskrcnn', 'semfpn', 'upernet')


def model_key(cfg, shape) -> str:
    """Hash of the model dict and input size: configs with equal keys measure equally.  The
    backbone's ``init_cfg`` (which weights it loads) changes no count and is left out."""
    model = cfg.model.to_dict()
    if isinstance(model.get('backbone'), dict):
        model['backbone']['init_cfg'] = None
    text = json.dumps(dict(model=model, shape=list(shape)), sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def family_of(name: str) -> str:
    """The family page of a config (``retinanet_infvitplain_l4_1x`` -> ``infvit``)."""
    part = name.split('_')[1]
    if part not in _FAMILY_OF:
        raise ValueError(f'{name}: unknown backbone family {part!r}; add it to FAMILIES')
    return _FAMILY_OF[part]


def variant_of(name: str) -> str:
    """The model variant a config's size part names after the arch: ``'norm'`` (the
    authors' released SOFT-Norm archs), ``'official'`` (NaLaFormer's authors' model) or ``''``."""
    return name.split('_')[2].partition('-')[2]


# backbone keys that do not change what a benchmark.py spec times (or that it states itself)
_UNTIMED = ('type', 'arch', 'init_cfg', 'out_indices', 'drop_path_rate', 'max_landmarks', 'pinv')


def bench_label(backbone: dict) -> Tuple[str, Optional[str]]:
    """The ``benchmark.py`` model spec of a config's backbone (its arch and every option that
    changes the computation, e.g. an authors' preset), and a fallback spec to show (with a
    note) where the exact one is too slow to time: SOFT++ with the paper's Newton-Schulz
    pseudo-inverse is timed by its Cholesky twin (a ridge-regularised solve in place of A^+:
    other values, timed in its place)."""
    name = backbone['type'].split('.')[-1]
    label = f"{name}:{backbone['arch']}" + ''.join(
        f':{k}={backbone[k]!r}' for k in sorted(backbone) if k not in _UNTIMED)
    if name != 'SOFT':
        return label, None
    if backbone.get('max_landmarks') is not None:
        label += f":max_landmarks={backbone['max_landmarks']}"
    if backbone.get('pinv', 'newton') != 'newton':
        return label + f":pinv={backbone['pinv']!r}", None
    return label, label + ":pinv='cholesky'"


def _sort_key(name: str) -> tuple:
    algo, family, size, *rest = name.split('_')
    rank = (lambda seq, x: seq.index(x) if x in seq else len(seq))
    return (rank(ALGO_ORDER, algo), rank(FAMILY_ORDER, family), variant_of(name),
            rank(SIZE_ORDER, size.partition('-')[0]), rest)


def load_latency(path: str) -> Dict[Tuple[str, str], dict]:
    """(model spec, size) -> latency fields of a ``benchmark.py`` record (inference, ok),
    with ``ratio`` to each peer timed in the same run: to Swin-T over the Swin-T steps of the
    same rounds (its pair's where the run interleaved pairs), to another peer through their
    two ratios to Swin-T."""
    with open(path) as f:
        rec = json.load(f)
    out = {}
    for r in rec['records']:
        if r['mode'] == 'infer' and r['status'] == 'ok':
            out[(r['label'], f"{r['height']}x{r['width']}")] = dict(r)
    for (label, size), r in out.items():
        swin = out.get(('Swin-T', size))
        ref = r.get('paired_ref_latency_ms_median') or (swin or {}).get('latency_ms_median')
        r['ratio'] = {'Swin-T': r['latency_ms_median'] / ref} if ref else {}
    for (label, size), r in out.items():
        for p in PEERS[1:]:
            peer = out.get((p, size))
            if peer and 'Swin-T' in peer['ratio'] and 'Swin-T' in r['ratio']:
                r['ratio'][p] = r['ratio']['Swin-T'] / peer['ratio']['Swin-T']
    return out


# --------------------------------------------------------------------------------------
# cells

def _g(flops: float) -> str:
    return f'{flops / 2e9:.1f}'


def _params_cell(name: str, m: dict) -> str:
    paper = PUBLISHED.get(name, (None, None))[1]
    cell = f"{m['params'] / 1e6:.1f}"
    return cell + (f' ({paper})' if paper else '')


def _flops_cell(name: str, m: dict) -> str:
    paper = PUBLISHED.get(name, (None, None, None))[2]
    newton = m.get('flops_newton', 0)
    cell = _g(m['flops'] - newton) + (f' + {_g(newton)} NS' if newton else '')
    return cell + (f' ({paper})' if paper else '')


def _latency_cell(row: dict, lat: dict, size: str = '1024x1024') -> str:
    spec = row['bench'] if (row['bench'], size) in lat else row['bench_fallback']
    r = lat.get((spec, size)) if spec else None
    if not r or 'Swin-T' not in r['ratio']:
        return 'not measured'
    return f"{r['ratio']['Swin-T']:.2f}" + ('' if spec == row['bench'] else ' †')


def _metric_cells(name: str, metrics: List[str]) -> List[str]:
    paper = PUBLISHED.get(name)
    return [f'{paper[0][k]:.1f}' if paper and k in paper[0] else '–' for k in metrics]


def _schedule(row: dict) -> str:
    return row.get('schedule') or row['name'].rsplit('_', 1)[1]


# --------------------------------------------------------------------------------------
# pages

def _results_table(rows: List[dict], cache: dict, lat: dict, kind: str) -> List[str]:
    metrics = ['box AP', 'mask AP'] if kind == 'CocoDataset' else ['mIoU']
    if not any(r['name'] in PUBLISHED for r in rows):  # nothing published for these
        metrics = []
    head = ('| config | model | backbone | schedule | params M | FLOPs G | '
            + ''.join(f"{k} (authors' paper / README) | " for k in metrics)
            + ('source | ' if metrics else '') + 'backbone latency / Swin-T |')
    out = [head, '|' + '---|' * (7 + len(metrics) + bool(metrics))]
    for r in sorted(rows, key=lambda r: _sort_key(r['name'])):
        m = cache.get(r['key'], {})
        if 'params' in m:
            params, flops = _params_cell(r['name'], m), _flops_cell(r['name'], m)
        else:
            params, flops = m.get('error', 'not measured'), ''
        src = PUBLISHED[r['name']][3] if r['name'] in PUBLISHED else '–'
        paper = ''.join(c + ' | ' for c in _metric_cells(r['name'], metrics) + [src]
                        ) if metrics else ''
        out.append(f"| [{r['name']}](../../../configs/{r['name']}.py) | "
                   f"{_DETECTOR[r['name'].split('_')[0]]} | {r['backbone']} | "
                   f'{_schedule(r)} | {params} | {flops} | {paper}'
                   f'{_latency_cell(r, lat)} |')
    return out


def _latency_table(rows: List[dict], lat: dict) -> List[str]:
    specs = []
    for r in sorted(rows, key=lambda r: _sort_key(r['name'])):
        for s in (r['bench'], r['bench_fallback']):
            if s and s not in specs:
                specs.append(s)
    # SOFT++ also with the landmark cap (linear in the pixels, not the paper's rule)
    capped = [s.split(':pinv')[0] + ':max_landmarks=49' for s in specs if ':pinv=' in s]
    specs += [s for s in capped if s not in specs]
    out = ['| backbone (`benchmark.py` spec) | params M | ms 512² | ms 1024² | '
           '/ Swin-T 512² | / Swin-T 1024² | / ResNet-50 1024² | peak MiB 1024² |',
           '|---|---|---|---|---|---|---|---|']
    for spec in [s for s in specs if any((s, z) in lat for z in LATENCY_SIZES)] + list(PEERS):
        cells = [lat.get((spec, z)) for z in LATENCY_SIZES]
        if not any(cells):
            continue
        ref = next(c for c in cells if c)
        ms = [f"{c['latency_ms_median']:.0f}" if c else '–' for c in cells]
        ratio = [f"{c['ratio'][p]:.2f}" if c and p in c['ratio'] else '–'
                 for p, c in (('Swin-T', cells[0]), ('Swin-T', cells[1]),
                              ('ResNet-50', cells[1]))]
        mem = f"{cells[1]['peak_mem_mb']:.0f}" if cells[1] else '–'
        out.append(f"| `{spec}` | {ref['params_m']:.1f} | " + ' | '.join(ms + ratio)
                   + f' | {mem} |')
    return out


def render_family(family: str, rows: List[dict], cache: dict, lat: dict) -> str:
    """``docs/model_zoo/<family>/README.md``."""
    f = FAMILIES[family]
    rows = [r for r in rows if r['family'] == family]
    out = [f"# {f['title']}", '',
           f"> [{f['paper']}]({f['url']}) ({f['venue']})", '',
           f"{f['summary']}  Backbone: `{f['backbone']}` ([code](../../../{f['code']})); "
           f'metafile: [metafile.yml](metafile.yml).', '',
           '**No trained detection or segmentation checkpoints.** Accuracy columns (where '
           "the authors published any) are the authors' numbers for their model with "
           'ImageNet-pretrained weights under their recipe, for the same detector and '
           'schedule; they are not reproduced here ("–": nothing published). '
           + f.get('accuracy', '') + ' Each config fine-tunes the ImageNet weights in the '
           '`checkpoints/*_in1k.pth` it names. ' + _weights_count(family, rows)
           + f" ImageNet weights: {f['weights']}", '',
           '## Results and models']
    for title, kind, shape in SECTIONS:
        sec = [r for r in rows if r['dataset'] == kind]
        if sec:
            out += ['', f'### {title} (params and FLOPs at {shape}, batch 1)', '']
            out += _results_table(sec, cache, lat, kind)
    out += ['', '## Backbone latency on CPU', '',
            f'Inference, float32, batch 1, {LATENCY_MACHINE}: in one run, each backbone '
            "(and mmdet's ResNet-50) interleaved with mmdet's Swin-T, 3 rounds, medians; the "
            'ratio to ResNet-50 divides the two ratios to Swin-T. Compare ratios: the '
            'milliseconds move with the machine ([speed card](../../benchmarks.md)). Record: '
            f'[`{LATENCY_RECORD}`](../../../{LATENCY_RECORD}).', '',
            f'<!-- figures: {LATENCY_RECORD} dev/speed_card_tables.py:zoo_ratios -->']
    out += _latency_table(rows, lat)
    out += ['', '## Notes', '',
            '- params: the whole detector / segmentor (auxiliary head included), in the '
            "parentheses the published count (source column). FLOPs: multiply-accumulates "
            '(GMACs, what the papers call FLOPs) of the inference forward at the size in the '
            "heading, counted by `tools/analysis_tools/get_flops.py`; in the parentheses the "
            "paper's. "
            f'Record: [`{ZOO_RECORD}`](../../../{ZOO_RECORD}); '
            '`python tools/analysis_tools/model_zoo.py` regenerates these pages.',
            '- backbone latency / Swin-T: the config\'s backbone at 1024², from the table '
            'above (below 1: faster than Swin-T).']
    if family == 'soft':
        out += ['- NS: the 20 Newton-Schulz iterations of the pseudo-inverse (Eq. 10) on '
                'm x m matrices, 2 x 20 x m³ MACs per head and block, shown apart. With the '
                "paper's landmark rule m = (H/32)(W/32) per stage: negligible at 224² "
                '(m = 49), dominant at detection and Cityscapes sizes (m = 1000 at 800x1280). '
                "The paper's ADE20K FLOPs match the count without them. `pinv='cholesky'` "
                'replaces A⁺ by a ridge-regularised solve, (A + λI)⁻¹ through a Cholesky '
                'factorisation; `max_landmarks=49` pools the '
                "landmarks (linear cost, not the paper's rule).",
                '- The paper does not say at which input size its Cityscapes FLOPs were '
                'counted.']
        if any(r['bench_fallback'] for r in rows):
            out += ["- †: timed with `pinv='cholesky'`; the config's Newton-Schulz "
                    'pseudo-inverse is far slower at this size (the iterations above).']
        if any("pinv='cholesky'" in r['bench'] for r in rows):
            out += ["- With `pinv='cholesky'` the FLOPs leave out the Cholesky factorisation "
                    "and solves, which torch's FLOP counter does not count: m³/6 MACs per "
                    'head and block to factor, m² per right-hand-side column to solve, '
                    'against the 2 x 20 x m³ of the iterations.']
    if family in ('infvit', 'ldn'):
        out += ['- The paper reports no detection or segmentation results; the configs use '
                'the standard recipes named in each config.']
    if family == 'nalaformer':
        out += ['- The paper reports no dense-prediction params or FLOPs.']
    variants = sorted({variant_of(r['name']) for r in rows} - {''})
    untimed = [v for v in variants if not any(
        variant_of(r['name']) == v and _latency_cell(r, lat) != 'not measured' for r in rows)]
    if untimed:
        out += ['- Backbone latency of the authors\' models ('
                + ', '.join(f'`*-{v}`' for v in untimed) + '): not measured (the latency '
                'record does not time them).']
    out += ['', '## Citation', '', '```bibtex', f['bibtex'], '```', '']
    return '\n'.join(out)


def render_metafile(family: str, rows: List[dict], cache: dict, lat: dict) -> str:
    """``docs/model_zoo/<family>/metafile.yml`` in mmdet's schema.  No ``Weights`` and no
    ``Results`` (mim shows those as the config's own): there are no trained checkpoints, and
    the published numbers go under ``Metadata[PUBLISHED_KEY]`` with their source."""
    f = FAMILIES[family]
    coll = dict(Name=f['collection'],
                Metadata=dict(Architecture=f['architecture']),
                Paper=dict(URL=f['url'], Title=f['paper']),
                README=f'docs/model_zoo/{family}/README.md',
                Code=dict(URL=f['code'], Version='v0.1.0'))
    models = []
    for r in sorted((r for r in rows if r['family'] == family),
                    key=lambda r: _sort_key(r['name'])):
        m = cache.get(r['key'], {})
        meta = {'Training Data': r['dataset_name']}
        meta.update(r['train_meta'])
        if 'params' in m:
            meta.update({'Parameters': m['params'], 'FLOPs': int(m['flops'] // 2),
                         'FLOPs input': r['shape'], 'Backbone Parameters': m['params_backbone'],
                         'Backbone FLOPs': int(m['flops_backbone'] // 2)})
            if m.get('flops_newton'):
                meta['Newton-Schulz FLOPs'] = int(m['flops_newton'] // 2)
        meta['Backbone'] = r['backbone']
        spec = r['bench'] if (r['bench'], '1024x1024') in lat else r['bench_fallback']
        t = lat.get((spec, '1024x1024')) if spec else None
        if t:
            meta['inference time (ms/im)'] = [{
                'value': round(t['latency_ms_median'], 1), 'hardware': LATENCY_MACHINE,
                'backend': 'PyTorch', 'batch size': 1, 'mode': 'FP32',
                'resolution': '(1024, 1024)', 'part': 'backbone', 'measured as': spec,
                'ratio to Swin-T': round(t['ratio']['Swin-T'], 2),
                'record': LATENCY_RECORD}]
        entry = {'Name': r['name'], 'In Collection': f['collection'],
                 'Config': f"configs/{r['name']}.py", 'Metadata': meta}
        if r['name'] in PUBLISHED:
            metrics, _, _, src = PUBLISHED[r['name']]
            meta[PUBLISHED_KEY] = [
                {'Task': task, 'Dataset': r['dataset_name'], 'Metrics': {k: metrics[k]},
                 'Source': src}
                for task, k in _TASKS[r['name'].split('_')[0]] if k in metrics]
        models.append(entry)
    head = (f'# {f["collection"]}: generated by tools/analysis_tools/model_zoo.py from '
            f'{ZOO_RECORD} and {LATENCY_RECORD}.\n'
            '# No trained detection or segmentation checkpoints exist, so no model has Weights '
            'or Results;\n# the authors\' published numbers for their model are under '
            f'Metadata "{PUBLISHED_KEY}", with their Source.\n')
    return head + yaml.safe_dump(dict(Collections=[coll], Models=models), sort_keys=False,
                                 allow_unicode=True, width=100)


def render_model_index() -> str:
    return 'Import:\n' + ''.join(f'  - docs/model_zoo/{k}/metafile.yml\n' for k in FAMILIES)


def _count(family: str, rows: List[dict], variant: Optional[str]) -> Tuple[int, int]:
    """(configs of ``variant`` in ``family``, all configs of ``family``)."""
    names = [r['name'] for r in rows if r['family'] == family]
    return sum(bool(variant) and variant_of(n) == variant for n in names), len(names)


def _weights_count(family: str, rows: List[dict]) -> str:
    """How many of a family's configs load ImageNet weights that exist today."""
    f = FAMILIES[family]
    if f.get('released'):
        n, total = _count(family, rows, f['released'])
        return (f'{n} of the {total} configs (the `*-{f["released"]}` ones) load ImageNet '
                'weights that exist today.')
    if f.get('ready'):
        n, total = _count(family, rows, f['ready'])
        return (f'None of the {total} configs loads ImageNet weights that exist today; {n} '
                f'(the `*-{f["ready"]}` ones) are ready for the authors\' files once released.')
    return 'None of the configs loads ImageNet weights that exist today.'


def render_overview(rows: List[dict], lat: dict) -> str:
    """``docs/model_zoo/README.md``."""
    out = ['# Model zoo', '',
           'One page per backbone family, in the OpenMMLab layout: a results table per '
           'dataset and a `metafile.yml` (mmdet\'s schema; the root `model-index.yml` '
           'imports the four). Configs live flat in `configs/`: '
           '`python tools/train.py configs/retinanet_soft_small_1x.py`.', '',
           '| family | paper | configs | with ImageNet weights that exist | published dense '
           'results | ImageNet weights | page |',
           '|---|---|---|---|---|---|---|']
    for k, f in FAMILIES.items():
        names = [r['name'] for r in rows if r['family'] == k]
        reported = sum(n in PUBLISHED for n in names)
        existing = _count(k, rows, f.get('released'))[0]
        w = {'soft': "authors' SOFT-Norm (`*-norm` configs) and plain SOFT-Tiny",
             'nalaformer': "none released yet; `*-official` configs ready for the authors' "
                           'files'}.get(k, 'none')
        out.append(f"| {f['collection']} | [{f['paper']}]({f['url']}) | {len(names)} | "
                   f'{existing} | {reported} | {w} | [{k}]({k}/README.md) |')
    n_soft, n_nala = _count('soft', rows, 'norm')[0], _count('nalaformer', rows, 'official')[0]
    out += ['', '## What the columns mean', '',
            '- **No trained detection or segmentation checkpoints exist yet.** Accuracy '
            '(box AP, mask AP on COCO val2017, single-scale mIoU) is what the authors published '
            'for their own model with ImageNet-pretrained weights under their recipe, not '
            'reproduced here, each with its source: the SOFT++ paper for its Table 1 archs '
            '(no weights exist for them); the SOFT authors\' README (not the paper) for their '
            'SOFT-Norm models, which the `*-norm` configs build (with a ridge-regularised '
            'solve in place of their Newton-Schulz A⁺); the NaLaFormer paper for the '
            'authors\' model, which the `*-official` configs build (the configs with the '
            'paper\'s kernel show "–"). InfViT and LDN publish none. No metafile entry has '
            f'`Weights` or `Results`: the published numbers are under `Metadata` '
            f'"{PUBLISHED_KEY}", with their `Source`.',
            '- params and FLOPs are measured on this code for each config at the dataset\'s '
            'standard input (COCO 800x1280, ADE20K 512x512, Cityscapes 1024x2048, batch 1): '
            'record [`records/model_zoo.json`](../../records/model_zoo.json).',
            '- backbone latency / Swin-T: CPU inference, float32, batch 1, 1024², the '
            "config's backbone against mmdet's Swin-T timed in the same interleaved rounds "
            f'on one machine type: record [`{LATENCY_RECORD}`](../../{LATENCY_RECORD}). '
            'Other machine types and sizes: [benchmarks](../benchmarks.md).',
            '',
            '## ImageNet weights', '',
            'Each config fine-tunes the ImageNet weights in the `checkpoints/*_in1k.pth` it '
            'names, as the papers do; without the file `tools/train.py` stops at the start and '
            'says how to make it (the comment in each `configs/_base_/models/` file says so '
            f"too). Weights that exist today: the authors' SOFT-Norm files, which the {n_soft} "
            '`*-norm` configs load once converted with '
            '`tools/model_converters/convert_checkpoint.py` '
            '(`checkpoints/soft_<size>-norm_in1k.pth`). The NaLaFormer authors have released '
            f'no weights yet; the {n_nala} `*-official` configs build their model and are '
            'ready for their files once released '
            '(`checkpoints/nalaformer_<arch>_official_in1k.pth`). Every other config needs '
            'weights you pretrain yourself: none exist for the SOFT++ archs, NaLaFormer with '
            "the paper's kernel, InfViT or LDN. How: [weights](../user_guides/weights.md).", '',
            '## Regenerate', '',
            '```bash',
            'python tools/analysis_tools/model_zoo.py            # params / FLOPs of new configs, '
            'then every page',
            'bash dev/benchmark_zoo.sh records/benchmark_zoo_1024_zen4.json  # the latency '
            'record',
            '```', '']
    return '\n'.join(out)


def render_all(rows: List[dict], cache: dict, lat: dict) -> Dict[str, str]:
    """Every generated file, path (relative to the repository root) -> text."""
    files = {'docs/model_zoo/README.md': render_overview(rows, lat),
             'model-index.yml': render_model_index()}
    for k in FAMILIES:
        files[f'docs/model_zoo/{k}/README.md'] = render_family(k, rows, cache, lat)
        files[f'docs/model_zoo/{k}/metafile.yml'] = render_metafile(k, rows, cache, lat)
    return files


_BATCH = re.compile(r'#\s*(\d+)\s*GPUs\s*x\s*(\d+)')


def train_meta(cfg, text: str) -> dict:
    """Training metadata a config states: optimizer, schedule length, GPUs x batch."""
    meta = {'Training Techniques': [cfg.optim_wrapper.optimizer.type]}
    tc = cfg.train_cfg
    if tc.get('max_epochs'):
        meta['Epochs'] = tc['max_epochs']
    if tc.get('max_iters'):
        meta['Iterations'] = tc['max_iters']
    m = _BATCH.search(text)
    if m:
        meta['Training Resources'] = f'{m.group(1)} GPUs'
        meta['Batch Size'] = int(m.group(1)) * int(m.group(2))
    return meta


def param_gaps(rows: List[dict], cache: dict, tol: float = 0.05) -> List[str]:
    """Configs whose measured params differ from the published count by more than
    ``tol``."""
    gaps = []
    for r in rows:
        paper = PUBLISHED.get(r['name'], (None, None))[1]
        m = cache.get(r['key'], {})
        if paper and 'params' in m:
            rel = m['params'] / 1e6 / paper - 1
            if abs(rel) > tol:
                gaps.append(f"{r['name']}: ours {m['params'] / 1e6:.1f} M vs published "
                            f"{paper} M ({rel:+.1%}, {PUBLISHED[r['name']][3]})")
    return gaps


def config_row(path: str, cfg, shape) -> dict:
    """What the pages need from one config (``cfg`` loaded, ``shape`` its standard input)."""
    from .model_flops import dataset_type
    name = osp.splitext(osp.basename(path))[0]
    bb = cfg.model.backbone
    label, fallback = bench_label(bb)
    kind = dataset_type(cfg)
    with open(path) as f:
        text = f.read()
    return dict(name=name, family=family_of(name), dataset=kind,
                dataset_name={k: t for t, k, _ in SECTIONS}.get(kind, kind),
                backbone=f"{bb.type.split('.')[-1]}-{bb.arch}"
                + (f' ({variant_of(name)})' if variant_of(name) not in ('', 'norm') else ''),
                key=model_key(cfg, shape),
                shape=f'{shape[0]}x{shape[1]}', bench=label, bench_fallback=fallback,
                train_meta=train_meta(cfg, text))
