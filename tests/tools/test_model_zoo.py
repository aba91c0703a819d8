"""tools/analysis_tools/model_zoo.py (:mod:`mmlinattn.benchmark.model_zoo`): rows, paper
numbers, differences to the paper and failed measurements are rendered as documented (on
a hand-made cache; the measurements themselves are tools/analysis_tools/get_flops.py's,
tested in test_get_flops.py)."""
from mmlinattn.benchmark import model_zoo


def _rows():
    return [
        dict(name='upernet_soft_small_ade20k_160k', dataset='ADE20KDataset',
             backbone='SOFT-small', key='a'),
        dict(name='semfpn_ldn_tiny_ade20k_40k', dataset='ADE20KDataset',
             backbone='LDN-tiny', key='b'),
        dict(name='retinanet_soft_tiny_1x', dataset='CocoDataset', backbone='SOFT-tiny',
             key='c'),
    ]


CACHE = {
    'a': dict(params=63e6, params_backbone=26e6, flops=2 * 300e9, flops_backbone=2 * 100e9,
              flops_newton=2 * 80e9),
    'b': dict(params=19e6, params_backbone=15e6, flops=2 * 35e9, flops_backbone=2 * 13e9,
              flops_newton=0),
    'c': dict(error='not measured: over the 600 s time limit at 800x1280'),
}


def test_render_rows():
    text = model_zoo.render(_rows(), CACHE)
    soft = next(line for line in text.splitlines() if 'upernet_soft_small' in line)
    # paper: mIoU 46.5, 60 M, 237 G (SOFT++ Tab. 7); ours 63.0 M = +5.0 %
    assert 'mIoU 46.5 (SOFT++ Tab. 7)' in soft and '| 60 M |' in soft and '| 237 G |' in soft
    assert '63.0 M (+5.0%)' in soft
    assert '300.0 G (Newton-Schulz 80.0 G; without it 220.0 G)' in soft
    ldn = next(line for line in text.splitlines() if 'semfpn_ldn_tiny' in line)
    assert ldn.count('not reported') == 3 and 'Newton' not in ldn
    assert '(../configs/semfpn_ldn_tiny_ade20k_40k.py)' in ldn
    retina = next(line for line in text.splitlines() if 'retinanet_soft_tiny' in line)
    assert 'over the 600 s time limit' in retina
    assert text.index('## COCO') < text.index('## ADE20K')
    assert text.index('semfpn_ldn_tiny') < text.index('upernet_soft_small')


def test_param_gaps_over_five_percent():
    within = dict(CACHE, a=dict(CACHE['a'], params=62.9e6))  # +4.8 % of 60 M
    assert model_zoo.param_gaps(_rows(), within) == []
    cache = dict(CACHE, a=dict(CACHE['a'], params=63.1e6))  # +5.2 %
    gaps = model_zoo.param_gaps(_rows(), cache)
    assert len(gaps) == 1 and gaps[0].startswith('upernet_soft_small_ade20k_160k')
