"""Measuring machinery of the scripts in ``tools/analysis_tools/`` (benchmark, get_flops,
model_zoo, benchmark_runtimes, benchmark_int8, measure_batch_independence, backbone_health, ...):
process isolation, memory probes, FLOP counting, statistics and report writing.  Not part of
the installed package, as mmdet keeps its analysis tools: a script here imports it as a sibling
(its folder is ``sys.path[0]``), the tests through pyproject's pytest ``pythonpath``, a
``dev/`` script with ``PYTHONPATH=tools/analysis_tools``.

* :mod:`.isolation`: a measurement in a child process of its own, under a time limit;
* :mod:`.memory`: peak RSS, address-space caps, glibc's reuse of freed memory;
* :mod:`.flops`: FLOP counting with grouped-convolution backward and nested counts;
* :mod:`.specs`, :mod:`.cases`, :mod:`.interleave`, :mod:`.sweep`: the backbone benchmark;
* :mod:`.stats`, :mod:`.report`: records, scaling exponents, CSV / Markdown / PNG outputs;
* :mod:`.model_flops`, :mod:`.model_zoo`: params and FLOPs of whole detectors / segmentors
  and the model-zoo page;
* :mod:`.runtime_benchmark`: one backbone in eager PyTorch, torch.compile and the ONNX
  runtimes; :mod:`.batch_independence`: a detector's outputs per image, alone or batched;
* :mod:`.health`: whole-network health of a backbone (backbone_health, attention_map);
* :mod:`.work_dirs`: the metrics an mmengine run left (seed_study, summarize_demo).

Importing it imports neither mmdet nor mmseg (the peers and whole models load them when
used).
"""
from .cases import Case, case_child, matmul_rate, run_case
from .flops import block_modules, count_block_bytes, count_flops, flop_counter, scoped_flops
from .interleave import interleave_group, run_alternated, run_interleaved
from .isolation import CPU_PRELOAD, run_isolated, time_limit
from .memory import (GLIBC_TUNABLES_REUSE, is_oom, return_freed_cpu_memory,
                     reuse_freed_cpu_memory)
from .report import (markdown_hotspots, markdown_ratios, markdown_summary, markdown_table, replot,
                     write_csv)
from .report import write_plot
from .specs import DEFAULT_MODELS, PEERS, ModelSpec, build_model, parse_model_spec, parse_size
from .stats import (RECORD_FIELDS, block_traffic_mb, fit_exponent, make_record, ratio, roofline,
                    summarize)
from .sweep import environment, run_sweep

__all__ = [
    'Case', 'case_child', 'matmul_rate', 'run_case', 'count_flops', 'flop_counter',
    'block_modules', 'count_block_bytes', 'block_traffic_mb', 'roofline',
    'scoped_flops', 'interleave_group', 'run_alternated', 'run_interleaved', 'run_isolated',
    'time_limit', 'CPU_PRELOAD',
    'GLIBC_TUNABLES_REUSE', 'is_oom', 'return_freed_cpu_memory', 'reuse_freed_cpu_memory',
    'markdown_hotspots', 'markdown_ratios', 'markdown_summary', 'markdown_table', 'replot',
    'write_csv', 'write_plot',
    'DEFAULT_MODELS', 'PEERS', 'ModelSpec', 'build_model', 'parse_model_spec', 'parse_size',
    'RECORD_FIELDS', 'fit_exponent', 'make_record', 'ratio', 'summarize', 'environment',
    'run_sweep'
]
