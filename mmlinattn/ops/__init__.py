"""The papers' mathematics as plain tensor functions (no parameters, no registry, no fast path).

One module per paper, each with its plain O(N) form and, next to it, the dense reference the
tests check it against (``*_reference``: the N x N matrix, ``torch.linalg.pinv``, explicit
loops): :mod:`.soft` (SOFT / SOFT++), :mod:`.nalaformer` (NaLaFormer), :mod:`.infsa`
(Infinite Self-Attention), :mod:`.diffusion` (Linear Diffusion Networks) and
:mod:`.normalized_attention` (the normalised linear attention LDN and NaLaFormer share);
:mod:`.precision` (the float32 island) and :mod:`.rope`.  The faster forms the backbones run
live in :mod:`mmlinattn.kernels`, each tested equal to its form here.
"""
from .diffusion import (dct_matrix, grid_diffusion, grid_diffusion_implicit_dct,
                        grid_diffusion_implicit_reference, grid_diffusion_reference,
                        stencil_kernel, stencil_offsets)
from .infsa import (infsa_attention_matrix, linear_infsa, linear_infsa_pooled,
                    linear_infsa_reference, linear_infsa_weights, pure_infsa,
                    pure_infsa_reference)
from .nalaformer import (nala_attention, nala_attention_matrix, nala_attention_reference,
                         nala_feature_maps, nala_similarity_reference)
from .normalized_attention import (FEATURE_MAPS, linear_attention, linear_attention_reference,
                                   normalized_attention_reference, normalized_linear_attention)
from .soft import (gaussian_kernel, gaussian_kernel_reference, newton_schulz_pinv,
                   newton_schulz_reference, pairwise_sqdist, soft_attention,
                   soft_attention_reference, symmetric_normalize)

__all__ = [
    'dct_matrix', 'grid_diffusion', 'grid_diffusion_implicit_dct',
    'grid_diffusion_implicit_reference', 'grid_diffusion_reference', 'stencil_kernel',
    'stencil_offsets', 'infsa_attention_matrix', 'linear_infsa', 'linear_infsa_pooled',
    'linear_infsa_reference', 'linear_infsa_weights', 'pure_infsa', 'pure_infsa_reference',
    'FEATURE_MAPS', 'linear_attention', 'linear_attention_reference',
    'normalized_attention_reference', 'normalized_linear_attention', 'nala_attention',
    'nala_attention_matrix', 'nala_attention_reference', 'nala_feature_maps',
    'nala_similarity_reference', 'gaussian_kernel', 'gaussian_kernel_reference',
    'newton_schulz_pinv', 'newton_schulz_reference', 'pairwise_sqdist', 'soft_attention',
    'soft_attention_reference', 'symmetric_normalize'
]
