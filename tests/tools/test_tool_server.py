"""The warm tool server (tests/tool_server.py) runs a script as a fresh interpreter does:
the same output, exit status, traceback, ``__main__``, ``sys.argv``, ``sys.path[0]``,
working directory, environment, torch threads and atexit handlers, and none of our
package imported before the script imports it."""
import os
import sys

import pytest
from tool_runs import FRESH_ENV, tool

PROBE = '''
import atexit, os, sys, threading, time
import torch
atexit.register(print, 'atexit ran')
threading.Thread(target=lambda: (time.sleep(0.2), print('thread joined'))).start()
print(__name__, __file__, sys.argv, sys.path[0], os.getcwd())
print(os.environ.get('PROBE_VAR'), torch.get_num_threads(), 'mmlinattn' in sys.modules)
print('x' * 300000)          # more than a pipe holds
print('to stderr', file=sys.stderr)
if sys.argv[1] == 'raise':
    raise ValueError('boom')
sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])
'''


def both(args, tmp_path, monkeypatch):
    env = dict(os.environ, PROBE_VAR='probe', OMP_NUM_THREADS='1')
    warm = tool(args, env=env, cwd=tmp_path)
    monkeypatch.setenv(FRESH_ENV, '1')
    fresh = tool(args, env=env, cwd=tmp_path)
    monkeypatch.delenv(FRESH_ENV)
    return warm, fresh


@pytest.mark.parametrize('arg', ['0', 'raise', 'a message'])
def test_script_runs_as_in_a_fresh_interpreter(arg, tmp_path, monkeypatch):
    script = tmp_path / 'probe.py'
    script.write_text(PROBE)
    warm, fresh = both([sys.executable, str(script), arg], tmp_path, monkeypatch)
    assert (warm.returncode, warm.stdout, warm.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)
    assert warm.returncode == (0 if arg == '0' else 1)
    lines = warm.stdout.splitlines()
    assert lines[0] == f"__main__ {script} {[str(script), arg]} {tmp_path} {tmp_path}"
    assert lines[1] == 'probe 1 False'
    assert lines[-2:] == ['thread joined', 'atexit ran']   # threads joined, then atexit
    if arg == 'raise':
        assert warm.stderr.endswith("raise ValueError('boom')\nValueError: boom\n")
        assert 'tool_server' not in warm.stderr and 'runpy' not in warm.stderr


def test_command_string_runs_as_python_c(tmp_path, monkeypatch):
    code = 'import sys; print(__name__, sys.argv, repr(sys.path[0])); sys.exit(4)'
    warm, fresh = both([sys.executable, '-c', code, 'arg'], tmp_path, monkeypatch)
    assert (warm.returncode, warm.stdout, warm.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr) == (4, "__main__ ['-c', 'arg'] ''\n", '')


def test_a_compile_in_the_test_process_keeps_its_tool_runs_warm(monkeypatch):
    """torch sets TORCHINDUCTOR_CACHE_DIR in ``os.environ`` on its first compile in a
    process (NNCF's quantization does too); it is read on each use, so the tool runs of a
    test process after that still fork from its warm server, and see the variable."""
    import tool_runs
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    monkeypatch.delenv('TORCHINDUCTOR_CACHE_DIR', raising=False)
    before = dict(os.environ)
    cache_dir()  # what the first compile calls
    assert os.environ['TORCHINDUCTOR_CACHE_DIR'] != before.get('TORCHINDUCTOR_CACHE_DIR')
    assert tool_runs._startup_env(os.environ) == tool_runs._startup_env(before)
    code = 'import os; print(os.environ["TORCHINDUCTOR_CACHE_DIR"])'
    warm = tool_runs._warm([sys.executable, '-c', code], dict(os.environ), os.getcwd())
    assert warm is not None and warm.stdout.strip() == os.environ['TORCHINDUCTOR_CACHE_DIR']
