"""Diagnostics (interpretation, alignment, attention maps, whole-network health); not needed
for training."""
from .health import (block_activation_max, brief_training, centred_similarity,
                     half_precision_finite, normalise_photo, photo_crops, residual_blocks,
                     train_eval_gap)
from .infsa import (attention_maps, capture_mixer_inputs, eigenvector_alignment, katz_centrality,
                    model_eigenvector_alignment, neumann_kernel, power_iteration,
                    save_attention_overlay, summarize_alignment)

__all__ = [
    'attention_maps', 'block_activation_max', 'brief_training', 'capture_mixer_inputs',
    'centred_similarity', 'eigenvector_alignment', 'half_precision_finite', 'katz_centrality',
    'model_eigenvector_alignment', 'neumann_kernel', 'normalise_photo', 'photo_crops',
    'power_iteration', 'residual_blocks', 'save_attention_overlay', 'summarize_alignment',
    'train_eval_gap'
]
