"""A warm interpreter for the tool runs of the tests: ``python tests/tool_server.py SOCKET``.

Starting ``python tools/train.py ...`` spends 3-5 s (Xeon with AMX) importing torch, mmengine,
mmcv, mmdet, mmseg and timm before the tool does anything; the suite starts about a hundred
tool processes.  This server imports those third-party packages once, then forks one child
per request.  The child is a new process with the request's arguments, environment, working
directory and stdin/stdout/stderr; it runs the tool script (or ``-c`` code) as ``__main__``
and ends as that script ends: its exit code, traceback and atexit handlers are the
script's.  Nothing of this repository is imported before the fork, so a tool that misses
one of our imports still fails here as it would for a user.

Protocol (one request per connection, from :func:`tool_runs.tool`): an 8-byte length sent
with three file descriptors (the child's fds 0, 1 and 2), then that many bytes of JSON
``{"argv", "env", "cwd"}``; the reply is one JSON line ``{"returncode": N}``.
"""
import json
import os
import socket
import struct
import sys

#: Imported before any fork: the packages every tool starts with, none of ours.
THIS_FILE = os.path.abspath(__file__)
PRELOAD = ('torch', 'numpy', 'cv2', 'mmengine.runner', 'mmcv.ops', 'mmdet.models',
           'mmseg.models', 'timm')


def _recv_request(conn):
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    (size, ) = struct.unpack('!Q', header)
    data = b''
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError('request cut short')
        data += chunk
    return json.loads(data), fds


def serve(sock, parent):
    """Accept requests until the parent (the test process) is gone; in each forked child,
    return the request for :func:`run_child`."""
    sock.settimeout(2.0)
    while True:
        try:
            conn, _ = sock.accept()
        except socket.timeout:
            if os.getppid() != parent:
                sys.exit(0)
            continue
        conn.settimeout(None)
        request, fds = _recv_request(conn)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            conn.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        reply = dict(returncode=os.waitstatus_to_exitcode(status))
        conn.sendall(json.dumps(reply).encode() + b'\n')
        conn.close()


def run_child(request, fds):
    """Become the requested process: stdio, directory, environment, threads, argv."""
    import functools
    import runpy
    import types

    import torch
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    unbuffered = bool(request['env'].get('PYTHONUNBUFFERED'))
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=unbuffered or stream is sys.stderr)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    # OpenMP read OMP_NUM_THREADS when torch loaded (in the server): apply the request's
    threads = request['env'].get('OMP_NUM_THREADS')
    torch.set_num_threads(int(threads) if threads else os.cpu_count())
    argv = request['argv'][1:]
    if argv[0] == '-c':
        sys.argv = ['-c', *argv[2:]]
        sys.path[0] = ''
        main = types.ModuleType('__main__')
        sys.modules['__main__'] = main
        code = compile(argv[1], '<string>', 'exec')
        start = functools.partial(exec, code, main.__dict__)
    else:
        script = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(script)
        start = functools.partial(runpy.run_path, script, run_name='__main__')
    os._exit(_exit_status(start))


def _exit_status(start):
    """Run ``start`` and end as the interpreter ends a script: the traceback of an uncaught
    exception (this file's frames left out) and status 1, ``SystemExit``'s status, then the
    non-daemon threads joined and the atexit handlers run.  Module teardown is skipped (the
    caller leaves through ``os._exit``): it took 1.5 s per run with these packages loaded."""
    import atexit
    import threading
    try:
        start()
        status = 0
    except SystemExit as e:
        status = _system_exit_status(e.code)
    except BaseException:
        kind, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename in (THIS_FILE, '<frozen runpy>'):
            tb = tb.tb_next
        sys.excepthook(kind, value.with_traceback(tb), tb)
        status = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def _system_exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main():
    path, parent = sys.argv[1], os.getppid()
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(4)
    print('ready', flush=True)
    request, fds = serve(sock, parent)
    run_child(request, fds)


if __name__ == '__main__':
    main()
