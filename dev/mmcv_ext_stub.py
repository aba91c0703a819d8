"""A stand-in for mmcv's compiled ops (``mmcv._ext``) in an mmcv built without them, installed
by dev/gpu_checks.sh on a GPU machine that has no compiled mmcv: importing mmcv.ops
(which mmdet's model registry does) then works, and calling any op says that it is missing.
The peers' backbones (Swin-T, ResNet-50) call none."""


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise RuntimeError(f"mmcv's op {name} is not compiled in this mmcv (built without its "
                           f'ops: dev/device_wheels.sh)')
    return missing
