"""tools/misc/mmcv_source.sh, which tools/setup.sh and dev/gpu_end_to_end.sh use to compile
mmcv: its source unpacked with C++20 for torch 2.13 and newer (the source's own standard
otherwise; a failure where setup.py cannot be patched), the choice of CPU or CUDA ops, and
the build's settings for each."""
import os.path as osp
import subprocess
import tarfile

import pytest

from repo_paths import ROOT


def _sdist(tmp_path, setup_py: str) -> str:
    src = tmp_path / 'src' / 'mmcv-9.9.9'
    src.mkdir(parents=True)
    (src / 'setup.py').write_text(setup_py)
    sdist = tmp_path / 'mmcv-9.9.9.tar.gz'
    with tarfile.open(sdist, 'w:gz') as tar:
        tar.add(src, arcname='mmcv-9.9.9')
    return str(sdist)


def _torch(tmp_path, version: str = '2.14.1', gpus=()) -> str:
    """An interpreter whose torch is ``version`` and sees GPUs of the compute capabilities
    ``gpus``: it runs the code the script gives it with ``-c``, and records ``-m ...`` runs
    with the build's settings in ``calls.txt``."""
    import sys
    stub = (f"torch = types.SimpleNamespace(__version__='{version}', "
            f"cuda=types.SimpleNamespace(is_available=lambda: {bool(gpus)}, "
            f"device_count=lambda: {len(gpus)}, "
            f"get_device_capability=lambda i: {tuple(gpus)}[i])); "
            "sys.modules['torch'] = torch")
    fake = tmp_path / f'python-{version}-{len(gpus)}'
    fake.write_text(f'#!/bin/bash\n'
                    f'if [ "$1" = -m ]; then echo "FORCE_CUDA=$FORCE_CUDA '
                    f'TORCH_CUDA_ARCH_LIST=${{TORCH_CUDA_ARCH_LIST-unset}} '
                    f'CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}} '
                    f'CUDA_HOME=${{CUDA_HOME-unset}} $*" '
                    f'>> {tmp_path}/calls.txt; exit 0; fi\n'
                    f'[ "$1" = -c ] || exit 9\n'
                    f'exec {sys.executable} -c "import sys, types; {stub}; '
                    f'exec(sys.argv[1])" "$2"\n')
    fake.chmod(0o755)
    return str(fake)


def _unpack(py: str, sdist: str, dest) -> subprocess.CompletedProcess:
    dest.mkdir(exist_ok=True)
    return subprocess.run(
        ['bash', '-c', 'source tools/misc/mmcv_source.sh && unpack_mmcv_source "$@"', '-',
         py, sdist, str(dest)], cwd=ROOT, capture_output=True, text=True)


SETUP = "cxx = ['-std=c++14']\nnvcc = ['-std=c++17', '-O3']\n"


@pytest.mark.parametrize('version, expected', [
    ('2.14.1+cu130', "cxx = ['-std=c++20']\nnvcc = ['-std=c++20', '-O3']\n"),
    ('2.13.0', "cxx = ['-std=c++20']\nnvcc = ['-std=c++20', '-O3']\n"),
    ('2.11.0', SETUP),
    ('2.1.2', SETUP)])
def test_source_is_unpacked_with_the_standard_torch_needs(tmp_path, version, expected):
    proc = _unpack(_torch(tmp_path, version), _sdist(tmp_path, SETUP), tmp_path / 'build')
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / 'build' / 'mmcv-9.9.9' / 'setup.py').read_text() == expected


def test_a_setup_py_without_a_standard_to_patch_fails(tmp_path):
    proc = _unpack(_torch(tmp_path, '2.14.1'), _sdist(tmp_path, "cxx = ['-O3']\n"),
                   tmp_path / 'build')
    assert proc.returncode == 1 and 'could not patch' in proc.stderr, proc.stderr
    assert osp.exists(tmp_path / 'build' / 'mmcv-9.9.9' / 'setup.py')


def _bash(script: str, *args, path=None, **env) -> subprocess.CompletedProcess:
    import os
    full = {**{k: v for k, v in os.environ.items() if k not in (
        'MMLINATTN_MMCV_CUDA', 'TORCH_CUDA_ARCH_LIST')}, **env}
    if path is not None:
        full['PATH'] = str(path)
    return subprocess.run(['/bin/bash', '-c', 'source tools/misc/mmcv_source.sh && ' + script,
                           '-', *args], cwd=ROOT, capture_output=True, text=True, env=full)


def _bin(tmp_path, nvcc: bool):
    """A PATH folder, with an ``nvcc`` or without: a wrapper of a toolkit in
    ``tmp_path/cuda-13.0`` that says where it is, as nvcc's ``--dryrun`` does."""
    folder = tmp_path / ('bin-nvcc' if nvcc else 'bin')
    folder.mkdir(exist_ok=True)
    if nvcc:
        (tmp_path / 'cuda-13.0' / 'bin').mkdir(parents=True, exist_ok=True)
        (folder / 'nvcc').write_text(f'#!/bin/sh\necho "#$ _NVVM_BRANCH_=nvvm" >&2\n'
                                     f'echo "#$ TOP={tmp_path}/cuda-13.0/bin/.." >&2\n')
        (folder / 'nvcc').chmod(0o755)
    return folder


@pytest.mark.parametrize('want, nvcc, gpus, arch_list, printed', [
    (None, True, [(9, 0)], None, '9.0'),             # a GPU and nvcc: CUDA ops for it
    (None, True, [(8, 0), (9, 0), (8, 0)], None, '8.0;9.0'),
    (None, True, [], None, ''),                      # no GPU: the CPU ops
    (None, False, [(9, 0)], None, ''),               # no nvcc: the CPU ops
    ('0', True, [(9, 0)], None, ''),                 # asked for the CPU ops
    ('1', True, [], '8.6;9.0', '8.6;9.0'),           # a build machine without a GPU
    ('1', True, [(9, 0)], None, '9.0')])
def test_the_ops_compiled_follow_the_gpu_nvcc_and_the_request(tmp_path, want, nvcc, gpus,
                                                             arch_list, printed):
    env = {k: v for k, v in (('MMLINATTN_MMCV_CUDA', want),
                             ('TORCH_CUDA_ARCH_LIST', arch_list)) if v is not None}
    proc = _bash('mmcv_cuda_arch "$1"', _torch(tmp_path, gpus=gpus),
                 path=_bin(tmp_path, nvcc), **env)
    assert proc.returncode == 0 and proc.stdout.strip() == printed, proc


@pytest.mark.parametrize('nvcc, message', [(False, 'nvcc is not on PATH'),
                                           (True, 'set TORCH_CUDA_ARCH_LIST')])
def test_cuda_ops_asked_for_and_impossible_say_why(tmp_path, nvcc, message):
    proc = _bash('mmcv_cuda_arch "$1"', _torch(tmp_path), path=_bin(tmp_path, nvcc),
                 MMLINATTN_MMCV_CUDA='1')
    assert proc.returncode == 1 and message in proc.stderr and not proc.stdout, proc


def test_the_build_settings_of_cpu_and_cuda_ops(tmp_path):
    """CPU ops: FORCE_CUDA=0 and no GPU visible (mmcv's setup.py compiles CUDA ops wherever
    torch sees one); CUDA ops: FORCE_CUDA=1 for the compute capabilities asked for, with the
    toolkit that nvcc runs from."""
    py = _torch(tmp_path, gpus=[(9, 0)])
    path = f'{_bin(tmp_path, True)}:/usr/bin:/bin'  # nproc, sed, head
    for arch in ('', '9.0'):
        proc = _bash('build_mmcv_wheel "$@"', py, 'SRC', 'OUT', arch, '-q', path=path)
        assert proc.returncode == 0, proc
    proc = _bash('build_mmcv_wheel "$@"', py, 'SRC', 'OUT', '9.0', '-q', path=path,
                 CUDA_HOME='/opt/cuda')
    cpu, cuda, own_home = (tmp_path / 'calls.txt').read_text().splitlines()
    assert cpu.startswith('FORCE_CUDA=0 TORCH_CUDA_ARCH_LIST=unset CUDA_VISIBLE_DEVICES= '), cpu
    assert cuda.startswith('FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 CUDA_VISIBLE_DEVICES='), cuda
    # the toolkit nvcc runs from, not the folder above the wrapper on PATH; else CUDA_HOME
    assert f' CUDA_HOME={tmp_path}/cuda-13.0 -m pip' in cuda, cuda
    assert ' CUDA_HOME=/opt/cuda -m pip' in own_home, own_home
    for line in (cpu, cuda, own_home):
        assert line.endswith('-m pip wheel --no-build-isolation --no-deps -q SRC -w OUT'), line
