import os

# Triton decides when it is first imported whether its kernels (and its own library's) are
# compiled or interpreted: the suite has no GPU, so Triton's interpreter runs them on the
# CPU (tests/triton_helpers.py), set before anything imports Triton.
os.environ.setdefault('TRITON_INTERPRET', '1')

import pytest  # noqa: E402
import torch  # noqa: E402
import durations  # noqa: E402
from tool_runs import worker_threads  # noqa: E402

from mmlinattn.kernels.policy import COMPILE_ENV  # noqa: E402
from mmlinattn.utils.external_configs import prepare_external_configs  # noqa: E402


def pytest_configure(config):
    """Under pytest-xdist (tools/run_tests.sh), the worker processes share the cores: each
    takes its share of torch threads instead of all of them, and so do the tools it runs in
    subprocesses."""
    if int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')) > 1:
        threads = worker_threads()
        torch.set_num_threads(threads)
        os.environ['OMP_NUM_THREADS'] = str(threads)
    # Eager ops unless a test asks for the compiled ones (the ``compile_on`` fixture):
    # the first compile in each process and subprocess took 15-50 s (NaLa's feature maps,
    # SOFT's kernel, the 5x5 depthwise weight gradient), paid again by every tool run.
    # The compiled forms are checked against the eager ones where they are tested, and
    # one tool run keeps the default; ``MMLINATTN_COMPILE=1`` runs the suite compiled.
    os.environ.setdefault(COMPILE_ENV, '0')
    # as the tools do: Config.fromfile reads mmdet's and mmseg's model index once per process
    prepare_external_configs()
    durations.pytest_configure(config)


@pytest.fixture
def compile_on(monkeypatch):
    """The compiled fast paths on (the default outside the test suite)."""
    monkeypatch.setenv(COMPILE_ENV, '1')


# The longest tests, longest first, run before all others: under pytest-xdist they then
# overlap with the many short ones instead of ending the run one after another.  On one of
# 2 cores (a worker's share; AVX-512 EPYC, 2026-12-01) they take 170 s (the first) down to
# 20-60 s (the later ones); test_training_path_equals_inference_path pays for the module's
# 40-step training fixture.
LONGEST = (
    'test_mask_rcnn_learns_nut_masks',
    'test_retinanet_learns_blood_cells',
    'test_training_path_equals_inference_path',
    'test_semantic_fpn_learns_nuts',
    'test_deployed_metric_equals_eager',
    'test_compile_fullgraph_dynamic_train',
    'test_resume_matches_uninterrupted_run',
    'test_tools_run_every_head_layout',
    'test_runtime_benchmark_times_ours_and_an_mmdet_peer',
    'test_dist_train_gloo_two_processes',
    'test_compile_fullgraph_dynamic',
)


def _listed_slow():
    path = os.path.join(os.path.dirname(__file__), 'slow_tests.txt')
    with open(path) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith('#')}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the markers added here
def pytest_collection_modifyitems(config, items):
    """Tests listed in ``slow_tests.txt`` get the ``slow`` marker (``--quick`` leaves them
    out); then the tests of ``LONGEST`` in its order, then the other ``slow`` ones, then the
    rest (a stable sort: each group keeps its collection order)."""
    listed = _listed_slow()
    for item in items:
        if item.nodeid.split('[')[0] in listed:
            item.add_marker(pytest.mark.slow)
    def rank(item):
        name = item.originalname or item.name
        known = next((i for i, prefix in enumerate(LONGEST) if name.startswith(prefix)), None)
        if known is not None:
            return known
        return len(LONGEST) + (0 if item.get_closest_marker('slow') else 1)
    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    """Seed 0 for every test, and this process's torch threads back to its share after it:
    one test that left 2 threads set (the runtime benchmark in this process) made every
    later test of its worker fight the other worker for the cores, with OpenMP's spinning
    barriers: 10-20 times slower (a 1.7 s test took 29 s in the suite)."""
    threads, omp = torch.get_num_threads(), os.environ.get('OMP_NUM_THREADS')
    torch.manual_seed(0)
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if os.environ.get('OMP_NUM_THREADS') != omp:
        if omp is None:
            os.environ.pop('OMP_NUM_THREADS', None)
        else:
            os.environ['OMP_NUM_THREADS'] = omp


@pytest.fixture(autouse=True)
def _restore_default_scope():
    """A test that runs a Runner or calls ``init_default_scope`` makes its scope current for
    the whole process; later ``mmlinattn`` registry builds would then look in mmdet's."""
    from mmengine.registry import DefaultScope
    saved = DefaultScope._instance_dict.copy()
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(saved)


@pytest.fixture
def gemm_spy(monkeypatch):
    """One entry per product a residual branch accumulated into its stream by the GEMM
    (:mod:`mmlinattn.kernels.residual`), i.e. without calling its linear."""
    import mmlinattn.kernels.residual as fused
    calls, plain = [], fused._accumulate_product

    def spy(out, y, w):
        calls.append(tuple(w.shape))
        return plain(out, y, w)
    monkeypatch.setattr(fused, '_accumulate_product', spy)
    return calls


@pytest.fixture
def stripe_warnings(monkeypatch):
    """The messages the whole-image segmentor and detector log about a head that cannot run
    in row stripes (each once per process: the record of what was logged starts empty)."""
    import mmengine.logging

    from mmlinattn.models import striped
    logged = []
    monkeypatch.setattr(striped, '_LOGGED', set())

    def print_log(msg, **kwargs):
        if 'cannot run in row stripes' in msg:
            logged.append(msg)
    monkeypatch.setattr(mmengine.logging, 'print_log', print_log)
    return logged
