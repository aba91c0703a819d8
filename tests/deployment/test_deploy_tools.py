"""The deployment command lines and the model kinds they accept: wrong requests stop
with a message that names the fix."""
import sys

import pytest
import torch
from archs import build
from repo_paths import ROOT
from tool_runs import tool as tool_process, tool_module

from mmlinattn.engine.runner import build_config_model
from mmlinattn.deployment import DeployedModel, TensorGraph
from mmlinattn.utils.machine import cpu_name


def tool(*argv):
    return tool_process([sys.executable, *argv])


def test_verify_at_another_size_needs_dynamic(tmp_path):
    proc = tool('tools/deployment/pytorch2onnx.py', 'configs/retinanet_ldn_tiny_1x.py',
                '--out', str(tmp_path / 'm.onnx'), '--verify', '320', '480')
    assert proc.returncode == 2 and 'needs --dynamic' in proc.stderr
    assert not (tmp_path / 'm.onnx').exists()


# an OpenVINO IR (.xml) is OpenVINO's alone
@pytest.mark.parametrize('graph', ['README.md', 'model.xml'])
def test_backend_needs_an_onnx_file(graph, tmp_path):
    if graph.endswith('.xml'):
        (tmp_path / graph).write_text('')
        graph = str(tmp_path / graph)
    proc = tool('tools/test.py', 'configs/retinanet_ldn_tiny_1x.py', graph,
                '--backend', 'onnxruntime')
    assert proc.returncode != 0
    assert 'exported .onnx graph' in proc.stderr and 'pytorch2onnx.py' in proc.stderr


@pytest.mark.parametrize('backend', ['pytorch', 'onnxruntime'])
@pytest.mark.parametrize('option', [['--static-shapes'], ['--precision', 'bf16']])
def test_static_shapes_and_precision_are_openvino_options(backend, option):
    proc = tool('tools/test.py', 'configs/retinanet_ldn_tiny_1x.py', 'README.md',
                '--backend', backend, *option)
    assert proc.returncode != 0 and option[0] in proc.stderr, proc.stderr
    assert 'is an OpenVINO option' in proc.stderr, proc.stderr


def test_tensor_graph_of_a_mask_rcnn_is_features_then_rpn_outputs():
    model, _ = build_config_model(f'{ROOT}/configs/maskrcnn_ldn_tiny_1x.py')
    graph = TensorGraph(model)
    assert graph.kind == 'two_stage'
    x = torch.randn(1, 3, 128, 160)
    with torch.no_grad():
        outs = graph(x)
        feats = model.extract_feat(x)
        cls_scores, deltas = model.rpn_head(feats)
    assert len(outs) == 3 * len(feats) == 15
    for out, ref in zip(outs, (*feats, *cls_scores, *deltas)):
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_two_stage_heads_the_roi_graphs_cannot_reproduce_are_refused():
    import torch.nn as nn
    from mmcv.ops import RoIPool
    model, _ = build_config_model(f'{ROOT}/configs/maskrcnn_ldn_tiny_1x.py')
    extractor = model.roi_head.mask_roi_extractor
    extractor.roi_layers[0] = RoIPool((14, 14), 0.25)
    with pytest.raises(ValueError, match='RoIAlign.*--backbone-only'):
        TensorGraph(model)
    model.roi_head.shared_head = nn.Identity()  # a C4-style shared head
    with pytest.raises(ValueError, match='shared head.*--backbone-only'):
        TensorGraph(model)
    # its backbone alone is fine
    assert TensorGraph(model.backbone).kind == 'backbone'


def test_a_backbone_has_no_metric_to_evaluate(tmp_path):
    with pytest.raises(ValueError, match='whole detector or segmentor'):
        DeployedModel(build('LDN'), str(tmp_path / 'x.onnx'))


def test_tensor_graph_of_a_retinanet_is_scores_then_deltas():
    model, _ = build_config_model(f'{ROOT}/configs/retinanet_ldn_tiny_1x.py')
    with torch.no_grad():
        outs = TensorGraph(model)(torch.randn(1, 3, 128, 160))
    levels = len(outs) // 2
    head = model.bbox_head
    assert len(outs) == 2 * 5
    assert all(o.shape[1] == head.num_base_priors * head.cls_out_channels
               for o in outs[:levels])
    assert all(o.shape[1] == head.num_base_priors * 4 for o in outs[levels:])


@pytest.mark.slow
@pytest.mark.parametrize('paired', [False, True], ids=['together', 'paired'])
def test_runtime_benchmark_times_ours_and_an_mmdet_peer(tmp_path, paired):
    """One of ours and a small Swin (mmdet's backbones return None from ``eval()``, which
    the tool must not chain): every case timed, eager = 1x (ONNX Runtime in the paired run
    only: its export is the same either way); paired, the peer's records
    name their group and the table gives the ratio to the peer (and glibc keeps freed
    memory, ``--cpu-malloc reuse``)."""
    import json
    out = tmp_path / 'rt.json'
    ldn = "LDN:{'embed_dims':[16,32,64,64],'depths':[1,1,1,1],'num_heads':[1,2,2,2]}"
    swin = 'Swin-T:embed_dims=24:depths=[1,1,1,1]'
    pair = ['--pair-with', swin, '--cpu-malloc', 'reuse'] if paired else []
    # the exported runtimes once (paired); the plain grouping's table needs none of them
    runtimes = ('eager', 'onnxruntime') if paired else ('eager', )
    proc = tool('tools/analysis_tools/benchmark_runtimes.py', '--models', ldn, swin, '--sizes',
                '64', '--runtimes', *runtimes, '--rounds', '1', '--json', str(out), *pair)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result['cpu_malloc'] == ('reuse' if paired else 'system')   # glibc
    assert result['cpu'] == cpu_name() and result['date']              # where and when
    records = result['records']
    assert {(r['model'].split(':')[0], r['runtime'], r['status']) for r in records} == {
        (m, rt, 'ok') for m in ('LDN', 'Swin-T') for rt in runtimes}
    assert len(records) == 2 * len(runtimes)
    for r in records:
        assert r['latency_ms'] > 0
        if r['runtime'] == 'eager':
            assert r['speedup'] == 1.0
        assert r.get('paired_with') == (ldn if paired and r['model'] == swin else None)
        # Swin (whose forward fixes H, W) exported per size without a dynamic attempt
        if r['runtime'] == 'onnxruntime':
            assert r['export'] == ('fixed' if r['model'] == swin else 'dynamic'), r
    if paired:
        assert 'onnxruntime / peer' in proc.stdout
        assert f'| {swin} (with {ldn}) | 64² |' in proc.stdout
    else:
        assert '| LDN:' in proc.stdout and f'| {swin} | 64² |' in proc.stdout


@pytest.mark.parametrize('runtime, expected', [
    ('onnxruntime', ('onnxruntime', False, 'f32')), ('openvino', ('openvino', True, 'f32')),
    ('openvino-bf16', ('openvino', True, 'bf16'))])
def test_runtime_benchmark_loads_each_runtime_as_named(runtime, expected, monkeypatch):
    """``openvino-bf16`` is OpenVINO (static shapes, as ``openvino``) at bf16 precision;
    the others run float32."""
    import benchlib.runtime_benchmark as rb
    seen = []
    monkeypatch.setattr(rb, 'load_runtime', lambda path, rt, threads, static_shapes,
                        precision: seen.append((rt, static_shapes, precision)))
    model = rb._Model('m', build('LDN'), '/nonexistent', threads=1)
    monkeypatch.setattr(model, 'onnx_path', lambda h, w: 'm.onnx')
    model.runner(runtime, 64, 64)
    assert seen == [expected]


def test_runtime_benchmark_compiles_peers_per_size(monkeypatch):
    """``compile``: ours with ``dynamic=True``, the models in ``static_compile`` with
    ``dynamic=False``, and the records say which (``export``).  ``torch.compile`` itself is
    replaced by a recorder here (compiling takes minutes); the benchmark tables run it."""
    from benchlib.specs import build_model, parse_model_spec
    from benchlib.runtime_benchmark import benchmark
    calls = []

    def record_compile(module, dynamic=None, **kwargs):
        if isinstance(module, TensorGraph):  # not a compiled op inside the model
            calls.append(dynamic)
        return module

    monkeypatch.setattr(torch, 'compile', record_compile)
    spec = "LDN:{'embed_dims':[16,32,64,64],'depths':[1,1,1,1],'num_heads':[1,2,2,2]}"
    models = {label: build_model(parse_model_spec(spec)).eval() for label in ('ours', 'peer')}
    torch.set_num_threads(1)
    records = benchmark(models, [64], ['eager', 'compile'], rounds=1, log=lambda m: None,
                        static_compile=['peer'])
    assert torch.get_num_threads() == 1  # the caller's count back (it times with 2)
    assert sorted(calls, key=str) == [False, True]
    modes = {(r['model'], r['runtime']): r['export'] for r in records}
    assert modes == {('ours', 'eager'): None, ('ours', 'compile'): 'dynamic',
                     ('peer', 'eager'): None, ('peer', 'compile'): 'fixed'}
    assert all(r['status'] == 'ok' and r['latency_ms'] > 0 for r in records)


def test_runtime_benchmark_exports_a_size_pinning_model_per_size(tmp_path):
    """A model whose dynamic export fails (its forward fixes H, W, as mmdet's Swin's does)
    falls back to one export per size; one in ``static_export`` skips the dynamic attempt."""
    from benchlib.runtime_benchmark import _Model

    class PinsHeight(torch.nn.Module):
        def forward(self, x):
            return (x * 2 if x.shape[2] == 64 else x, )

    from archs import build
    tried, skipped = (_Model(label, build('LDN'), str(tmp_path), 1, export_dynamic=dynamic)
                      for label, dynamic in (('pins', True), ('skip', False)))
    tried.graph = skipped.graph = PinsHeight()   # in place of the backbone's tensor graph
    assert tried.onnx_path(64, 64).endswith('pins_64x64.onnx') and tried.export_mode == 'fixed'
    assert skipped.mode('onnxruntime') == 'fixed'
    assert skipped.onnx_path(64, 64).endswith('skip_64x64.onnx') and skipped.dynamic_path is None


def test_runtime_benchmark_groups_each_model_with_the_peer():
    from benchlib.runtime_benchmark import groups_of
    assert groups_of(['a', 'b', 'p'], None) == [['a', 'b', 'p']]
    assert groups_of(['a', 'p', 'b'], 'p') == [['a', 'p'], ['b', 'p']]
    with pytest.raises(ValueError, match='peer'):
        groups_of(['a', 'b'], 'p')



@pytest.mark.filterwarnings('ignore::torch.jit.TracerWarning')
@pytest.mark.parametrize('runtime', ['onnxruntime', 'openvino'])
def test_int8_benchmark_times_float32_and_int8_in_either_runtime(tmp_path, runtime,
                                                                 monkeypatch, capsys):
    """tools/analysis_tools/benchmark_int8.py's main: one of ours (exported once, dynamic) and a
    small Swin (exported per size) at two sizes, both precisions timed in the chosen
    runtime.  The graphs come from the TorchScript-based exporter (1 s instead of 12 s for
    ``export_onnx``, which test_onnx_export.py checks); quantization and runtimes are the
    tool's own."""
    import json
    bench = tool_module('tools/analysis_tools/benchmark_int8.py')

    def export(graph, x, path, dynamic_hw=True):
        axes = {'input': {2: 'height', 3: 'width'}} if dynamic_hw else None
        torch.onnx.export(graph, (x, ), path, dynamo=False, input_names=['input'],
                          dynamic_axes=axes)
    monkeypatch.setattr(bench, 'export_onnx', export)
    loaded, load = [], bench.load_runtime
    monkeypatch.setattr(bench, 'load_runtime',
                        lambda path, rt, *a, **k: loaded.append(rt) or load(path, rt, *a, **k))
    out = tmp_path / 'int8.json'
    ldn = "LDN:{'embed_dims':[16,16,16,16],'depths':[1,1,1,1],'num_heads':[1,1,1,1]}"
    swin = 'Swin-T:embed_dims=24:depths=[1,1,1,1]'
    # OpenVINO's case times one model at a time (``--together-max-size`` below the sizes)
    alone = runtime == 'openvino'
    assert bench.main(['--models', ldn, swin, '--sizes', '64', '96', '--rounds', '1',
                       '--threads', '1', '--calib-size', '64', '--calib-inputs', '1',
                       '--peer-max-size', '64', '--runtime', runtime, '--json', str(out)]
                      + (['--together-max-size', '0'] if alone else [])) == 0
    result = json.loads(out.read_text())
    assert result['runtime'] == runtime and loaded == [runtime] * 6
    # the peer's calibration above --peer-max-size is skipped, and says so
    assert f'{swin} at 96: skipped' in capsys.readouterr().out
    assert {(r['model'], r['precision'], r['size']) for r in result['records']} == {
        (m, p, size) for m, size in ((ldn, 64), (ldn, 96), (swin, 64))
        for p in ('float32', 'int8')}
    assert all(r['ms'] > 0 and len(r['runs']) == 1 for r in result['records'])
    # timed in the same rounds: both models at 64 unless one at a time
    for r in result['records']:
        both = r['size'] == 64 and not alone
        assert r['timed_with'] == ([ldn, swin] if both else [r['model']]), r


@pytest.mark.filterwarnings('ignore::torch.jit.TracerWarning')
def test_int8_benchmark_with_nncf_quantizes_once_for_openvino(tmp_path, monkeypatch):
    """``--quantizer nncf``: OpenVINO's own quantizer writes an IR with FakeQuantize nodes,
    calibrated once at ``--calib-size`` and timed at every size, and only OpenVINO runs it."""
    import json
    bench = tool_module('tools/analysis_tools/benchmark_int8.py')

    def export(graph, x, path, dynamic_hw=True):
        torch.onnx.export(graph, (x, ), path, dynamo=False, input_names=['input'],
                          dynamic_axes={'input': {2: 'height', 3: 'width'}})
    monkeypatch.setattr(bench, 'export_onnx', export)
    written, quantize = {}, bench.quantize_nncf

    def record(fp32, out, inputs, float_depthwise):
        inputs = list(inputs)
        written[out] = ({x.shape for x in inputs}, quantize(fp32, out, inputs,
                                                            float_depthwise))
        return written[out][1]
    monkeypatch.setattr(bench, 'quantize_nncf', record)
    ldn = "LDN:{'embed_dims':[16,16,16,16],'depths':[1,1,1,1],'num_heads':[1,1,1,1]}"
    out = tmp_path / 'nncf.json'
    assert bench.main(['--models', ldn, '--sizes', '64', '96', '--rounds', '1', '--threads',
                       '1', '--calib-size', '80', '--calib-inputs', '1', '--runtime',
                       'openvino', '--quantizer', 'nncf', '--json', str(out)]) == 0
    result = json.loads(out.read_text())
    assert result['quantizer'] == 'nncf'
    assert {(r['precision'], r['size']) for r in result['records']} == {
        (p, s) for p in ('float32', 'int8') for s in (64, 96)}
    assert [shapes for shapes, _ in written.values()] == [{(1, 3, 80, 80)}]
    assert all(path.endswith('.xml') and counts['fake_quantize'] > 0
               for path, (_, counts) in written.items())
    with pytest.raises(SystemExit, match='--runtime openvino'):
        bench.main(['--models', ldn, '--quantizer', 'nncf'])


def _int8_convs(path):
    """Names of the Conv nodes of an ONNX graph, and of those that read a dequantized input
    (int8), and of the grouped ones."""
    import onnx
    nodes = onnx.load(path).graph.node
    dequantized = {o for n in nodes if n.op_type == 'DequantizeLinear' for o in n.output}
    convs = [n for n in nodes if n.op_type == 'Conv']
    return ({n.name for n in convs if any(i in dequantized for i in n.input)},
            {n.name for n in convs if any(a.name == 'group' and a.i > 1 for a in n.attribute)})


def _quantized_group_convs(xml):
    """(count, count fed by a FakeQuantize) of the GroupConvolutions of an OpenVINO IR,
    looking through the reshapes and transposes between a quantizer and its convolution."""
    import openvino as ov
    passing = {'Reshape', 'Transpose', 'Convert'}

    def quantized(output):
        node = output.get_node()
        while node.get_type_name() in passing:
            node = node.input(0).get_source_output().get_node()
        return node.get_type_name() == 'FakeQuantize'
    convs = [op for op in ov.Core().read_model(xml).get_ops()
             if op.get_type_name() == 'GroupConvolution']
    return len(convs), sum(any(quantized(i.get_source_output()) for i in op.inputs())
                           for op in convs)


def test_quantize_tool_calibrates_on_the_configs_images(tmp_path, monkeypatch, capsys):
    """tools/deployment/quantize_onnx.py on the NaLaFormer photo RetinaNet's backbone graph,
    calibrated on two training photos through the config's test pipeline and data
    preprocessor; ``--float-depthwise`` keeps exactly the grouped convolutions in float32;
    ``--quantizer nncf`` writes OpenVINO's IR.
    The graph comes from the TorchScript-based exporter (seconds instead of
    ``pytorch2onnx.py``'s whole detector); the tool only reads its input."""
    import os.path as osp
    monkeypatch.chdir(ROOT)  # the config's data_root is relative
    quantize = tool_module('tools/deployment/quantize_onnx.py')
    config = osp.join(ROOT, 'configs/photos/retinanet_nalaformer_pico_bccd.py')
    model, _ = build_config_model(config, {})
    path = str(tmp_path / 'backbone.onnx')
    torch.onnx.export(TensorGraph(model.backbone).eval(), (torch.randn(1, 3, 96, 128), ), path,
                      dynamo=False, input_names=['input'],
                      dynamic_axes={'input': {2: 'height', 3: 'width'}})
    int8 = {}
    for flag in ((), ('--float-depthwise', )):
        out = str(tmp_path / f'int8{len(flag)}.onnx')
        assert quantize.main([config, path, '--out', out, '--calib-images', '2', *flag]) == 0
        assert f'{out}: ' in capsys.readouterr().out
        int8[bool(flag)], grouped = _int8_convs(out)
    assert grouped and grouped <= int8[False]
    assert int8[True] == int8[False] - grouped
    # OpenVINO's NNCF on the same images: an IR only OpenVINO reads, no rule of ours;
    # --float-depthwise leaves its grouped convolutions without a FakeQuantize
    quantized = {}
    for flag in ((), ('--float-depthwise', )):
        xml = str(tmp_path / f'int8{len(flag)}.xml')
        assert quantize.main([config, path, '--out', xml, '--calib-images', '2',
                              '--quantizer', 'nncf', *flag]) == 0
        assert 'FakeQuantize nodes (NNCF)' in capsys.readouterr().out
        assert (tmp_path / f'int8{len(flag)}.bin').is_file()
        quantized[bool(flag)] = _quantized_group_convs(xml)
    grouped, with_fq = quantized[False]
    assert grouped > 0 and with_fq == grouped
    assert quantized[True] == (grouped, 0)
    with pytest.raises(SystemExit, match='MODEL.xml'):
        quantize.main([config, path, '--out', str(tmp_path / 'x.onnx'), '--quantizer', 'nncf'])
    with pytest.raises(SystemExit, match='without --keep-float'):
        quantize.main([config, path, '--out', xml, '--quantizer', 'nncf', '--keep-float', 'x'])
