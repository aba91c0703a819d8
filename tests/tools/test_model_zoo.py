"""tools/analysis_tools/model_zoo.py (:mod:`benchlib.model_zoo`): rows, paper
numbers, the Newton-Schulz share, failed measurements and latency ratios are rendered as
documented, on hand-made records (the measurements themselves are get_flops.py's and
benchmark.py's, tested in test_get_flops.py and the benchmark tests)."""
import json

import pytest
import yaml

from benchlib import model_zoo


def _row(name, dataset, backbone, key, bench, fallback=None):
    return dict(name=name, family=model_zoo.family_of(name), dataset=dataset,
                dataset_name={'CocoDataset': 'COCO', 'ADE20KDataset': 'ADE20K'}[dataset],
                backbone=backbone, key=key, shape='512x512', bench=bench,
                bench_fallback=fallback, schedule=None,
                train_meta={'Training Techniques': ['AdamW'], 'Iterations': 160000})


def _rows():
    return [
        _row('upernet_soft_small_ade20k_160k', 'ADE20KDataset', 'SOFT-small', 'a',
             'SOFT:small', "SOFT:small:pinv='cholesky'"),
        _row('semfpn_ldn_tiny_ade20k_40k', 'ADE20KDataset', 'LDN-tiny', 'b', 'LDN:tiny'),
        _row('retinanet_soft_tiny_1x', 'CocoDataset', 'SOFT-tiny', 'c', 'SOFT:tiny',
             "SOFT:tiny:pinv='cholesky'"),
    ]


CACHE = {
    'a': dict(params=63e6, params_backbone=26e6, flops=2 * 300e9, flops_backbone=2 * 100e9,
              flops_newton=2 * 80e9),
    'b': dict(params=19e6, params_backbone=15e6, flops=2 * 35e9, flops_backbone=2 * 13e9,
              flops_newton=0),
    'c': dict(error='not measured: over the 600 s time limit at 800x1280'),
}


def _bench(label, size, ms, params=20.0, mem=100.0):
    h, w = size.split('x')
    return dict(label=label, mode='infer', status='ok', height=int(h), width=int(w),
                latency_ms_median=ms, params_m=params, peak_mem_mb=mem)


@pytest.fixture
def lat(tmp_path):
    records = [_bench('Swin-T', '1024x1024', 1000.0), _bench('ResNet-50', '1024x1024', 500.0),
               _bench('Swin-T', '512x512', 250.0),
               _bench("SOFT:small:pinv='cholesky'", '1024x1024', 2500.0),
               _bench('SOFT:small:max_landmarks=49', '1024x1024', 700.0),
               _bench('LDN:tiny', '1024x1024', 600.0), _bench('LDN:tiny', '512x512', 200.0),
               dict(_bench('LDN:tiny', '2048x2048', 1.0), status='timeout')]
    path = tmp_path / 'bench.json'
    path.write_text(json.dumps(dict(meta={}, records=records)))
    return model_zoo.load_latency(str(path))


def test_load_latency_ratios_within_one_run(lat):
    assert lat[('LDN:tiny', '1024x1024')]['ratio'] == {'Swin-T': 0.6, 'ResNet-50': 1.2}
    assert lat[('LDN:tiny', '512x512')]['ratio'] == {'Swin-T': 0.8}
    assert ('LDN:tiny', '2048x2048') not in lat  # a failed case gives no number


def test_render_family_rows(lat):
    text = model_zoo.render_family('soft', _rows(), CACHE, lat)
    soft = next(line for line in text.splitlines() if 'upernet_soft_small' in line)
    # ours 63.0 M (paper 60); 300 G of which 80 G Newton-Schulz (paper 237); mIoU 46.5
    cells = [c.strip() for c in soft.split('|')]
    assert cells[5:10] == ['63.0 (60)', '220.0 + 80.0 NS (237)', '46.5',
                           'SOFT++ paper, Table 7', '2.50 †']
    retina = next(line for line in text.splitlines() if 'retinanet_soft_tiny' in line)
    assert 'over the 600 s time limit' in retina and 'not measured |' in retina
    assert text.index('### COCO') < text.index('### ADE20K')
    assert 'semfpn_ldn' not in text  # another family's config
    latency = text[text.index('## Backbone latency'):text.index('## Notes')]
    assert "| `SOFT:small:pinv='cholesky'` | 20.0 | – | 2500 | – | 2.50 | 5.00 | 100 |" \
        in latency
    assert '| `SOFT:small:max_landmarks=49` |' in latency and '| `Swin-T` |' in latency
    assert '@article{lu2024soft' in text


def test_render_family_without_paper_results(lat):
    text = model_zoo.render_family('ldn', _rows(), CACHE, lat)
    ldn = next(line for line in text.splitlines() if 'semfpn_ldn_tiny' in line)
    cells = [c.strip() for c in ldn.split('|')]
    assert cells[5:8] == ['19.0', '35.0', '0.60']
    assert 'NS' not in ldn


def test_render_metafile(lat):
    meta = yaml.safe_load(model_zoo.render_metafile('soft', _rows(), CACHE, lat))
    assert meta['Collections'][0]['Name'] == 'SOFT++'
    names = [m['Name'] for m in meta['Models']]
    assert names == ['retinanet_soft_tiny_1x', 'upernet_soft_small_ade20k_160k']
    upernet = meta['Models'][1]
    md = upernet['Metadata']
    assert (md['Parameters'], md['FLOPs'], md['Newton-Schulz FLOPs']) == (63e6, 300e9, 80e9)
    (t, ) = md['inference time (ms/im)']
    assert (t['value'], t['ratio to Swin-T'], t['measured as']) == (
        2500.0, 2.5, "SOFT:small:pinv='cholesky'")
    # the published number is metadata with its source, not the config's Results
    assert 'Results' not in upernet
    assert md['Published results (not reproduced)'] == [
        {'Task': 'Semantic Segmentation', 'Dataset': 'ADE20K', 'Metrics': {'mIoU': 46.5},
         'Source': 'SOFT++ paper, Table 7'}]
    retina = meta['Models'][0]
    assert 'Parameters' not in retina['Metadata'] and 'Weights' not in retina


def test_bench_label():
    assert model_zoo.bench_label(dict(type='mmlinattn.SOFT', arch='small')) == (
        'SOFT:small', "SOFT:small:pinv='cholesky'")
    assert model_zoo.bench_label(dict(type='mmlinattn.SOFT', arch='large', pinv='cholesky')) \
        == ("SOFT:large:pinv='cholesky'", None)
    assert model_zoo.bench_label(dict(type='mmlinattn.SOFT', arch='tiny', max_landmarks=49,
                                      pinv='newton'))[0] == 'SOFT:tiny:max_landmarks=49'
    assert model_zoo.bench_label(dict(type='mmlinattn.InfViTPlain', arch='l4')) == (
        'InfViTPlain:l4', None)
    # an authors' preset is part of the spec: their model is not timed as the paper's
    assert model_zoo.bench_label(dict(
        type='mmlinattn.NaLaFormer', arch='tiny', attn_types='official', out_norm=False,
        init_cfg=dict(type='Pretrained'), drop_path_rate=0.2)) == (
        "NaLaFormer:tiny:attn_types='official':out_norm=False", None)


def test_published_numbers_go_to_the_authors_model():
    """NaLaFormer's paper numbers come from the authors' model: its `-official` configs show
    them, the paper-kernel configs show none; the SOFT-Norm configs the authors' README's."""
    rows = [_row(f'retinanet_nalaformer_{s}_1x', 'CocoDataset', 'NaLaFormer-tiny', 'x',
                 'NaLaFormer:tiny') for s in ('tiny', 'tiny-official')]
    rows += [_row('retinanet_soft_tiny-norm_1x', 'CocoDataset', 'SOFT-tiny-norm', 'x',
                  "SOFT:tiny-norm:pinv='cholesky'")]
    cache = {'x': CACHE['a']}
    text = model_zoo.render_family('nalaformer', rows, cache, {})
    cells = {line.split(']')[0][3:]: [c.strip() for c in line.split('|')]
             for line in text.splitlines() if line.startswith('| [retinanet')}
    # box AP, mask AP, source
    assert cells['retinanet_nalaformer_tiny_1x'][7:10] == ['–', '–', '–']
    assert cells['retinanet_nalaformer_tiny-official_1x'][7:10] == [
        '46.2', '–', 'NaLaFormer paper, Table 2']
    assert 'None of the 2 configs loads ImageNet weights that exist today; 1 ' in text
    text = model_zoo.render_family('soft', rows, cache, {})
    soft = next(line for line in text.splitlines() if 'tiny-norm_1x' in line)
    assert "| 40.0 | – | SOFT authors' README (SOFT-Norm), not the paper |" in soft
    assert '63.0 (23)' in soft   # the README's params count in the parentheses
    assert '1 of the 1 configs (the `*-norm` ones) load ImageNet weights that exist' in text


def test_family_of():
    assert model_zoo.family_of('retinanet_infvitplain_l4_1x') == 'infvit'
    assert model_zoo.family_of('upernet_nalaformer_base_cityscapes_40k') == 'nalaformer'
    with pytest.raises(ValueError, match='unknown backbone family'):
        model_zoo.family_of('retinanet_swin_tiny_1x')


def test_model_index_imports_every_family():
    assert model_zoo.render_model_index().splitlines() == [
        'Import:'] + [f'  - docs/model_zoo/{k}/metafile.yml'
                      for k in ('soft', 'nalaformer', 'infvit', 'ldn')]


def test_param_gaps_over_five_percent():
    within = dict(CACHE, a=dict(CACHE['a'], params=62.9e6))  # +4.8 % of 60 M
    assert model_zoo.param_gaps(_rows(), within) == []
    cache = dict(CACHE, a=dict(CACHE['a'], params=63.1e6))  # +5.2 %
    gaps = model_zoo.param_gaps(_rows(), cache)
    assert len(gaps) == 1 and gaps[0].startswith('upernet_soft_small_ade20k_160k')


def test_sections_without_paper_results_have_no_accuracy_columns(lat):
    text = model_zoo.render_family('ldn', _rows(), CACHE, lat)
    head = next(line for line in text.splitlines() if line.startswith('| config'))
    assert "(authors'" not in head and '| source |' not in head
    text = model_zoo.render_family('soft', _rows(), CACHE, lat)
    ade = text[text.index('### ADE20K'):]
    assert "| mIoU (authors' paper / README) | source |" in ade.splitlines()[2]


def test_soft_notes_follow_the_configs_pinv(lat):
    text = model_zoo.render_family('soft', _rows(), CACHE, lat)
    assert '- †: timed with' in text and 'leave out the Cholesky' not in text
    rows = [dict(r, bench=r['bench_fallback'], bench_fallback=None) if r['bench_fallback']
            else r for r in _rows()]
    text = model_zoo.render_family('soft', rows, CACHE, lat)
    assert '- †: timed with' not in text and 'leave out the Cholesky' in text
    soft = next(line for line in text.splitlines() if 'upernet_soft_small' in line)
    assert soft.endswith('| 2.50 |')  # measured as configured: no dagger
