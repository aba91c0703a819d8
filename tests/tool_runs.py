"""Running the command-line tools as a user types them, and reading what they wrote."""
import os
import os.path as osp
import subprocess
import sys

from repo_paths import ROOT


def worker_threads(most=None):
    """This test process's share of the cores: all of them, or under pytest-xdist
    (tools/run_tests.sh) cores / workers, so that the workers do not fight over them."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    share = max(1, len(os.sched_getaffinity(0)) // max(1, workers))
    return share if most is None else min(most, share)


#: Variables read once, when an interpreter or a library in it starts: a request that sets
#: them otherwise than the warm server's environment gets a fresh interpreter instead.
STARTUP_VARS = ('PYTHON', 'LD_', 'MALLOC_', 'GLIBC_', 'OMP_', 'KMP_', 'MKL_', 'OPENBLAS_',
                'TORCH', 'CUDA')
FRESH_ENV = 'MMLINATTN_TEST_FRESH_TOOLS'
_server = {}


#: Variables with a start-up prefix that are read on each use instead.  torch sets
#: TORCHINDUCTOR_CACHE_DIR itself in ``os.environ`` when it first needs its cache (as in
#: NNCF's quantization): counted, it would make every later tool run of that test process
#: a fresh interpreter.
READ_ON_USE = ('OMP_NUM_THREADS', 'PYTHONUNBUFFERED', 'TORCHINDUCTOR_CACHE_DIR')


def _startup_env(env):
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARS)
            and k not in READ_ON_USE}


def _warm_server():
    """This test process's tool server (tests/tool_server.py), started on first use."""
    import atexit
    import tempfile
    if 'proc' not in _server:
        # the server's imports made here first: one that sets a start-up variable on import
        # (scikit-learn, imported by mmdet.models where installed, sets KMP_*) then sets it
        # before the reference below is taken, as in the server, not in a later test
        import importlib
        from tool_server import PRELOAD
        for name in PRELOAD:
            importlib.import_module(name)
        path = osp.join(tempfile.mkdtemp(prefix='tools-'), 'socket')
        env = dict(os.environ)
        proc = subprocess.Popen([sys.executable, osp.join(ROOT, 'tests', 'tool_server.py'),
                                 path], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != 'ready':
            raise RuntimeError(f'tests/tool_server.py did not start ({proc.wait()})')
        atexit.register(proc.kill)
        _server.update(proc=proc, path=path, env=_startup_env(env))
    return _server


def _warm(args, env, cwd):
    """``args`` forked from the warm server: a CompletedProcess, or None where a fresh
    interpreter is needed (another interpreter, start-up variables that differ)."""
    import json
    import socket
    import struct
    import threading
    if os.environ.get(FRESH_ENV) or args[0] != sys.executable or len(args) < 2 \
            or args[1].startswith('-') and args[1] != '-c':
        return None
    server = _warm_server()
    if _startup_env(env) != server['env']:
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    chunks = {out_r: [], err_r: []}

    def drain(fd):
        with open(fd, 'rb') as f:
            chunks[fd].append(f.read())
    readers = [threading.Thread(target=drain, args=(fd, )) for fd in (out_r, err_r)]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(server['path'])
        payload = json.dumps(dict(argv=list(map(str, args)), env=env, cwd=str(cwd))).encode()
        socket.send_fds(sock, [struct.pack('!Q', len(payload))], [null, out_w, err_w])
        for fd in (null, out_w, err_w):
            os.close(fd)
        for t in readers:
            t.start()
        sock.sendall(payload)
        reply = sock.makefile().readline()
    for t in readers:
        t.join()
    if not reply:
        raise RuntimeError('tests/tool_server.py died during a run')
    text = [b''.join(chunks[fd]).decode(errors='replace') for fd in (out_r, err_r)]
    return subprocess.CompletedProcess(args, json.loads(reply)['returncode'], *text)


def tool(args, env=None, cwd=ROOT):
    """``args`` (``[sys.executable, script or -c, ...]``) in a new process at ``cwd``, with
    its output captured as text: a CompletedProcess, as ``subprocess.run`` gives.

    The process is forked from a server that has already imported torch, mmengine, mmcv,
    mmdet, mmseg and timm (tests/tool_server.py), which saves each run that start-up; the
    tool and our package start in it as in a fresh interpreter.  ``MMLINATTN_TEST_FRESH_TOOLS=1``
    starts every tool in a fresh interpreter instead."""
    env = dict(os.environ if env is None else env)
    return _warm(args, env, cwd) or subprocess.run(args, cwd=cwd, env=env,
                                                   capture_output=True, text=True)


def run(args, env=None, **kw):
    """``args`` as :func:`tool` runs them, with this process's share of the cores (at most
    2 threads) and the variables of ``env`` set; AssertionError with its output tail when
    it fails."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', OMP_NUM_THREADS=str(worker_threads(2)),
               **(env or {}))
    proc = tool(args, env=env, **kw)
    if proc.returncode:
        raise AssertionError(f'{" ".join(map(str, args[:4]))} ... failed ({proc.returncode}):\n'
                             f'{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}')
    return proc


def last_metrics(work_dir):
    """The metrics of the last run in an mmengine work dir (its ``<timestamp>.json``)."""
    from benchlib.work_dirs import last_metrics as read
    return read(work_dir)


def convert(*argv):
    """tools/model_converters/convert_checkpoint.py as a user runs it."""
    return tool([sys.executable, 'tools/model_converters/convert_checkpoint.py', *argv])


def tool_module(path: str):
    """The tool script at ``path`` (relative to the repository) as a module, to call its
    functions or ``main`` in this process."""
    import importlib.util
    name = osp.splitext(osp.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def convert_in_process(*argv):
    """The same tool's ``main`` called in this process (no interpreter start-up and
    imports): for tests about what it writes, not about its command line."""
    import contextlib
    import io
    import types
    tool = tool_module('tools/model_converters/convert_checkpoint.py')
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = tool.main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return types.SimpleNamespace(returncode=code or 0, stdout=out.getvalue(),
                                 stderr=err.getvalue())
