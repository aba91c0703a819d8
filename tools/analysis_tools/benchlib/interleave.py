"""Interleaved timing: every model of one size and mode kept warm in a process of its own,
the models stepping one at a time, once per round, in a shuffled order.  A machine whose
speed drifts then slows them alike, which runs one after the other do not guarantee."""
import random
import time
from typing import Any, Dict, List, Optional, Sequence, Union

from .cases import Case, case_input, make_step, prepared_model, sync
from .isolation import CPU_PRELOAD, mp_context
from .memory import apply_cpu_malloc, is_oom, mem_available_mb
from .specs import ModelSpec
from .stats import time_stats

__all__ = ['step_worker', 'run_interleaved', 'run_alternated', 'interleave_group']

#: how paired rounds run: both workers warm together, or one fresh worker per step
PAIR_METHODS = ('warm', 'alternate')


def step_worker(case: Case, conn) -> None:
    """A model kept warm in its own process, stepping on request (interleaved timing).

    Sends ``{'status': 'ready'}`` once the model is built and has taken its untimed steps,
    then answers every ``'step'`` with that step's wall and CPU seconds until ``'stop'``.
    Its own process gives each model the heap, allocator state and thread pool of its
    isolated run, none shared with the other models.
    """
    try:
        import torch
        if case.threads:
            torch.set_num_threads(case.threads)
        torch.manual_seed(case.seed)
        model = prepared_model(ModelSpec(**case.spec), case)
        if case.compile:
            model = torch.compile(model)
        step = make_step(model, case_input(case), case)
        if not case.device.startswith('cuda') and case.cpu_malloc == 'reuse':
            apply_cpu_malloc('reuse')
        for _ in range(2):          # set-up / compilation, then the heap's growth
            step()
            sync(case.device)
        conn.send(dict(status='ready'))
        while conn.recv() == 'step':
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            sync(case.device)
            conn.send((time.perf_counter() - t0, time.process_time() - c0))
    except BaseException as exc:  # noqa: BLE001
        try:
            conn.send(dict(status='oom' if is_oom(exc) else 'error', note=repr(exc)[:500]))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


def run_interleaved(cases: Sequence[Case], rounds: int, seed: int, step_timeout: Sequence[float],
                    mem_need_mb: Optional[Sequence[float]] = None,
                    preload: Sequence[str] = CPU_PRELOAD) -> Dict[str, Any]:
    """Time ``rounds`` steps of every case's model, interleaved: one warm worker process per
    model (:func:`step_worker`), and in each round every model steps once, one at a time,
    in a fresh shuffled order.  The models' steps are thus spread over the same minutes, so a
    machine whose speed drifts slows them alike, which runs one after the other do not
    guarantee.  ``step_timeout[i]`` bounds each of model i's steps (its build and warm-up
    get three times that plus a minute).  A worker is only started while the machine has
    ``mem_need_mb[i]`` available (CPU), since all of them stay alive until the end.  Returns
    ``times`` / ``cpu_times`` (one list of seconds per case) and the ``orders``, or a failed
    status with a note."""
    ctx = mp_context(preload, cases[0].device if cases else 'cpu')
    workers = []
    try:
        for i, (case, limit) in enumerate(zip(cases, step_timeout)):
            avail = mem_available_mb()
            if mem_need_mb and avail is not None and avail < mem_need_mb[i]:
                return dict(status='skipped', note=f"{case.spec['label']}: {avail:.0f} MiB "
                            f'available, {mem_need_mb[i]:.0f} MiB wanted for its worker')
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=step_worker, args=(case, child), daemon=True)
            proc.start()
            child.close()
            workers.append((proc, parent))
            reply = parent.recv() if parent.poll(3 * limit + 60) else None
            if not isinstance(reply, dict) or reply.get('status') != 'ready':
                reply = reply or dict(status='timeout', note='no answer while warming up')
                return dict(reply, note=f"{case.spec['label']}: {reply.get('note', '')}")

        def step(i):
            conn = workers[i][1]
            conn.send('step')
            reply = conn.recv() if conn.poll(step_timeout[i]) else None
            if not isinstance(reply, tuple):
                reply = reply or dict(status='timeout', note='step timed out')
                return dict(reply, note=f"{cases[i].spec['label']}: {reply.get('note')}")
            return reply
        return _shuffled_rounds(len(cases), rounds, seed, step)
    except (EOFError, OSError) as exc:   # a worker died (e.g. killed by the OOM killer)
        return dict(status='error', note=f'a worker process died: {exc!r}')
    finally:
        for proc, conn in workers:
            try:
                conn.send('stop')
            except (OSError, ValueError):
                pass
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()


def run_alternated(cases: Sequence[Case], rounds: int, seed: int,
                   step_timeout: Sequence[float], mem_need_mb: Optional[Sequence[float]] = None,
                   preload: Sequence[str] = CPU_PRELOAD) -> Dict[str, Any]:
    """:func:`run_interleaved` for models whose warm workers do not fit in memory together:
    one worker alive at a time.  In each round (a fresh shuffled order) every model gets a
    worker of its own that is built, takes its two untimed steps and one timed step, and
    exits before the next one starts.  The timed steps of all models are still spread over
    the same minutes; each costs a build and two more steps.  Same return value."""
    def step(i):
        res = run_interleaved([cases[i]], 1, seed, [step_timeout[i]],
                              None if mem_need_mb is None else [mem_need_mb[i]], preload)
        return res if res['status'] != 'ok' else (res['times'][0][0], res['cpu_times'][0][0])
    return _shuffled_rounds(len(cases), rounds, seed, step)


def _shuffled_rounds(count: int, rounds: int, seed: int, step) -> Dict[str, Any]:
    """``rounds`` rounds of ``step(i)`` for every model ``i < count``, each round in a fresh
    shuffled order; ``step`` gives ``(wall_s, cpu_s)`` or a failed status dict, which ends
    the rounds and is returned."""
    rng = random.Random(seed)
    times: List[List[float]] = [[] for _ in range(count)]
    cpu_times: List[List[float]] = [[] for _ in range(count)]
    orders = []
    for _ in range(rounds):
        order = list(range(count))
        rng.shuffle(order)
        orders.append(order)
        for i in order:
            got = step(i)
            if isinstance(got, dict):
                return got
            times[i].append(got[0])
            cpu_times[i].append(got[1])
    return dict(status='ok', times=times, cpu_times=cpu_times, orders=orders)


def _reference(group: list) -> Optional[int]:
    """Index of the reference of paired rounds: the first peer (Swin-T in the defaults)."""
    return next((i for i, g in enumerate(group) if g[1].peer), None)


def interleave_group(group: list, rounds: int, budget: float, preload: Sequence[str],
                     log, pairs: Union[None, bool, str] = None) -> Optional[dict]:
    """Interleaved timing of the cases of one (size, mode) that ran: replaces the latency
    fields of their results in place (the isolated ones kept as ``isolated_latency_ms_*``).

    All models step in the same rounds when their workers fit in memory together.  Otherwise
    (or with ``pairs`` True / ``'warm'`` / ``'alternate'``) each model is paired with the
    reference peer (the first peer of the group): the model's ratio to the peer then comes
    from steps taken in the same minutes (``paired_ref_latency_ms_median``), and the peer's
    own latency from all its paired steps.  A pair runs with both workers warm
    (:func:`run_interleaved`) where they fit in memory together, else, or with
    ``pairs='alternate'``, one worker at a time (:func:`run_alternated`).  Returns what was
    done, for the JSON's ``meta``, or None when fewer than two models fit the time budget."""
    if pairs not in (None, True, False) + PAIR_METHODS:
        raise ValueError(f'pairs must be None, a bool or one of {PAIR_METHODS}, got {pairs!r}')
    fit = [g for g in group if g[3]['status'] == 'ok' and g[3].get('latency_ms_median')
           and g[3]['latency_ms_median'] / 1e3 * rounds <= budget]
    if len(fit) < 2:
        return None
    # a worker keeps its heap at the step's peak; allow twice the isolated peak (and the
    # model) for fragmentation
    need = [2 * (g[3].get('peak_total_mb') or 0) for g in fit]
    limit = [3 * g[3]['latency_ms_median'] / 1e3 + 30 for g in fit]
    ref = _reference(fit)
    avail = mem_available_mb()
    if pairs is None:
        pairs = avail is not None and sum(need) > avail and ref is not None
    c = fit[0][2]
    size = f'{c.height}x{c.width}'
    if pairs and ref is None:
        log(f'interleaved timing at {size} {c.mode}: no peer to pair with (isolated times '
            'kept)')
        return None
    t0 = time.perf_counter()
    labels = [g[1].label for g in fit]
    info = dict(size=size, mode=c.mode, models=labels, method='pairs' if pairs else 'all')
    alternated = set()
    if not pairs:
        runs = [(list(range(len(fit))), run_interleaved(
            [g[2] for g in fit], rounds, c.height * 1000 + c.width, limit, need, preload))]
    else:
        info['reference'] = labels[ref]
        # a warm worker's heap holds more than the isolated peak (docs/benchmarks.md); two
        # workers get less slack than a crowd
        need = [0.75 * n for n in need]
        runs = []
        for i in range(len(fit)):
            if i == ref:
                continue
            idx = [ref, i]
            alternate = pairs == 'alternate' or (avail is not None
                                                 and need[ref] + need[i] > avail)
            run = run_alternated if alternate else run_interleaved
            runs.append((idx, run([fit[j][2] for j in idx], rounds,
                                  c.height * 1000 + c.width + i, [limit[j] for j in idx],
                                  [need[j] for j in idx], preload)))
            if alternate:
                alternated.update(idx)
        if alternated:
            info['alternated'] = [labels[i] for i in sorted(alternated) if i != ref]
    info.update(wall_s=time.perf_counter() - t0,
                orders=[[labels[idx[j]] for j in o] for idx, res in runs
                        for o in res.get('orders', [])])
    bad = [res for _, res in runs if res['status'] != 'ok']
    info['status'] = bad[0]['status'] if bad else 'ok'
    if bad:
        info['note'] = '; '.join(res.get('note', '') for res in bad)
        log(f"interleaved timing at {size} {c.mode}: {info['status']} "
            f"{info['note'][:120]} (isolated times kept where it failed)")
    times: dict = {}
    for idx, res in runs:
        if res['status'] != 'ok':
            continue
        for j, i in enumerate(idx):
            ts, cts = times.setdefault(i, ([], []))
            ts.extend(res['times'][j])
            cts.extend(res['cpu_times'][j])
        if pairs:
            fit[idx[1]][3]['paired_ref_latency_ms_median'] = \
                time_stats(res['times'][0], res['cpu_times'][0])['latency_ms_median']
            fit[idx[1]][3]['paired_with'] = labels[ref]
    for i, (ts, cts) in times.items():
        r = fit[i][3]
        for k in ('median', 'min', 'max'):
            r[f'isolated_latency_ms_{k}'] = r[f'latency_ms_{k}']
        method = 'interleaved'
        if pairs:
            method = 'alternated_pairs' if i in alternated else 'interleaved_pairs'
        r.update(time_stats(ts, cts), repeats=len(ts), latency_method=method)
        log(f"{labels[i]:34s} {size} {c.mode:5s} {method} x{len(ts)}: lat "
            f"{r['latency_ms_median']:.0f} ms (isolated {r['isolated_latency_ms_median']:.0f})")
    return info
