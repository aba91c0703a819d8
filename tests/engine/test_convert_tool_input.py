"""tools/model_converters/convert_checkpoint.py on a source file that is not there (a download
not made yet) or not a checkpoint: exit status 1 and one line that names the file, no
traceback, and nothing written."""
import os.path as osp

from tool_runs import tool_module


def test_missing_or_broken_source_says_so(tmp_path, capsys):
    tool = tool_module('tools/model_converters/convert_checkpoint.py')
    dst = str(tmp_path / 'out' / 'nalaformer_tiny_in1k.pth')
    missing = str(tmp_path / 'NALAFORMER_T.pth')
    assert tool.main([missing, dst, '--official', '--arch-check', 'NaLaFormer:tiny']) == 1
    out = capsys.readouterr().out
    assert out.startswith('ERROR: ') and missing in out and 'docs/user_guides/weights.md' in out
    broken = tmp_path / 'empty.pth'
    broken.write_bytes(b'')
    assert tool.main([str(broken), dst]) == 1
    assert 'empty' in capsys.readouterr().out
    assert not osp.exists(dst)
