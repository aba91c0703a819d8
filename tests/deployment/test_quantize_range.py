"""Static int8 quantizes weights to 7 bits (``reduce_range``) on CPUs without an int8
dot-product instruction, where ONNX Runtime's u8 x s8 kernels add pairs of products in
saturating int16 (the LDN int8 graph of test_onnx_export.py was off by 0.48 on an AVX2 CPU
with 8-bit weights, within 0.25 with 7-bit ones)."""
import pytest

from mmlinattn.deployment import quantize
from mmlinattn.utils.machine import has_int8_dot_product


@pytest.mark.parametrize('flags, expected', [
    ('fpu sse2 avx avx2 fma', False),
    ('avx2 avx512f avx512bw avx512_vnni', True),
    ('avx2 avx_vnni', True),
    ('avx2 avx512f amx_tile amx_int8', True),
])
def test_int8_dot_product_is_read_from_the_first_processor(flags, expected, tmp_path):
    info = tmp_path / 'cpuinfo'
    info.write_text(f'processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: avx512_vnni\n')
    assert has_int8_dot_product(str(info)) is expected


@pytest.mark.parametrize('vnni, explicit, expected', [
    (False, None, True), (True, None, False), (False, False, False), (True, True, True)])
def test_reduce_range_follows_the_cpu_unless_given(vnni, explicit, expected, tmp_path,
                                                   monkeypatch):
    import onnx
    from onnx import TensorProto, helper
    from onnxruntime import quantization as q
    weight = helper.make_tensor('w', TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0])
    node = helper.make_node('MatMul', ['input', 'w'], ['out'], name='mm')
    graph = helper.make_graph([node], 'g', [helper.make_tensor_value_info(
        'input', TensorProto.FLOAT, [1, 2])], [helper.make_tensor_value_info(
            'out', TensorProto.FLOAT, [1, 2])], [weight])
    path = str(tmp_path / 'f.onnx')
    onnx.save(helper.make_model(graph), path)
    seen = {}
    monkeypatch.setattr(q, 'quantize_static', lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr(quantize, 'has_int8_dot_product', lambda: vnni)
    quantize.quantize_static(path, str(tmp_path / 'q.onnx'), [], reduce_range=explicit)
    assert seen['reduce_range'] is expected
