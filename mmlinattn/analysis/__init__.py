"""Diagnostics (interpretation, alignment, attention maps); not needed for training.  The
whole-network health checks are tools/analysis_tools/backbone_health.py's (benchlib.health)."""
from .infsa import (attention_maps, capture_mixer_inputs, eigenvector_alignment, katz_centrality,
                    model_eigenvector_alignment, neumann_kernel, power_iteration,
                    save_attention_overlay, summarize_alignment)

__all__ = [
    'attention_maps', 'capture_mixer_inputs', 'eigenvector_alignment', 'katz_centrality',
    'model_eigenvector_alignment', 'neumann_kernel', 'power_iteration', 'save_attention_overlay',
    'summarize_alignment'
]
