"""ONNX export needs torch.onnx.export(dynamo=True) (torch.export); on a torch without it (the
torch21 lane) the export stops first with an error that says so, before any file is written."""
import inspect
import re

import pytest
import torch
import torch.nn as nn

from mmlinattn.deployment import export_onnx
from mmlinattn.deployment.onnx_export import require_export_onnx


def test_export_names_the_torch_it_needs(tmp_path):
    path = tmp_path / 'conv.onnx'
    if 'dynamo' in inspect.signature(torch.onnx.export).parameters:
        require_export_onnx()  # the export tests (tests/deployment) run the exports here
        return
    version = re.escape(torch.__version__)
    with pytest.raises(RuntimeError, match=rf'torch\.export .*torch {version}'):
        export_onnx(nn.Conv2d(3, 4, 3), torch.randn(1, 3, 64, 64), str(path))
    assert not path.exists()
