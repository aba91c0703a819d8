"""A throw-away Python environment that holds only some of .venv's distributions.

Reinstalling torch takes minutes and needs the network, so the environment is a
``venv --without-pip`` whose site-packages gets one ``.pth`` line: a directory of symlinks to
the chosen distributions and their installed dependency closure in the current interpreter's
site-packages.  Nothing else of .venv (mmcv, mmdet, mmseg, ...) is visible there.
"""
import os
import os.path as osp
import re
import subprocess
import sys
import venv
from importlib import metadata

from packaging.requirements import Requirement


def _canonical(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def dependency_closure(names):
    """Installed distributions reachable from ``names`` through their non-extra requirements
    whose markers hold here; requirements that are not installed are skipped (e.g. CUDA
    wheels a CPU build of torch does not need)."""
    seen, todo = {}, [_canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({'extra': ''}):
                todo.append(_canonical(req.name))
    return seen


def _top_level_entries(dist):
    """First path components (packages, modules, .dist-info) a distribution installed into
    site-packages; entries outside it (scripts in bin/) are left out."""
    entries = set()
    for f in dist.files or ():
        parts = f.parts
        if parts and parts[0] != '..' and parts[0] != '__pycache__':
            entries.add(parts[0])
    return entries


def make_clean_env(root: str, dists, extra_paths=()):
    """Create a venv in ``root`` that sees only ``dists`` (and their dependencies) plus
    ``extra_paths``; return its python executable."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(root)
    links = osp.join(root, 'linked-site-packages')
    os.makedirs(links)
    for dist in dependency_closure(dists).values():
        site = str(dist.locate_file(''))
        for entry in _top_level_entries(dist):
            src, dst = osp.join(site, entry), osp.join(links, entry)
            if osp.exists(src) and not osp.lexists(dst):
                os.symlink(src, dst)
    python = osp.join(root, 'bin', 'python')
    site_dir = subprocess.run(
        [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        capture_output=True, text=True, check=True, env=clean_env_vars()).stdout.strip()
    with open(osp.join(site_dir, 'only-these.pth'), 'w') as f:
        f.write('\n'.join([links, *extra_paths]) + '\n')
    return python


def clean_env_vars():
    """os.environ without anything that would add .venv's packages back."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')}
    env['PYTHONNOUSERSITE'] = '1'
    return env


if __name__ == '__main__':  # python tests/clean_env.py DIR DIST...: make one by hand
    print(make_clean_env(sys.argv[1], sys.argv[2:]))
