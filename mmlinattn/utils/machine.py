"""What machine a measurement was taken on (benchmark records, the test suite's durations
record)."""
import platform
from typing import Dict

__all__ = ['cpu_name', 'vector_units']


def cpu_name(cpuinfo: str = '/proc/cpuinfo') -> str:
    """The CPU's model name, with its family, model and widest vector units: two CPU
    generations can report one model name and still differ in speed and in their ratios to
    a peer (AVX2 against AVX-512)."""
    fields: Dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(':')
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get('model name') or platform.processor() or 'unknown CPU'
    flags = set(fields.get('flags', '').split())
    units = [label for flag, label in (('avx512f', 'AVX-512'), ('amx_tile', 'AMX'))
             if flag in flags]
    if not units and 'avx2' in flags:
        units = ['AVX2']
    detail = [f"family {fields['cpu family']} model {fields['model']}"] \
        if 'cpu family' in fields and 'model' in fields else []
    detail += units
    return f"{name} ({', '.join(detail)})" if detail else name


def vector_units(name: str) -> str:
    """The widest vector units that :func:`cpu_name` named (``'AMX'``, ``'AVX-512'``,
    ``'AVX2'``), or ``''``."""
    for units in ('AMX', 'AVX-512', 'AVX2'):
        if units in name:
            return units
    return ''
