"""Run a measurement in a child process of its own, under a time limit.

A case that runs out of memory, hangs or crashes then becomes a result (``status`` ``oom``,
``timeout`` or ``error``) instead of ending the run, and every case starts from a fresh heap,
thread pool and allocator state.
"""
import multiprocessing as mp
import signal
import time
from contextlib import contextmanager
from typing import Any, Dict, Optional, Sequence

__all__ = ['CPU_PRELOAD', 'mp_context', 'run_isolated', 'time_limit']

#: what a CPU forkserver imports once for all its children: torch and the models (imported
#: per child instead, each case would pay ~1.5 s for them).  Not this library: the forkserver
#: starts without the tool's folder on sys.path; each child gets it and imports the light
#: case code itself.
CPU_PRELOAD = ('torch', 'mmlinattn.models')

_CONTEXTS: Dict[str, Any] = {}


def mp_context(preload: Sequence[str] = CPU_PRELOAD, device: str = 'cpu'):
    """The multiprocessing context for cases on ``device``.

    CPU: a forkserver that has imported ``preload`` (cheap, fork-safe children) where
    available, else spawn; the first call decides the preload.  CUDA: spawn.  Importing
    mmengine asks the CUDA driver for its devices (mmengine picks its default device at
    import), and CUDA cannot start in a process forked after that, so a forkserver that has
    imported our models cannot serve CUDA cases ("Cannot re-initialize CUDA in forked
    subprocess").
    """
    method = 'forkserver' if 'forkserver' in mp.get_all_start_methods() else 'spawn'
    if str(device).startswith('cuda'):
        method = 'spawn'
    if method not in _CONTEXTS:
        ctx = mp.get_context(method)
        if method == 'forkserver':
            ctx.set_forkserver_preload(list(preload))
        _CONTEXTS[method] = ctx
    return _CONTEXTS[method]


def run_isolated(target, args: tuple, timeout: float,
                 preload: Sequence[str] = CPU_PRELOAD, device: str = 'cpu') -> Dict[str, Any]:
    """Run ``target(*args, conn)`` in a child process; the dict it sends, or a status.

    No answer within ``timeout`` s -> the child is killed, ``status='timeout'``; a child
    that dies without answering -> ``'oom'`` when it was killed by SIGKILL (the kernel's
    OOM killer) else ``'error'``.  ``target`` must be importable (a module-level function);
    ``device`` picks the start method (:func:`mp_context`).
    """
    ctx = mp_context(preload, device)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, send), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    res = None
    try:
        if recv.poll(timeout):
            res = recv.recv()
    except (EOFError, OSError):
        res = None
    elapsed = time.perf_counter() - t0
    if res is None:
        if proc.is_alive():
            proc.kill()
            proc.join()
            res = dict(status='timeout', note=f'killed after {timeout:g}s')
        else:
            proc.join()
            code = proc.exitcode
            status = 'oom' if code == -9 else 'error'
            res = dict(status=status, note=f'child exited with code {code} without a result')
    else:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    recv.close()
    res['wall_s'] = elapsed
    return res


@contextmanager
def time_limit(seconds: Optional[float]):
    """Raise ``TimeoutError`` in the enclosed code after ``seconds`` (SIGALRM; the main
    thread only; no limit where there is no SIGALRM or ``seconds`` is falsy)."""
    if not seconds or not hasattr(signal, 'SIGALRM'):
        yield
        return

    def _raise(signum, frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
