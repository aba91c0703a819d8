"""What machine a measurement was taken on (benchmark records, the test suite's durations
record)."""
import platform
from typing import Dict, Set

__all__ = ['cpu_name', 'vector_units', 'cpu_flags', 'has_int8_dot_product']


def _first_processor(cpuinfo: str) -> Dict[str, str]:
    """The fields of the first processor's block of ``cpuinfo`` ({} where it cannot be read)."""
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
    return fields


def cpu_flags(cpuinfo: str = '/proc/cpuinfo') -> Set[str]:
    """The CPU's feature flags (empty where ``cpuinfo`` cannot be read)."""
    return set(_first_processor(cpuinfo).get('flags', '').split())


def has_int8_dot_product(cpuinfo: str = '/proc/cpuinfo') -> bool:
    """Whether the CPU multiplies int8 vectors without an int16 intermediate (AVX-512 VNNI,
    AVX-VNNI, AMX): without it, x86 int8 kernels sum u8 x s8 pairs in saturating int16."""
    return bool(cpu_flags(cpuinfo) & {'avx512_vnni', 'avx_vnni', 'amx_int8'})


def cpu_name(cpuinfo: str = '/proc/cpuinfo') -> str:
    """The CPU's model name, with its family, model and widest vector units: two CPU
    generations can report one model name and still differ in speed and in their ratios to
    a peer (AVX2 against AVX-512)."""
    fields = _first_processor(cpuinfo)
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
