"""The fast-path wing: the forms that compute what :mod:`mmlinattn.ops` writes plainly, faster
or in less memory (compiled loops, oneDNN epilogues, custom autograd Functions, in-place,
chunked and sliced variants, Triton kernels for CUDA).  A backbone's forward builds one call
context where it starts (:func:`.policy.decide_once`); each fast form is a
:class:`.dispatch.Dispatch` of its rule, which runs it or its plain form.

The model layers take what they run from here only, through twelve names: :func:`decide_once`,
:class:`Stripe`, :class:`Stripes`, :func:`per_pixel` and eight read-only
:class:`.entries.Entries`, one per concern: each family's attention (``fast_soft``,
``fast_nala``, ``fast_ldn``, ``fast_infsa``), the residual seam (``seam``, which runs a
:class:`mmlinattn.models.layers.branch.Branch` through its interface), linears and convs
(``fast_linear``), recomputation (``memory``), a stage's and a stem's forms (``stage_forms``).
"""
from . import dispatch, policy
from .policy import decide_once
from .chunked import (fast_linear_attention, key_sums, linear_attention_features,
                      query_side_given_sums)
from .depthwise import conv_same
from .diffusion import fast_grid_diffusion
from .entries import Entries
from .infsa import (fast_pure_infsa, infsa_context, infsa_mean_query, infsa_pool_sums,
                    infsa_query_sums)
from .nala import fast_nala_attention, nala_inference_maps
from .onednn import apply_linear, fused_gelu, linear_act, linear_blocks
from .recompute import (checkpoint, recompute_in_backward, recompute_in_eager_backward,
                        recompute_stretch)
from .residual import (Step, branch_output, hidden_chain, normed_linears, parallel_residual,
                       residual_step)
from .row_stripes import add_position, per_pixel, per_pixel_rows, run_stem, stage_home
from .soft import fast_soft_attention, soft_middle, soft_output, soft_value_sums
from .stripe import Stripe, Stripes

fast_soft = Entries('fast_soft', 'SOFT++ attention', attention=fast_soft_attention,
                    value_sums=soft_value_sums, middle=soft_middle, output=soft_output)
fast_nala = Entries('fast_nala', 'NaLaFormer attention', attention=fast_nala_attention,
                    inference_maps=nala_inference_maps, key_sums=key_sums,
                    query_side_given_sums=query_side_given_sums)
fast_ldn = Entries('fast_ldn', "LDN's attention and diffusion", key_sums=key_sums,
                   linear_attention=fast_linear_attention, features=linear_attention_features,
                   query_side_given_sums=query_side_given_sums, grid_diffusion=fast_grid_diffusion)
fast_infsa = Entries('fast_infsa', 'InfSA', pure=fast_pure_infsa, query_sums=infsa_query_sums,
                     mean_query=infsa_mean_query, pool_sums=infsa_pool_sums, context=infsa_context)
seam = Entries('seam', 'the residual seam', step=residual_step, parallel=parallel_residual,
               branch_output=branch_output, hidden_chain=hidden_chain, Step=Step,
               normed_linears=normed_linears)
fast_linear = Entries('fast_linear', 'linears and convs', apply=apply_linear,
                      blocks=linear_blocks, conv_same=conv_same)
memory = Entries('memory', 'recomputation', checkpoint=checkpoint,
                 recompute_stretch=recompute_stretch,
                 recompute_in_backward=recompute_in_backward,
                 recompute_in_eager_backward=recompute_in_eager_backward)
stage_forms = Entries('stage_forms', "a stage's and a stem's forms", add_position=add_position,
                      stage_home=stage_home, run_stem=run_stem,
                      per_pixel_rows=per_pixel_rows)

#: the entry sets and every function above, with dispatch and policy (not the other submodules)
__all__ = sorted(name for name, value in globals().items()
                 if not name.startswith('_') and not isinstance(value, type(policy))
                 or name in ('dispatch', 'policy'))
