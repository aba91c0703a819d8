"""torch.compile(fullgraph=True) with dynamic sizes of every family: no graph break
(fullgraph raises on one), one graph for three input sizes in inference (``dynamic=True``)
and two in training (dynamic height and width), and the compiled forward (and backward)
equal to eager.

The backend only counts the graphs dynamo hands it and runs them as traced; tracing is
what these properties depend on (inductor's code generation would add minutes per model
on 2 CPU cores; its speed is in docs/benchmarks.md).  The pyramids have one block per
stage: a stage's next block traces the same ops again, and tracing time grows with the
block count (NaLaFormer's training trace: 36 s with five blocks, 25 s with four)."""
import pytest
import torch
import torch.nn as nn
from archs import FAMILIES, build, one_block_per_stage

from mmlinattn.deployment import max_relative_difference
from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
from mmlinattn.models.necks import SimpleFeaturePyramid

# First size non-square: on a square first input dynamo assumes H == W and recompiles once
# at the first non-square one.  None a multiple of 32.
SIZES = ((72, 104), (104, 72), (88, 136))
# SOFT++'s linear option, a bounded landmark count: 12 leaves the first two sizes' landmark
# grids (3 x 4) as they are and pools the third's (3 x 5), so one graph holds both cases.
OPTIONS = {'SOFT': dict(max_landmarks=12)}


class PlainWithNeck(nn.Module):
    """InfViTPlain and the SimpleFeaturePyramid its detection configs put on it."""

    def __init__(self, **kwargs):
        super().__init__()
        self.backbone = build('InfViTPlain', out_indices=(-1, ), **kwargs)
        self.neck = SimpleFeaturePyramid(32, 16)

    def forward(self, x):
        return self.neck(self.backbone(x))


VARIANTS = {
    'NaLaFormer-official': lambda **kw: build('NaLaFormer', **OFFICIAL_PRESET,
                                              **one_block_per_stage('NaLaFormer'), **kw),
    'InfViT-pure': lambda **kw: build('InfViT', stage_mixers='pure',
                                      **one_block_per_stage('InfViT'), **kw),
    'InfViTPlain+SimpleFPN': lambda **kw: PlainWithNeck(**kw).eval(),
}


def make(name, **kw):
    if name in VARIANTS:
        return VARIANTS[name](**kw)
    return build(name, **OPTIONS.get(name, {}), **one_block_per_stage(name), **kw)


def compile_counting(model):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, dynamic=True, backend=backend), graphs


@pytest.mark.slow
@pytest.mark.parametrize('family', FAMILIES + tuple(VARIANTS))
def test_compile_fullgraph_dynamic_eval(family):
    model = make(family)
    compiled, graphs = compile_counting(model)
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w)
        with torch.no_grad():
            assert max_relative_difference(compiled(x), model(x)) <= 1e-5, (h, w)
    assert len(graphs) == 1, f'{len(graphs)} graphs for {len(SIZES)} sizes (recompiled)'


def skip_graph_logs(monkeypatch):
    """AOTAutograd writes out the joint, forward and backward graphs' text for its logs
    whether or not they are on (``aot_module_simplified`` has no switch): a fifth of the
    tracing time here.  Nothing of the tracing or partitioning changes."""
    from torch._functorch._aot_autograd import graph_compile
    monkeypatch.setattr(graph_compile, '_log_joint_graph', lambda *args: None)
    monkeypatch.setattr(graph_compile, '_log_fw_bw_graphs', lambda *args: (None, None))


# InfViTPlain as its detection configs use it, with the SimpleFeaturePyramid on top (the
# backbone alone traces a subset of that graph).
TRAIN_CASES = tuple(f for f in FAMILIES if f != 'InfViTPlain') + ('InfViTPlain+SimpleFPN', )


@pytest.mark.slow
@pytest.mark.parametrize('family', TRAIN_CASES)
def test_compile_fullgraph_dynamic_train_forward_backward(family, monkeypatch):
    """Train mode through AOTAutograd (the forward and the backward graph traced), no
    drop path: the loss and every parameter's gradient equal eager's, one graph for two
    image sizes.  The height and width are the dynamic sizes (``mark_dynamic``, what
    dynamo's automatic dynamic shapes mark after the first size change; a training batch
    has one size): ``dynamic=True`` would make every size symbolic, the batch too, and
    its symbolic arithmetic tripled the tracing time.  The eager reference keeps NaLa's
    feature maps eager (its own compiled training maps would add their graphs to the count
    below)."""
    from mmlinattn.kernels.policy import COMPILE_ENV
    monkeypatch.setenv(COMPILE_ENV, '0')
    skip_graph_logs(monkeypatch)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters
    counters.clear()
    model = make(family, drop_path_rate=0.0).train()
    compiled = torch.compile(model, fullgraph=True, backend='aot_eager')
    for h, w in SIZES[:2]:
        x = torch.randn(2, 3, h, w)
        torch._dynamo.mark_dynamic(x, 2)
        torch._dynamo.mark_dynamic(x, 3)
        grads, weights = [], None
        for fn in (model, compiled):  # eager first: it draws the loss weights
            model.zero_grad()
            outs = fn(x)
            # A random projection, not a sum of squares: an output that ends in a LayerNorm
            # has a constant mean square, whose gradient would be rounding noise.
            weights = weights or [torch.randn_like(o) for o in outs]
            loss = sum((o * r).mean() for o, r in zip(outs, weights))
            loss.backward()
            grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        assert len(grads[0]) == len(grads[1]) > 0
        worst = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
                    for a, b in zip(grads[1], grads[0]))
        assert worst <= 1e-4, (h, w, worst)
    assert counters['stats']['unique_graphs'] == 1, dict(counters['stats'])
