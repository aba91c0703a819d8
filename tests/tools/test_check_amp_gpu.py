"""dev/check_amp_gpu.py, bench_token_sums.py, bench_triton_core.py, ab_device_paths.py
and gpu_checks.sh, the GPU checks, kept runnable where CI has no GPU: the parity check (0),
the token-sum timing, the Triton core's timing (in Triton's interpreter) and the on / off
timing of the off-CPU paths with the CPU standing in for the GPU, and their answer without a
GPU."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from repo_paths import ROOT
from tool_runs import tool as tool_process, tool_module

SCRIPT = osp.join(ROOT, 'dev', 'check_amp_gpu.py')


def _tool(name: str):
    """``dev/<name>.py`` as a module."""
    return tool_module(f'dev/{name}.py')


def _script():
    return _tool('check_amp_gpu')


def test_parity_check_measures_float32_against_float64():
    """LDN-tiny in float32 is within 1e-4 of float64 in its outputs and input gradient (the
    bound the GPU is held to), and the check reports both devices' errors."""
    check = _script()
    r = check.check_parity(check.SMALLEST['LDN'], device='cpu')
    assert r['ok'], r
    for key in ('output', 'input_grad'):
        assert 0 < r[key]['cpu'] < check.PARITY_TOL and r[key]['gpu'] == r[key]['cpu'], r


class _NaNAfterConv(torch.nn.Module):
    """A backbone whose second output is NaN: what check 1 must catch."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=4)

    def forward(self, x):
        y = self.conv(x)
        return y, y * float('nan')


def test_autocast_check_on_the_cpu():
    """Check 1's code with the CPU in the GPU's place (bf16 autocast): LDN-tiny and SOFT++
    with ``pinv='cholesky'`` (the paper's landmark rule) give finite outputs and a finite
    gradient for every parameter; a backbone with a NaN output fails the check."""
    from mmlinattn.registry import MODELS
    check = _script()
    cfgs = check.models_to_check(['LDN', 'SOFT'], soft_max_landmarks=49)
    assert cfgs['SOFT']['max_landmarks'] == 49 and 'max_landmarks' not in check.SMALLEST['SOFT']
    assert cfgs["SOFT pinv='cholesky'"] == check.EXTRA["SOFT pinv='cholesky'"]
    for name in ('LDN', "SOFT pinv='cholesky'"):
        r = check.check_autocast(cfgs[name], 'bf16', 96, device='cpu')
        assert r['ok'] and r['outputs_finite'] and not r['bad_grads'], (name, r)
    MODELS.register_module(name='_NaNAfterConv', module=_NaNAfterConv, force=True)
    try:
        r = check.check_autocast(dict(type='_NaNAfterConv'), 'bf16', 96, device='cpu')
    finally:
        MODELS._module_dict.pop('_NaNAfterConv')
    assert not r['ok'] and not r['outputs_finite'] and r['bad_grads'] == ['conv.weight',
                                                                          'conv.bias'], r


@pytest.mark.skipif(torch.cuda.is_available(), reason='about machines without a GPU')
def test_without_a_gpu_it_says_so():
    proc = tool_process([sys.executable, SCRIPT, '--no-parity'])
    assert proc.returncode == 2 and 'needs a CUDA GPU' in proc.stdout, proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason='about machines without a GPU')
@pytest.mark.parametrize('script', ['gpu_checks.sh', 'gpu_end_to_end.sh'])
def test_gpu_checks_script_without_a_gpu_says_so(tmp_path, script):
    proc = subprocess.run(['bash', osp.join(ROOT, 'dev', script),
                           str(tmp_path / 'out')], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, 'PYTHON': sys.executable})
    assert proc.returncode == 2 and f'{script} needs a CUDA GPU' in proc.stderr, proc.stderr


def test_gpu_checks_script_runs_its_checks_in_order_and_skips_a_zero_limit(tmp_path):
    """With an interpreter that claims a GPU and records its arguments: the checks run in
    their order with their logs in OUT_DIR, the benchmarks with mmdet's peers where mmdet
    imports, and a time limit of 0 skips a check.  Without mmdet, the wheels of
    dev/device_wheels.sh are installed into a site folder first, with the stand-in
    for mmcv's compiled ops, and that folder leads the checks' PYTHONPATH."""
    fake = tmp_path / 'python'
    calls, paths = tmp_path / 'calls.txt', tmp_path / 'paths.txt'
    # no mmdet while $NO_MMDET is set; "pip install --target DIR" makes DIR/mmcv
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {calls}
echo "$PYTHONPATH" >> {paths}
if [ "$1" = -c ] && [[ "$2" == *mmdet* ]] && [ -n "$NO_MMDET" ]; then exit 1; fi
if [ "$1" = -m ] && [ "$2" = pip ]; then mkdir -p "$SITE/mmcv"; fi
exit 0
""")
    fake.chmod(0o755)
    out = tmp_path / 'out'

    def run(**env):
        calls.write_text('')
        paths.write_text('')
        proc = subprocess.run(['bash', osp.join(ROOT, 'dev', 'gpu_checks.sh'),
                               str(out)], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, 'PYTHON': str(fake), **env})
        assert proc.returncode == 0, proc.stderr
        lines = calls.read_text().splitlines()
        return proc.stdout, [c for c in lines if not c.startswith('-c ')], lines, \
            paths.read_text().splitlines()
    stdout, ran, _, _ = run()
    assert [c.split()[0] for c in ran] == ['dev/bench_token_sums.py',
                                          'dev/bench_triton_core.py',
                                          'dev/check_amp_gpu.py',
                                          *['tools/analysis_tools/benchmark.py'] * 5,
                                          'dev/check_amp_gpu.py'], ran
    assert '--no-parity' in ran[2] and '--parity-only' in ran[8], ran
    assert '--profile' in ran[3], ran
    for i, dtype in ((4, 'float16'), (6, 'bfloat16')):  # a detector's, a segmentor's size
        assert '--sizes 1333x800 --batch 2' in ran[i], ran
        assert '--sizes 512 --batch 8' in ran[i + 1], ran
        assert all(f'--dtype {dtype} --modes train' in c for c in ran[i:i + 2]), ran
    assert all('Swin-T ResNet-50' in c for c in ran[3:8]), ran
    names = ('token_sums', 'triton_core', 'autocast', 'benchmark', 'train_det', 'train_seg',
             'train_det_bf16', 'train_seg_bf16')
    assert all((out / f'{name}.log').exists() for name in names + ('parity', ))
    stdout, ran, _, _ = run(**{f'{n.upper()}_S': '0' for n in names})
    assert len(ran) == 1 and '--parity-only' in ran[0], ran
    assert all(f'{name}: skipped' in stdout for name in names)

    wheels, site = tmp_path / 'wheels', tmp_path / 'site'
    wheels.mkdir()
    (wheels / 'mmengine-0-py3-none-any.whl').write_text('')
    stdout, ran, lines, pythonpaths = run(NO_MMDET='1', WHEELS=str(wheels), SITE=str(site),
                                          PARITY_S='0')
    install = [c for c in ran if c.startswith('-m pip install')]
    assert len(install) == 1 and f'--target {site}' in install[0], ran
    assert str(wheels / 'mmengine-0-py3-none-any.whl') in install[0]
    assert (site / 'mmcv' / '_ext.py').read_text() == open(
        osp.join(ROOT, 'dev', 'mmcv_ext_stub.py')).read()
    checks = [p for c, p in zip(lines, pythonpaths) if c.startswith('tools/')]
    assert checks and all(p.split(':')[:2] == [str(site), ROOT] for p in checks), checks
    assert not any('Swin-T' in c for c in ran), ran      # no mmdet: no peers


#: Runs each recorded ``PYTHONPATH<TAB>script args...`` line as ``python script args`` would,
#: up to the end of its argument parsing: its imports and its arguments, not its work.
_PARSE_ONLY = r"""
import argparse, os, runpy, sys
import torch, mmlinattn  # loaded once for all: their import is not what is checked
parse = argparse.ArgumentParser.parse_args


class Parsed(Exception):
    pass


def parse_then_stop(self, args=None, namespace=None):
    parse(self, args, namespace)
    raise Parsed


argparse.ArgumentParser.parse_args = parse_then_stop
path, before = list(sys.path), set(sys.modules)
package = os.path.dirname(mmlinattn.__file__)
for line in open(sys.argv[1]):
    script, *args = line.rstrip('\n').split('\t')[1].split(' ')
    sys.path[:] = [os.path.dirname(os.path.abspath(script))] + path[1:]
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name='__main__')
        print('ran without parsing', script)
    except Parsed:
        print('ok', script)
    except BaseException as e:
        print('failed', script, type(e).__name__, e)
    for name in set(sys.modules) - before:  # the tree's own, found through a script's path
        where = getattr(sys.modules[name], '__file__', None) or ''
        if where.startswith(os.getcwd()) and not where.startswith((package, sys.prefix)):
            del sys.modules[name]
"""


def test_device_scripts_commands_import_and_parse_where_they_run_them(tmp_path):
    """Each command dev/gpu_checks.sh and dev/gpu_end_to_end.sh run, run by a real
    interpreter under the PYTHONPATH the script gives it and nothing else (a bare GPU machine
    has no mmlinattn installed and no pytest paths), imports what it needs and accepts its
    arguments: a check that fails at its import costs device time that only some sessions
    are lent.  The interpreter the scripts call claims a GPU and records the commands."""
    fake = tmp_path / 'python'
    calls = tmp_path / 'calls.txt'
    # -c: the GPU, mmdet and mmcv's CUDA ops are there; train.py leaves a checkpoint's name
    fake.write_text(f"""#!/bin/bash
[ "$1" = -c ] && exit 0
printf '%s\\t%s\\n' "$PYTHONPATH" "$*" >> {calls}
[ "$1" = tools/misc/demo_overrides.py ] && echo randomness.deterministic=False
if [ "$1" = tools/train.py ]; then mkdir -p "$4" && echo "$4/iter_1.pth" > "$4/last_checkpoint"; fi
exit 0
""")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(PYTHON=str(fake), WHEELS=str(tmp_path / 'none'), WORK=str(tmp_path / 'work'))
    for script in ('gpu_checks.sh', 'gpu_end_to_end.sh'):
        proc = subprocess.run(['bash', osp.join(ROOT, 'dev', script), str(tmp_path / script)],
                              cwd=ROOT, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, (script, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = calls.read_text().splitlines()
    scripts = [line.split('\t')[1].split(' ')[0] for line in lines]
    assert scripts.count('tools/analysis_tools/benchmark.py') == 5, scripts
    train_and_test = ['tools/dataset_converters/make_demo_data.py',
                      'tools/misc/demo_overrides.py', 'tools/train.py', 'tools/test.py']
    assert scripts[9:] == ['dev/check_mmcv_cuda.py', *train_and_test * 2,
                           'dev/gpu_whole_image.py'], scripts
    assert len({line.split('\t')[0] for line in lines}) == 1, lines
    driver = subprocess.run([sys.executable, '-c', _PARSE_ONLY, str(calls)], cwd=ROOT,
                            capture_output=True, text=True,
                            env={**env, 'PYTHONPATH': lines[0].split('\t')[0]})
    assert driver.returncode == 0, driver.stderr[-3000:]
    results = driver.stdout.splitlines()
    assert len(results) == len(lines), results
    assert not [r for r in results if not r.startswith('ok ')], results


def test_end_to_end_compiles_mmcv_cuda_ops_once_from_the_carried_source(tmp_path):
    """gpu_end_to_end.sh's first step on a GPU machine whose mmcv has no CUDA ops: mmcv's
    source from $WHEELS compiled with FORCE_CUDA=1 for the GPU's compute capability, without
    the package index, installed into $SITE, then checked; on the next call (ops there) no
    build.  The interpreter and nvcc stand in for a GPU machine's and record what they do."""
    import tarfile
    wheels, src = tmp_path / 'wheels', tmp_path / 'mmcv-2.1.0'
    wheels.mkdir()
    src.mkdir()
    (src / 'setup.py').write_text("cxx = ['-std=c++17']\n")
    with tarfile.open(wheels / 'mmcv-2.1.0.tar.gz', 'w:gz') as tar:
        tar.add(src, arcname='mmcv-2.1.0')
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'nvcc').write_text(f'#!/bin/sh\necho "#$ TOP={tmp_path}/bin/.." >&2\n')
    log = tmp_path / 'log.txt'
    (bin_dir / 'python').write_text(f"""#!/bin/bash
if [ "$1" = -c ]; then
    case "$2" in
        *get_compiling_cuda_version*) [ -e {tmp_path}/built ]; exit $? ;;
        *get_device_capability*) echo 9.0 ;;
        *__version__*) exit 1 ;;  # torch older than 2.13: the source's own C++ standard
    esac
    exit 0
fi
echo "FORCE_CUDA=$FORCE_CUDA TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST $*" >> {log}
if [ "$3" = wheel ]; then mkdir -p "${{@: -1}}" && touch "${{@: -1}}/mmcv-2.1.0-cp312.whl"; fi
if [ "$3" = install ]; then touch {tmp_path}/built; fi
exit 0
""")
    for tool in ('nvcc', 'python'):
        (bin_dir / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'TORCH_CUDA_ARCH_LIST', 'CUDA_HOME')}
    env.update(PATH=f'{bin_dir}:{env["PATH"]}', PYTHON=str(bin_dir / 'python'),
               WHEELS=str(wheels), SITE=str(tmp_path / 'site'), RETINANET_S='0',
               UPERNET_S='0', WHOLE_IMAGE_S='0')
    runs = []
    for _ in range(2):
        log.write_text('')
        proc = subprocess.run(['bash', osp.join(ROOT, 'dev', 'gpu_end_to_end.sh'),
                               str(tmp_path / 'out')], cwd=ROOT, capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        runs.append(log.read_text().splitlines())
    build, again = runs
    assert len(build) == 3 and len(again) == 1, runs
    assert build[0].startswith('FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 -m pip wheel '), build
    assert ' --no-index ' in build[0] and '/mmcv-2.1.0 -w ' in build[0], build
    assert '-m pip install' in build[1] and f'--target {tmp_path}/site' in build[1], build
    assert build[2].endswith(f'dev/check_mmcv_cuda.py --json {tmp_path}/out/mmcv_cuda.json')
    assert again[0] == build[2], again


def test_mmcv_ext_stub_lets_ops_load_and_names_a_missing_op():
    """dev/mmcv_ext_stub.py: mmcv's loader finds every op it asks for (its
    ``hasattr`` check passes), and calling one names it and the missing build."""
    stub = _tool('mmcv_ext_stub')
    assert hasattr(stub, 'roi_align_forward') and not hasattr(stub, '__wrapped__')
    with pytest.raises(RuntimeError, match='roi_align_forward is not compiled'):
        stub.roi_align_forward(torch.zeros(1))


def test_token_sums_benchmark_times_every_segment_and_checks_the_values(tmp_path, capsys):
    """bench_token_sums.py (run by gpu_checks.sh) on the CPU at a small size: a row per
    stage with a time for each segment length, the JSON written, exit status 0; and exit
    status 1 when a segmented sum is wrong."""
    tool = _tool('bench_token_sums')
    out = tmp_path / 'sums.json'
    argv = ['--device', 'cpu', '--size', '256', '--repeats', '2', '--segments', '0', '512',
            '--json', str(out)]
    assert tool.main(argv) == 0
    rows = json.loads(out.read_text())['rows']
    assert [r['tokens'] for r in rows] == [4096, 1024, 256, 64]
    assert all(set(r['ms']) == {'0', '512'} and min(r['ms'].values()) > 0 for r in rows)
    assert 'stage 4' in capsys.readouterr().out
    real = tool.la._token_sum

    def wrong(a, b, segment):
        return real(a, b, segment) * (1.01 if segment else 1.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tool.la, '_token_sum', wrong)
        assert tool.main(argv[:-2]) == 1


def test_triton_core_benchmark_times_both_ways_and_checks_the_values(tmp_path, capsys):
    """bench_triton_core.py (run by gpu_checks.sh) on the CPU in Triton's interpreter at a
    small size: a row per stage and dtype with both ways timed and within tolerance of
    float64, the JSON written, exit status 0; and 1 when the kernels are wrong."""
    from triton_helpers import interpreted_kernels
    tool = _tool('bench_triton_core')
    out = tmp_path / 'core.json'
    argv = ['--device', 'cpu', '--sizes', '64', '--dtypes', 'float32', 'float16',
            '--repeats', '1', '--json', str(out)]
    with interpreted_kernels() as kernels:
        assert tool.main(argv) == 0
        rows = json.loads(out.read_text())['rows']
        assert [(r['tokens'], r['dtype']) for r in rows[:2]] == [(256, 'float32'),
                                                                 (256, 'float16')]
        assert len(rows) == 8 and all(r['triton_ms'] > 0 and r['torch_ms'] > 0 for r in rows)
        assert all(r['triton_error'] < tool.TOLERANCE[getattr(torch, r['dtype'])]
                   for r in rows)
        assert 'stage 4' in capsys.readouterr().out
        real = kernels.triton_linear_attention
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kernels, 'triton_linear_attention', lambda *a, **kw: real(*a, **kw) * 1.1)
            assert tool.main(argv[:-2]) == 1
    assert os.environ.get('MMLINATTN_TRITON') is None


def test_ab_device_paths_switches_each_path_and_restores_it(tmp_path, capsys):
    """ab_device_paths.py on the CPU (where neither path runs, so both sides give the same
    outputs): a row per model and size with both sides timed, the JSON written; inside
    ``switched`` the constant holds its off value, and the shipped value is back after,
    also when the body raises."""
    tool = _tool('ab_device_paths')
    shipped = {c: getattr(m, n) for c, (m, n, _) in tool.CHANGES.items()}
    for change, (module, name, off) in tool.CHANGES.items():
        with tool.switched(change, on=False):
            assert getattr(module, name) == off != shipped[change]
        with tool.switched(change, on=True):
            assert getattr(module, name) == shipped[change]
        with pytest.raises(RuntimeError), tool.switched(change, on=False):
            raise RuntimeError
        assert getattr(module, name) == shipped[change]
    out = tmp_path / 'ab.json'
    assert tool.main(['--change', 'segments', '--models', 'LDN:tiny', '--sizes', '64', '96',
                      '--device', 'cpu', '--dtype', 'bfloat16', '--rounds', '2',
                      '--json', str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r['model'], r['size']) for r in rows] == [('LDN:tiny', 64), ('LDN:tiny', 96)]
    for r in rows:
        assert len(r['on_all_ms']) == len(r['off_all_ms']) == 2 and r['on_ms'] > 0, r
        assert r['rel_diff'] == 0.0 and r['ratio'] == r['on_ms'] / r['off_ms'], r
    assert 'neither path runs' in capsys.readouterr().out
