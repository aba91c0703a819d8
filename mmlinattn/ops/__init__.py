"""The papers' mathematics as plain tensor functions (no parameters, no registry)."""
from .diffusion import (dct_matrix, grid_diffusion, grid_diffusion_implicit_dct, stencil_kernel,
                        stencil_offsets)
from .infsa import (infsa_attention_matrix, linear_infsa, linear_infsa_pooled,
                    linear_infsa_weights, pure_infsa)
from .linear_attention import FEATURE_MAPS, linear_attention, normalized_linear_attention
from .nalaformer import nala_attention, nala_attention_matrix, nala_feature_maps
from .soft import (gaussian_kernel, newton_schulz_pinv, pairwise_sqdist, soft_attention,
                   symmetric_normalize)

__all__ = [
    'dct_matrix', 'grid_diffusion', 'grid_diffusion_implicit_dct', 'stencil_kernel',
    'stencil_offsets', 'infsa_attention_matrix', 'linear_infsa', 'linear_infsa_pooled',
    'linear_infsa_weights', 'pure_infsa', 'FEATURE_MAPS', 'linear_attention',
    'normalized_linear_attention', 'nala_attention', 'nala_attention_matrix',
    'nala_feature_maps', 'gaussian_kernel', 'newton_schulz_pinv', 'pairwise_sqdist',
    'soft_attention', 'symmetric_normalize'
]
