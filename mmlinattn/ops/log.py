"""The logger the ops and kernels warn through: mmengine's current one when mmengine is
installed (an OpenMMLab runner writes it to its log file), else the standard library's."""
import logging

__all__ = ['current_logger']


def current_logger(name: str) -> logging.Logger:
    """mmengine's current ``MMLogger``, or ``logging.getLogger(name)`` without mmengine (it is
    not a declared dependency)."""
    try:
        from mmengine.logging import MMLogger
    except ImportError:
        return logging.getLogger(name)
    return MMLogger.get_current_instance()
