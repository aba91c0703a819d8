"""Where the repository is, for tests that run its tools or read its configs."""
import importlib.util
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def load_tool(path: str):
    """The module of a tool script (a path from the root, e.g. ``tools/misc/check_env.py``)."""
    name = osp.splitext(osp.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
