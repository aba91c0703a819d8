"""Where the repository is, for tests that run its tools or read its configs."""
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
