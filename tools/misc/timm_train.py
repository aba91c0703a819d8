"""Run one of timm's scripts (``train.py``, ``validate.py``, ...) with the mmlinattn models
registered.

timm's pip package does not ship its training script; take ``train.py`` from the
pytorch-image-models repository at the tag of the installed timm.  Recent ``train.py``
versions can import our models themselves (``--device-modules mmlinattn.timm``); this wrapper
works with any version:

    python tools/misc/timm_train.py /path/to/pytorch-image-models/train.py /data/imagenet \\
        --model nalaformer_tiny --opt adamw --lr 1e-3 --weight-decay 0.05 ...
    torchrun --nproc_per_node=8 tools/misc/timm_train.py /path/to/train.py /data/imagenet ...

The first argument (or the environment variable ``TIMM_TRAIN_PY`` when the first argument is
not a ``.py`` file) is the script; everything after it goes to the script unchanged.  The
script runs in this process's place (same process id, environment and torchrun rank), as
``python SCRIPT ...`` would run it: its own directory first on the import path (through
``PYTHONPATH``), after ``import mmlinattn.timm``.
"""
import os
import os.path as osp
import sys


def resolve_script(argv: list) -> tuple:
    """(script path, its arguments) from our command line."""
    if argv and argv[0].endswith('.py'):
        script, rest = argv[0], argv[1:]
    elif os.environ.get('TIMM_TRAIN_PY'):
        script, rest = os.environ['TIMM_TRAIN_PY'], argv
    else:
        raise SystemExit('usage: timm_train.py /path/to/pytorch-image-models/train.py '
                         '[train.py arguments]  (or set TIMM_TRAIN_PY); timm\'s pip package '
                         'has no train.py: clone github.com/huggingface/pytorch-image-models '
                         'at the tag of your timm version')
    if not osp.isfile(script):
        raise SystemExit(f'timm script {script!r} does not exist')
    return osp.abspath(script), rest


#: runs in the replacing interpreter: register our models, then the script as __main__
RUN_SCRIPT = ('import runpy, sys; import mmlinattn.timm; sys.argv = sys.argv[1:]; '
              "runpy.run_path(sys.argv[0], run_name='__main__')")


def main() -> None:
    script, rest = resolve_script(sys.argv[1:])
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (osp.dirname(script), os.environ.get('PYTHONPATH')) if p)
    os.execve(sys.executable, [sys.executable, '-c', RUN_SCRIPT, script] + rest, env)


if __name__ == '__main__':
    main()
