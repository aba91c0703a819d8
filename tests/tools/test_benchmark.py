"""tools/analysis_tools/benchmark.py and :mod:`benchlib`: spec parsing, FLOP
counting, the JSON / CSV / PNG outputs and that out-of-memory cases come back as results
("oom"), not crashes.

Tiny arch dicts and sizes, one timed repeat: the numbers are not benchmarks, only the
plumbing is checked.
"""
import csv
import json
import math
import os
import sys
from dataclasses import asdict

import pytest
import torch

import benchlib as B
from benchlib.specs import INTERLEAVE_ROUNDS
from repo_paths import ROOT
from tool_runs import tool as tool_process


TINY = {
    'SOFT': "SOFT:{'embed_dims': (32, 32, 32, 32), 'num_heads': (1, 1, 1, 1), "
            "'depths': (1, 1, 1, 1)}:max_landmarks=16",
    'NaLaFormer': "NaLaFormer:{'embed_dims': (16, 16, 16, 16), 'depths': (1, 1, 1, 1), "
                  "'num_heads': (1, 1, 1, 1)}",
    'InfViT': "InfViT:{'embed_dims': (16, 16, 16, 16), 'depths': (1, 1, 1, 1), "
              "'mlp_ratios': (2, 2, 2, 2)}",
    'LDN': "LDN:{'embed_dims': (16, 16, 16, 16), 'depths': (1, 1, 1, 1), "
           "'num_heads': (1, 1, 1, 1)}",
    'Swin-T': 'Swin-T:embed_dims=24:depths=(1, 1, 1, 1):num_heads=(1, 1, 1, 1)',
}


def bench(tmp_path, *args) -> dict:
    """Run the benchmark tool; the JSON it writes (meta, records, summary)."""
    out = tmp_path / f'bench{len(list(tmp_path.glob("bench*.json")))}.json'
    proc = tool_process([sys.executable, 'tools/analysis_tools/benchmark.py', *args,
                         '--copy-mib', '4', '--json', str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


REQUIRED = ('model', 'arch', 'height', 'width', 'batch', 'mode', 'params_m', 'gflops',
            'latency_ms_median', 'latency_ms_min', 'latency_ms_max', 'peak_mem_mb', 'status')


def test_parse_model_spec():
    s = B.parse_model_spec('SOFT:small:max_landmarks=64:newton_iters=10')
    assert (s.model, s.arch, s.kwargs, s.peer) == ('SOFT', 'small',
                                                   dict(max_landmarks=64, newton_iters=10),
                                                   False)
    s = B.parse_model_spec(TINY['LDN'])
    assert s.arch == dict(embed_dims=(16, 16, 16, 16), depths=(1, 1, 1, 1),
                          num_heads=(1, 1, 1, 1))
    s = B.parse_model_spec("InfViT:small:stage_mixers='pure'")
    assert s.kwargs == dict(stage_mixers='pure')
    for alias in ('Swin-T', 'swin_t', 'PVTv2-b2', 'pvtv2b1', 'ResNet-50', 'r50'):
        assert B.parse_model_spec(alias).peer
    assert B.parse_model_spec('pvtv2-b1').model == 'PVTv2-b1'
    with pytest.raises(ValueError, match='need an arch'):
        B.parse_model_spec('SOFT')
    with pytest.raises(ValueError, match='key=value'):
        B.parse_model_spec('SOFT:small:oops')
    with pytest.raises(ValueError, match='no arch'):
        B.parse_model_spec('Swin-T:tiny')


def test_fit_exponent_and_ratio():
    xs = [1e3, 4e3, 1.6e4]
    assert B.fit_exponent(xs, [2 * x for x in xs]) == pytest.approx(1.0)
    assert B.fit_exponent(xs, [x**2 for x in xs]) == pytest.approx(2.0)
    assert B.fit_exponent([1e3], [1.0]) is None
    ok = dict(status='ok', latency_ms_median=2.0)
    assert B.ratio(ok, dict(status='ok', latency_ms_median=4.0), 'latency_ms_median') == 0.5
    assert B.ratio(ok, dict(status='oom', latency_ms_median=None), 'latency_ms_median') == 0
    assert math.isinf(B.ratio(dict(status='timeout', latency_ms_median=None), ok,
                               'latency_ms_median'))


def test_summary_ratios_at_every_common_size():
    def rec(label, size, lat, mem, status='ok'):
        return dict(label=label, mode='infer', height=size, width=size, tokens=(size // 4)**2,
                    latency_ms_median=lat, cpu_ms_median=lat, peak_mem_mb=mem, status=status)
    records = [rec('A', 256, 10.0, 100.0), rec('A', 512, 40.0, 400.0),
               rec('Swin-T', 256, 20.0, 100.0), rec('Swin-T', 512, 80.0, 200.0),
               rec('PVTv2-b2', 256, 5.0, 50.0), rec('PVTv2-b2', 512, None, None, 'oom')]
    summary = B.summarize(records)
    a = summary['A|infer']
    assert a['latency_exponent'] == pytest.approx(1.0)
    assert a['ratios']['Swin-T@512x512']['latency'] == pytest.approx(0.5)
    assert a['ratios']['Swin-T@512x512']['memory'] == pytest.approx(2.0)
    assert a['ratios']['PVTv2-b2@512x512']['latency'] == 0.0      # the peer failed there
    rows = [line for line in B.markdown_ratios(summary).splitlines() if line.startswith('| A ')]
    assert rows == ['| A | infer | 256x256 | 0.50 | 2.00 | 1.00 | 2.00 |',
                    '| A | infer | 512x512 | 0.50 | 0.00 | 2.00 | 0.00 |']


def test_flop_counter_counts_grouped_conv_backward_per_group():
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    x = torch.randn(1, 8, 32, 32, requires_grad=True)
    with B.flop_counter() as fc:
        conv(x).sum().backward()
    fwd = 2 * 8 * 32 * 32 * 9  # 2 FLOPs per multiply-add, one 3x3 tap set per channel
    counts = {str(k): v for k, v in fc.get_flop_counts()['Global'].items()}
    assert counts['aten.convolution'] == fwd
    assert counts['aten.convolution_backward'] == 2 * fwd  # grad input + grad weight


def test_block_traffic_counts_each_blocks_input_and_output_once():
    """The blocks of our backbones and the peers are found by their class names, outermost
    only (a Swin-T of depths (1, 1, 1, 1): 4 SwinBlocks; ResNet-50: 16 Bottlenecks; one
    per block of ours); the
    traffic is the bytes of each block's input and output in one forward, on fake tensors
    too, twice that for training."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from archs import build
    for spec, blocks in ((TINY['Swin-T'], 4), ('ResNet-50', 16)):
        found = B.block_modules(B.build_model(B.parse_model_spec(spec)))
        assert len(found) == blocks and len({type(m) for m in found}) == 1, spec
    model = build('LDN')          # tiny: 2 + 2 + 2 + 2 blocks, (B, C, H, W) maps between them
    found = B.block_modules(model)
    assert [type(m).__name__ for m in found] == ['LDNBlock'] * sum(model.depths)
    seen = []
    hooks = [m.register_forward_hook(lambda _m, a, o: seen.append(a[0].numel() + o.numel()))
             for m in found]
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    totals = {}
    with torch.no_grad(), B.count_block_bytes(model, totals):
        model(x)
    assert totals['block_bytes'] == 4 * sum(seen) > 0       # float32
    fake = {}     # as the benchmark counts a case that runs compiled or failed
    model.check_finite = False     # a value test: fake tensors have no values
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad(), B.count_flops(fake), \
            B.count_block_bytes(model, fake):
        model(torch.empty(1, 3, 64, 96))
    assert fake['block_bytes'] == totals['block_bytes']
    assert B.block_traffic_mb(2**20, 'infer') == 1.0 and B.block_traffic_mb(2**20, 'train') == 2


def test_newton_schulz_flops_counted_separately_and_in_total():
    import mmlinattn.ops.soft as soft_ops
    a = torch.eye(16).expand(2, 16, 16).contiguous()
    totals = {}
    with B.count_flops(totals):
        soft_ops.newton_schulz_pinv(a, num_iters=3)  # looked up as the attention op does
        a @ a  # outside the pseudo-inverse
    per_iter = 2 * (2 * 16**3)            # y @ a @ y: two 16x16 products per matrix
    assert totals['newton'] == 2 * 3 * per_iter
    assert totals['total'] == totals['newton'] + 2 * (2 * 16**3)


def test_quick_style_run_writes_json_csv_png(tmp_path):
    models = list(TINY.values())
    data = res = bench(tmp_path, '--models', *models, '--sizes', '96', '160', '--repeats', '1',
                       '--warmup', '1', '--timeout', '120', '--matmul-size', '256',
                       '--threads', '1', '--csv', str(tmp_path / 'out.csv'),
                       '--plot', str(tmp_path / 'out.png'), '--markdown',
                       str(tmp_path / 'out.md'), '--quiet')
    assert data['meta']['matmul']['before']['gflops_per_s'] > 0
    assert data['meta']['cpu_malloc'] == 'reuse'
    recs = data['records']
    assert len(recs) == len(models) * 2 == len(res['records'])
    assert {r['model'] for r in recs} == set(TINY)
    for r in recs:
        missing = [k for k in REQUIRED if k not in r]
        assert not missing, missing
        assert r['status'] == 'ok', r
        assert r['batch'] == 1 and r['mode'] == 'infer'
        assert r['params_m'] > 0 and r['gflops'] > 0 and r['peak_mem_mb'] >= 0
        assert r['latency_ms_min'] <= r['latency_ms_median'] <= r['latency_ms_max']
        assert r['cpu_ms_median'] > 0 and r['threads'] == 1
        # a full CPU run times the models of each size interleaved, each in its own process
        assert r['latency_method'] == 'interleaved' and r['repeats'] == INTERLEAVE_ROUNDS
        assert r['isolated_latency_ms_min'] <= r['isolated_latency_ms_max']
        assert r['cpu_malloc'] in ('reuse', 'system')   # 'system' only off glibc
        assert r['tokens'] == math.ceil(r['height'] / 4) * math.ceil(r['width'] / 4)
    # FLOPs grow with the image; the SOFT record carries its Newton-Schulz share
    by = {(r['model'], r['height']): r for r in recs}
    for name in TINY:
        assert by[(name, 160)]['gflops'] > by[(name, 96)]['gflops']
    soft = by[('SOFT', 160)]
    assert 0 < soft['newton_gflops'] < soft['gflops']
    assert by[('LDN', 160)]['newton_gflops'] == 0
    # the roofline bound: FLOPs at the probe's matmul rate, block traffic at its bandwidth
    probe = data['meta']['matmul']['before']
    assert probe['copy_mib'] == 4 and probe['bandwidth_gb_per_s'] > 0
    for r in recs:
        compute = r['gflops'] / probe['gflops_per_s'] * 1e3
        memory = r['block_traffic_mb'] * 2**20 / (probe['bandwidth_gb_per_s'] * 1e9) * 1e3
        assert r['roofline_compute_ms'] == pytest.approx(compute)
        assert r['roofline_memory_ms'] == pytest.approx(memory)
        assert r['roofline_ms'] == max(compute, memory) and r['roofline_bound'] == (
            'compute' if compute > memory else 'memory')
        assert r['roofline_fraction'] == pytest.approx(r['roofline_ms'] / r['latency_ms_median'])
    table = (tmp_path / 'out.md').read_text()
    assert '| roofline ms (bound) | % roofline |' in table
    for r in recs:
        cells = f"| {r['roofline_ms']:.2f} ({r['roofline_bound']}) | " \
                f"{r['roofline_fraction'] * 100:.0f} |"
        assert cells in table, (cells, table)
    # the traffic grows with the pixels: 160^2 / 96^2 = 2.78 (up to the stride's rounding)
    for name in TINY:
        grow = by[(name, 160)]['block_traffic_mb'] / by[(name, 96)]['block_traffic_mb']
        assert 2.5 < grow < 3.1, (name, grow)
    # 96² and 160²: a warm step of these models needs 0.1-2.5 MiB, which the RSS resolves
    # (at 64² one read 0, and a zero has no logarithm)
    for e in data['summary'].values():
        assert e['latency_exponent'] is not None and e['memory_exponent'] is not None
    with open(tmp_path / 'out.csv') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(recs) and set(REQUIRED) <= set(rows[0])
    png = (tmp_path / 'out.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10000


def test_interleaved_rounds_step_every_model_once_and_respect_the_budget(tmp_path):
    models = [TINY['LDN'], TINY['Swin-T'], TINY['NaLaFormer']]
    common = ['--models', *models, '--sizes', '64', '--flops', 'none', '--matmul-size', '128',
              '--threads', '1', '--quiet']
    res = bench(tmp_path, *common, '--interleave', '3', '--repeats', '1')
    (group, ) = res['meta']['interleave']['groups']
    assert group['status'] == 'ok' and group['size'] == '64x64'
    assert len(group['orders']) == 3
    for order in group['orders']:
        assert sorted(order) == sorted(models)
    for r in res['records']:
        assert r['latency_method'] == 'interleaved' and r['repeats'] == 3
    # a budget shorter than 3 steps of any model: every model keeps its isolated times
    res = bench(tmp_path, *common, '--interleave', '3', '--repeats', '1', '--budget', '1e-6')
    assert res['meta']['interleave']['groups'] == []
    for r in res['records']:
        assert r['latency_method'] == 'isolated' and r['isolated_latency_ms_median'] is None
    # the workers all stay alive: none is started without the memory it may need
    cases = [_case(m, 64, None) for m in models[:2]]
    res = B.run_interleaved(cases, 1, 0, [60, 60], [1e12, 1e12])
    assert res['status'] == 'skipped' and 'MiB available' in res['note']
    # --interleave 0: isolated only
    res = bench(tmp_path, *common, '--interleave', '0')
    assert {r['latency_method'] for r in res['records']} == {'isolated'}
    assert {r['repeats'] for r in res['records']} == {5}


def test_paired_rounds_time_each_model_against_the_peer_alone(tmp_path):
    """Training at detection sizes: the warm workers of all models need not fit together."""
    models = [TINY['LDN'], TINY['Swin-T'], TINY['NaLaFormer']]
    res = bench(tmp_path, '--models', *models, '--sizes', '64', '--flops', 'none',
                '--matmul-size', '128', '--threads', '1', '--quiet', '--interleave', '2',
                '--repeats', '1', '--interleave-pairs')
    (group, ) = res['meta']['interleave']['groups']
    assert group['status'] == 'ok' and group['method'] == 'pairs'
    peer = models[1]
    assert group['reference'] == peer
    # two rounds per pair, each round the model and the peer once, never a third process
    assert len(group['orders']) == 4
    for order in group['orders']:
        assert len(order) == 2 and peer in order
    by = {r['label']: r for r in res['records']}
    assert by[peer]['repeats'] == 4 and by[peer]['paired_with'] is None
    summary = B.summarize(res['records'], peers=(peer, ))
    for m in (models[0], models[2]):
        r = by[m]
        assert r['latency_method'] == 'interleaved_pairs' and r['repeats'] == 2
        assert r['paired_with'] == peer and r['paired_ref_latency_ms_median'] > 0
        # the ratio is the one of the pair's own rounds, not of the peer's pooled median
        got = summary[f'{m}|infer']['ratios'][f'{peer}@64x64']['latency']
        assert got == pytest.approx(r['latency_ms_median'] / r['paired_ref_latency_ms_median'])


def test_pairs_that_do_not_fit_together_alternate_one_worker_at_a_time(monkeypatch):
    """Training at 2048^2 on 24 GiB: not even the model and the peer fit warm together."""
    import benchlib.interleave as interleave
    real_context = interleave.mp_context
    alive_at_start = []      # workers alive whenever one more is created

    class CountingContext:
        def __init__(self, ctx):
            self.ctx, self.procs = ctx, []

        def Pipe(self):  # noqa: N802 (multiprocessing's name)
            return self.ctx.Pipe()

        def Process(self, **kw):  # noqa: N802
            alive_at_start.append(sum(p.is_alive() for p in self.procs))
            self.procs.append(self.ctx.Process(**kw))
            return self.procs[-1]

    contexts = {}
    monkeypatch.setattr(interleave, 'mp_context',
                        lambda *a: contexts.setdefault('ctx', CountingContext(real_context(*a))))
    model, peer = (B.parse_model_spec(TINY[m]) for m in ('LDN', 'Swin-T'))

    def group():  # what the isolated runs reported: each worker may need 1.5 x 1000 MiB
        isolated = dict(status='ok', peak_total_mb=1000.0, latency_ms_median=10.0,
                        latency_ms_min=10.0, latency_ms_max=10.0)
        return [((i, ), spec, _case(TINY[name], 64, None), dict(isolated))
                for i, (spec, name) in enumerate(((model, 'LDN'), (peer, 'Swin-T')))]

    # 2000 MiB available: one worker fits, the pair (3000) does not
    monkeypatch.setattr(interleave, 'mem_available_mb', lambda: 2000.0)
    g = group()
    info = interleave.interleave_group(g, 2, 60.0, B.CPU_PRELOAD, print)
    assert info['status'] == 'ok' and info['method'] == 'pairs', info
    assert info['reference'] == peer.label and info['alternated'] == [model.label]
    assert alive_at_start == [0, 0, 0, 0]   # 2 rounds x 2 models, each worker alone
    assert len(info['orders']) == 2
    for order in info['orders']:
        assert sorted(order) == sorted([model.label, peer.label])
    for _, _, _, r in g:
        assert r['latency_method'] == 'alternated_pairs' and r['repeats'] == 2
        assert r['isolated_latency_ms_median'] == 10.0 and r['latency_ms_median'] > 0
    assert g[0][3]['paired_with'] == peer.label and g[0][3]['paired_ref_latency_ms_median'] > 0

    # with memory for both, a pair keeps its two workers warm together
    alive_at_start.clear()
    monkeypatch.setattr(interleave, 'mem_available_mb', lambda: 4000.0)
    g = group()
    info = interleave.interleave_group(g, 2, 60.0, B.CPU_PRELOAD, print, pairs=True)
    assert info['status'] == 'ok' and 'alternated' not in info
    assert alive_at_start == [0, 1]
    assert {r['latency_method'] for _, _, _, r in g} == {'interleaved_pairs'}
    # ... unless asked to alternate
    alive_at_start.clear()
    info = interleave.interleave_group(group(), 1, 60.0, B.CPU_PRELOAD, print,
                                       pairs='alternate')
    assert info['alternated'] == [model.label] and alive_at_start == [0, 0]
    with pytest.raises(ValueError, match='alternate'):
        interleave.interleave_group(group(), 1, 60.0, B.CPU_PRELOAD, print, pairs='sometimes')


def _case(spec: str, size: int, cap_mb, **kw) -> B.Case:
    return B.Case(spec=asdict(B.parse_model_spec(spec)), height=size, width=size,
                  warmup=1, repeats=1, mem_cap_mb=cap_mb, flops='none', threads=1, **kw)


def test_tiny_memory_cap_is_an_oom_result_not_a_crash():
    # the 1024^2 input alone (12 MiB) exceeds an 8 MiB cap
    res = B.run_isolated(B.case_child, (_case(TINY['LDN'], 1024, 8), ), 120)
    assert res['status'] == 'oom', res
    # and the same case without the cap runs
    res = B.run_isolated(B.case_child, (_case(TINY['LDN'], 64, None), ), 120)
    assert res['status'] == 'ok', res


def test_timeout_is_a_result():
    res = B.run_isolated(B.case_child, (_case(TINY['LDN'], 512, None, ), ), 0.05)
    assert res['status'] == 'timeout', res


def test_failed_sizes_are_recorded_and_larger_ones_skipped(tmp_path):
    res = bench(tmp_path, '--models', TINY['LDN'], '--sizes', '64', '2048', '4096',
                '--repeats', '1', '--mem-cap-mb', '40', '--flops', 'none', '--matmul-size',
                '128', '--quiet', '--threads', '1')
    status = {r['height']: r['status'] for r in res['records']}
    assert status == {64: 'ok', 2048: 'oom', 4096: 'skipped'}
    assert 'oom at 2048x2048' in res['summary'][f"{TINY['LDN']}|infer"]['failures']


def test_a_run_where_every_case_failed_keeps_its_json_and_writes_no_plot(tmp_path):
    png = tmp_path / 'none.png'
    res = bench(tmp_path, '--models', TINY['LDN'], '--sizes', '2048', '--repeats', '1',
                '--mem-cap-mb', '40', '--flops', 'none', '--matmul-size', '128', '--quiet',
                '--threads', '1', '--plot', str(png))
    assert [r['status'] for r in res['records']] == ['oom']
    assert not png.exists()


def test_peak_memory_is_a_warm_plain_steps_whether_or_not_flops_are_counted():
    """The FLOP-counting step runs under a dispatch mode with global module hooks, which turn
    the fused paths off, and the first plain step pays one-time costs (compiling SOFT++'s
    kernel, importing the compiler): neither is the step's memory.  This SOFT++ at 512² had
    48 MiB with FLOPs counted (the counted step's peak) and 133 MiB without (mostly the
    compiler); a warmed-up plain step needs 27 MiB either way (2026-11-28)."""
    peaks = {}
    for flops in ('real', 'none'):
        case = _case(TINY['SOFT'], 512, None)
        case.flops = flops
        res = B.run_isolated(B.case_child, (case, ), 300)
        assert res['status'] == 'ok', res
        peaks[flops] = res['peak_mem_mb']
    assert abs(peaks['real'] - peaks['none']) <= 0.1 * peaks['none'] + 2, peaks
    assert peaks['none'] < 60, peaks


def test_no_timed_step_compiles():
    """The FLOP-counting warm-up runs NaLa's feature maps eagerly (a dispatch mode), so a
    plain warm-up step must compile them before the timed steps.  Without it (CUDA, and
    CPU with glibc's allocator and no memory cap) the first timed step took the compile:
    seconds, against ~10 ms for the others."""
    case = _case(TINY['NaLaFormer'], 64, None, cpu_malloc='system')
    case.flops, case.repeats = 'real', 3
    res = B.run_isolated(B.case_child, (case, ), 300)
    assert res['status'] == 'ok' and res['repeats'] == 3, res
    assert res['latency_ms_max'] < 3 * res['latency_ms_min'], res


def test_cuda_cases_run_in_spawned_processes():
    """Importing mmengine asks the CUDA driver for its devices, and CUDA cannot start in a
    process forked after that: CUDA cases are spawned, CPU cases forked from the server.
    The spawn path is run here with a CPU case."""
    from benchlib.isolation import mp_context
    assert mp_context(device='cuda:0').get_start_method() == 'spawn'
    assert mp_context(device='cpu').get_start_method() == 'forkserver'
    res = B.run_isolated(B.case_child, (_case(TINY['LDN'], 64, None), ), 300, device='cuda')
    assert res['status'] == 'ok', res


def test_replot_shows_sizes_and_marks_peers(tmp_path):
    """--replot re-renders a finished run's JSON: image sizes on the x axis, peers named."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from unittest import mock

    from PIL import Image
    src = os.path.join(ROOT, 'records', 'benchmark_cpu.json')
    png = tmp_path / 'replot.png'
    proc = tool_process([sys.executable, 'tools/analysis_tools/benchmark.py', '--replot', src,
                         '--plot', str(png)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Image.open(png).size == (1650, 770)  # figsize (15, 7) at 110 dpi
    captured = {}
    orig = plt.Figure.savefig

    def grab(fig, *a, **k):
        captured['fig'] = fig
        return orig(fig, *a, **k)
    with mock.patch.object(plt.Figure, 'savefig', grab):
        B.replot(src, str(tmp_path / 'again.png'))
    ax = captured['fig'].axes[0]
    sizes = [t.get_text().split('\n')[0] for t in ax.get_xticklabels()]
    assert sizes == ['512²', '1024²', '2048²']
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {t.split(' (')[0] for t in legend if t.startswith('peer: ')} == {
        'peer: Swin-T', 'peer: ResNet-50', 'peer: PVTv2-b1', 'peer: PVTv2-b2'}
    assert not any(t.startswith('peer: ') for t in legend if 'SOFT' in t or 'LDN' in t)
    assert captured['fig']._suptitle.get_text().startswith('inference: cpu float32')
    train = os.path.join(ROOT, 'records', 'benchmark_cpu_train.json')
    with mock.patch.object(plt.Figure, 'savefig', grab):
        B.replot(train, str(tmp_path / 'train.png'))
    assert captured['fig']._suptitle.get_text().startswith(
        'training (forward + backward): cpu float32')


def test_profile_keeps_the_top_ops_and_the_total_of_all():
    """``--profile K``: the K ops with the most self time of one profiled step, largest
    first, each with its share of ``profiled_ms``, the self time of all ops (on CUDA that
    of the kernels: the time the GPU was busy)."""
    res = B.run_isolated(B.case_child, (_case(TINY['InfViT'], 64, None, profile=3), ), 120)
    assert res['status'] == 'ok', res
    top = res['hotspots']
    assert len(top) == 3 and top[0]['self_ms'] >= top[1]['self_ms'] >= top[2]['self_ms'] > 0
    assert sum(r['self_ms'] for r in top) < res['profiled_ms']
    for r in top:
        assert r['share'] == pytest.approx(r['self_ms'] / res['profiled_ms'])
        # PyTorch's ops, or oneDNN's fused ones (a GELU inside its linear / conv in inference)
        assert r['op'].split('::')[0] in ('aten', 'mkldnn') and r['calls'] >= 1


def test_markdown_lists_the_hotspots_of_profiled_cases(tmp_path):
    """``--profile K --markdown``: after the tables, each profiled case's latency, total
    self time and its K top ops; op names with '|' escaped and long ones cut; nothing when
    no case was profiled."""
    md = tmp_path / 'bench.md'
    res = bench(tmp_path, '--models', TINY['InfViT'], '--sizes', '64', '--repeats', '1',
                '--profile', '2', '--flops', 'none', '--matmul-size', '128', '--quiet',
                '--threads', '1', '--markdown', str(md))
    text = md.read_text()
    (rec, ) = res['records']
    assert f"**{rec['label']}, 64², infer**: latency" in text
    assert f"profiled self time of all ops {rec['profiled_ms']:.1f} ms" in text
    rows = [line for line in text.splitlines() if line.startswith('| `')]
    assert [r.split('`')[1] for r in rows] == [h['op'] for h in rec['hotspots']]
    fake = dict(rec, hotspots=[dict(op='a|b' + 'x' * 200, calls=1, self_ms=1.0, share=0.5)])
    (row, ) = [line for line in B.markdown_hotspots([fake], width=20).splitlines()
               if line.startswith('| `')]
    assert row.startswith('| `a\\|b' + 'x' * 15 + '…` | 1 | 1.00 | 50.0 |'), row
    assert B.markdown_hotspots([dict(rec, hotspots=None)]) == ''


@pytest.mark.parametrize('flags, units', [
    ('fpu sse2 avx avx2 fma', 'AVX2'),
    ('fpu avx2 avx512f avx512bw', 'AVX-512'),
    ('fpu avx2 avx512f amx_bf16 amx_tile', 'AVX-512, AMX'),
])
def test_cpu_name_tells_machine_types_apart(tmp_path, flags, units):
    """The records name the CPU with its family, model and vector units, read from the
    first processor's block only: cloud EPYCs of two generations share one model name."""
    from mmlinattn.utils.machine import cpu_name
    block = ('processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n'
             'model name\t: AMD EPYC\nflags\t\t: {flags}\n\n')
    info = tmp_path / 'cpuinfo'
    info.write_text(block.format(n=0, flags=flags) + block.format(n=1, flags='fpu').replace(
        'cpu family\t: 26', 'cpu family\t: 25'))
    assert cpu_name(str(info)) == f'AMD EPYC (family 26 model 2, {units})'
    bare = tmp_path / 'bare'
    bare.write_text('processor\t: 0\nmodel name\t: Some CPU\n')
    assert cpu_name(str(bare)) == 'Some CPU'
