"""SOFT / SOFT++ attention: the Gaussian kernel, its Nystrom decomposition, the Newton-Schulz
pseudo-inverse and SOFT++'s symmetric normalisation, each next to its dense reference.

Papers: Lu et al., "SOFT: Softmax-free Transformer with Linear Complexity" (NeurIPS 2021,
arXiv 2110.11945), and its journal version with SOFT++, Lu et al., "Softmax-free Linear
Transformers" (IJCV 2024, arXiv 2207.03341).  Equation numbers refer to the journal paper:

* Eq. 4/5 (Sec. 3.1) -- the softmax-free Gaussian kernel
  ``S_ij = exp(-||q_i - k_j||^2 / (2 sqrt(d)))`` with ``K = Q`` (shared projection);
* Eq. 7-9 / Alg. 1 (Sec. 3.2) -- the Nystrom decomposition ``S^ = exp(Q - K~) A^+ exp(Q~ - K)``
  with the bottleneck matrix ``A = exp(Q~ - K~)``;
* Eq. 10 / Alg. 2 (Sec. 3.2) -- the Newton-Schulz (Newton-Raphson) iteration for the
  Moore-Penrose inverse ``A_{k+1} = 2 A_k - A_k A A_k``, ``A_0 = alpha A``;
* Eq. 12 (Sec. 3.2) -- its closed-form backward ``grad_A = -Y^T grad_Y Y^T``, ``Y = A^{-1}``;
* Eq. 17 (Sec. 3.3) -- SOFT++'s symmetric normalisation ``D^{-1/2} A^+ D^{-1/2}``,
  ``D = diag(A 1)``.

Besides Eq. 10, ``pinv='cholesky'`` replaces ``A^+`` by a ridge-regularised solve with
``(A + lambda I)^{-1}``, ``lambda = 1e-6 tr(A) / m`` (raised on a failed factorisation), through
a Cholesky factorisation (:func:`cholesky_pinv_solve`): not in the paper and not ``A^+``
itself, an option for large m (the paper's fixed ratio makes m = n / r^2, and Eq. 10 costs
about ``2 T m^3 = 40 m^3`` flops per head against the factorisation's ``m^3 / 3``).

The ``*_reference`` functions are the same equations written the plain way (explicit
difference tensors, ``torch.linalg.pinv``, the dense n x n matrix): O(n^2), for tests and
analysis only.  All kernels, the pseudo-inverse and the normalisation run in a float32
island (:mod:`mmlinattn.ops.precision`); outputs are cast back to the input dtype.
"""
import math
from typing import Optional, Union

import torch
from torch._subclasses.fake_tensor import is_fake

from .log import current_logger
from .precision import Float32Island
from .tracing import traced

NEWTON_INITS = ('safe', 'paper', 'scaled')
#: how :func:`soft_attention` applies ``A^+``: Eq. 10 (default) or a ridge-regularised
#: Cholesky solve with ``(A + lambda I)^{-1}``
PINV_SOLVERS = ('newton', 'cholesky')
#: relative ridge of the Cholesky solver: ``lambda = CHOLESKY_JITTER * tr(A) / m``
CHOLESKY_JITTER = 1e-6
#: the ridge is multiplied by 100 at most this many times when a factorisation fails
CHOLESKY_RETRIES = 3


def pairwise_sqdist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances ``||a_i - b_j||^2`` of two token sets.

    Expanded as ``|a|^2 + |b|^2 - 2 a b^T`` (one matmul, no (p, q, d) tensor) and clamped at 0
    so cancellation never yields a negative distance (a kernel value > 1).

    Args:
        a: (..., p, d).
        b: (..., q, d), batch dimensions broadcastable with ``a``'s.

    Returns:
        (..., p, q) distances in the dtype of the inputs.
    """
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f'pairwise_sqdist: feature dims differ, a has {a.shape[-1]} and b '
                         f'has {b.shape[-1]} (shapes {tuple(a.shape)}, {tuple(b.shape)})')
    d = a.square().sum(-1)[..., :, None] + b.square().sum(-1)[..., None, :]
    d = d - 2 * (a @ b.transpose(-1, -2))
    return d.clamp_min(0)


def gaussian_kernel(a: torch.Tensor, b: torch.Tensor,
                    denom: Optional[float] = None) -> torch.Tensor:
    """The softmax-free attention kernel of Eq. 5, ``exp(-||a_i - b_j||^2 / denom)``.

    Args:
        a: (..., p, d) queries; b: (..., q, d) keys (``b = a`` or landmarks for SOFT).
        denom: the bandwidth; default ``2 sqrt(d)`` is Eq. 5 with ``d_e`` the per-head
            dimension ``d`` (as in the authors' public code).  Inputs already scaled by ``d^{-1/4}``
            (as the attention module does) use ``denom=2``, which is the same kernel.

    Returns:
        (..., p, q) kernel values in [0, 1].  The backbones run the fast form
        :func:`mmlinattn.kernels.soft.fast_gaussian_kernel`.
    """
    if denom is None:
        denom = 2.0 * math.sqrt(a.shape[-1])
    if not denom > 0:
        raise ValueError(f'gaussian_kernel: denom must be > 0, got {denom!r}')
    return torch.exp(pairwise_sqdist(a, b) / -denom)


def gaussian_kernel_reference(a: torch.Tensor, b: torch.Tensor,
                              denom: Optional[float] = None) -> torch.Tensor:
    """Eq. 5 written out: ``exp(-||a_i - b_j||^2 / denom)`` from the explicit (..., p, q, d)
    difference tensor (:func:`gaussian_kernel` expands the square instead).  ``denom``
    defaults to ``2 sqrt(d)``."""
    if denom is None:
        denom = 2.0 * math.sqrt(a.shape[-1])
    return torch.exp(-(a[..., :, None, :] - b[..., None, :, :]).square().sum(-1) / denom)


def _matrix_one_norm(a: torch.Tensor) -> torch.Tensor:
    """Induced 1-norm (max absolute column sum) of every matrix in a batch: (...)."""
    return a.abs().sum(-2).amax(-1)


def newton_init_alpha(a: torch.Tensor, init: str = 'safe', ridge: float = 0.0) -> torch.Tensor:
    """Per-matrix step ``alpha`` of ``A_0 = alpha P`` (Eq. 10) for the iteration on
    ``P = A + ridge I`` (``P = A`` without a ridge), shape (...).

    The step must suit P, the matrix iterated on: one taken from A alone can exceed
    ``2 / sigma_max(P)^2`` and the iteration then diverges (``'paper'`` for A close to I at
    any ridge).  In ``'safe'`` and ``'paper'`` below, A stands for P.

    * ``'safe'`` (default): ``alpha = 1 / ||A||_1^2``.  Since ``||A||_2^2 <= ||A||_1 ||A||_inf
      = ||A||_1^2`` for symmetric A, ``alpha * sigma^2 <= 1`` for every singular value, so
      ``||A A^+ - A A_0|| < 1`` and the iteration converges monotonically (Prop. 2); A = I
      gives ``A_0 = I`` exactly.  It is the paper's beta-rule (Sec. 3.2, after Prop. 2) with n = 1.
    * ``'paper'``: the authors' code rule: start at ``2 / ||A||_1^2`` (Alg. 2) and halve while
      ``||I - alpha A A||_1 > 1.01``, at most 10 times -- evaluated per matrix here, never
      as one batch-global alpha, and with a fixed number of vectorised rounds (no host
      synchronisation).  It can fail: A = I passes at alpha = 2 and the iteration returns 0.
      The authors' SOFT-Norm code uses this rule with one alpha for the whole batch.
    * ``'scaled'``: the authors' plain-SOFT code rule, ``alpha = 0.9 * 2 / ||A||_inf^2`` (max
      row sum of the unridged A, as in their code) per matrix, no search: Alg. 2's step
      shrunk by 0.9; capped at ``1.9 / ||P||_inf^2`` (abs row sums), so
      ``alpha sigma_max(P)^2 <= 1.9``.  The cap never binds for their ridge 0.01 on a
      Gaussian kernel (``||A||_inf >= 1``), so their iteration is reproduced exactly.
    """
    if init not in NEWTON_INITS:
        raise ValueError(f'newton init must be one of {NEWTON_INITS}, got {init!r}')
    eye = torch.eye(a.shape[-1], device=a.device, dtype=a.dtype)
    p = a + ridge * eye if ridge else a
    if init == 'scaled':
        theirs = 1.8 / a.sum(-1).amax(-1).square()
        return torch.minimum(theirs, 1.9 / p.abs().sum(-1).amax(-1).square())
    n1 = _matrix_one_norm(p)
    if init == 'safe':
        return 1.0 / n1.square()
    alpha = 2.0 / n1.square()
    pp = p @ p
    for _ in range(10):  # fixed count: a halving is a no-op once a matrix passes
        bad = _matrix_one_norm(eye - alpha[..., None, None] * pp) > 1.01
        alpha = torch.where(bad, alpha * 0.5, alpha)
    return alpha


def _newton_schulz_iterations(a: torch.Tensor, num_iters: int, init: str, ridge: float
                              ) -> torch.Tensor:
    """Eq. 10's ``T`` iterations on ``P = A + ridge I`` from ``alpha P``."""
    # the step is that of P = A + ridge I, the matrix iterated on: one from A alone can
    # overshoot 2 / sigma_max(P)^2 and diverge
    alpha = newton_init_alpha(a, init, ridge)
    m = a.shape[-1]
    eye = torch.eye(m, device=a.device, dtype=a.dtype)
    a3 = (a + ridge * eye).reshape(-1, m, m)
    y = alpha.reshape(-1, 1, 1) * a3
    two_eye = 2 * eye
    for _ in range(num_iters):
        # 2Y - Y A Y = Y (2I - A Y): two batched matmuls, no extra elementwise pass
        y = y @ torch.baddbmm(two_eye, a3, y, alpha=-1)
    return y.reshape(a.shape)


class NewtonSchulzPinv(torch.autograd.Function):
    """Moore-Penrose inverse by Newton-Schulz (Eq. 10, Alg. 2) with the backward of Eq. 12.

    The forward runs the ``T`` iterations without recording them (the paper's forward-only
    iteration, Sec. 3.2); the backward treats the result ``Y`` as ``A^{-1}`` and returns
    ``-Y^T grad Y^T`` (Eq. 12), so only Y is saved instead of T intermediate products.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, num_iters: int, init: str, ridge: float) -> torch.Tensor:
        y = _newton_schulz_iterations(a, num_iters, init, ridge)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        y, = ctx.saved_tensors
        yt = y.transpose(-1, -2)
        return -(yt @ grad @ yt), None, None, None


def newton_schulz_pinv(a: torch.Tensor, num_iters: int = 20, init: str = 'safe',
                       ridge: float = 0.0, custom_backward: bool = True) -> torch.Tensor:
    """``A^+`` of a batch of square matrices by ``num_iters`` Newton-Schulz steps (Eq. 10).

    Args:
        a: (..., m, m) matrices (SOFT's bottleneck matrices are symmetric PSD).
        num_iters: iterations T; 20 follows Fig. 5 / Sec. 4.4 ("converges within 20").
        init: ``'safe'`` (default), ``'paper'`` or ``'scaled'``, see :func:`newton_init_alpha`.
        ridge: invert ``P = A + ridge I`` instead (0 = paper; the authors' plain-SOFT code
            uses 0.01).  ``alpha`` is that of ``P``, the matrix iterated on
            (``newton_init_alpha(a, init, ridge)``): from ``A`` alone the step can exceed
            ``2 / sigma_max(P)^2`` and the iteration diverge (``'paper'`` at any ridge,
            ``'scaled'`` at 0.1, for A close to I).
        custom_backward: run as :class:`NewtonSchulzPinv` (the backward of Eq. 12); False:
            the iterations as plain ops, the same forward, with autograd through every
            iterate (what a tracer that cannot take a custom Function apart needs).

    Returns:
        (..., m, m) approximation of ``A^+`` in ``a``'s dtype, computed in float32 (float64
        stays float64) with autocast disabled.  Differentiable through Eq. 12.
    """
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f'newton_schulz_pinv expects (..., m, m) matrices, got shape '
                         f'{tuple(a.shape)}')
    if not a.is_floating_point():
        raise TypeError(f'newton_schulz_pinv expects a floating-point tensor, got {a.dtype}')
    if not isinstance(num_iters, int) or isinstance(num_iters, bool) or num_iters < 0:
        raise ValueError(f'num_iters must be a non-negative int, got {num_iters!r}')
    if init not in NEWTON_INITS:
        raise ValueError(f'init must be one of {NEWTON_INITS}, got {init!r}')
    if not ridge >= 0:
        raise ValueError(f'ridge must be >= 0, got {ridge!r}')
    with Float32Island(a) as island:
        form = NewtonSchulzPinv.apply if custom_backward else _newton_schulz_iterations
        out = form(island.cast(a), num_iters, init, float(ridge))
    return island.back(out)


def newton_schulz_reference(a: torch.Tensor, alpha: Union[float, torch.Tensor],
                            num_iters: int = 20, ridge: float = 0.0) -> torch.Tensor:
    """Eq. 10 / Alg. 2 as written: ``A_0 = alpha P``, ``A_{k+1} = 2 A_k - A_k P A_k`` with
    ``P = A + ridge I``, in ``a``'s dtype and with autograd through every iterate.

    Args:
        a: (..., m, m) matrices.
        alpha: the step, a number or one per matrix (shape (...));
            :func:`newton_schulz_pinv` uses ``newton_init_alpha(a, init, ridge)``, the step
            of ``P``.
    """
    p = a + ridge * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    y = torch.as_tensor(alpha, dtype=a.dtype, device=a.device)[..., None, None] * p
    for _ in range(num_iters):
        y = 2 * y - y @ p @ y
    return y


def cholesky_pinv_solve(a: torch.Tensor, rhs: torch.Tensor, ridge: float = 0.0,
                        jitter: float = CHOLESKY_JITTER) -> torch.Tensor:
    """A ridge-regularised solve ``(A + lambda I)^{-1} rhs`` for symmetric PSD ``A`` through a
    Cholesky factorisation, ``lambda = ridge + jitter * tr(A) / m`` per matrix (raised on a
    failed factorisation, below): it stands in for ``A^+ rhs`` and differs from it by the
    ridge's bias (and from Eq. 10's iterate by that iteration's own error).

    Not in the paper: a cheaper stand-in for ``A^+`` than Eq. 10 for large m.  Factoring
    costs ``m^3 / 3`` flops and the two triangular solves ``2 m^2 k`` (``rhs`` is (m, k)),
    against ``2 T m^3`` for T Newton-Schulz steps; the inverse is never formed.  The backward
    is autograd through ``torch.linalg.cholesky_ex`` and ``torch.cholesky_solve`` (exact for
    the ridged system, no Eq. 12 needed).

    The jitter keeps the float32 factorisation of a near-singular Gaussian-kernel matrix
    (close or duplicate landmarks) from failing.  The ridge scales the inverse of an
    eigenvalue ``sigma`` of A by ``sigma / (sigma + lambda)``.  In SOFT's ``P A^+ P^T`` the
    eigenvector ``u`` enters with weight ``|P u|^2 / sigma``, bounded because ``P`` is a
    block of the same PSD kernel (``|P u|^2 <= ||K(Q, Q)|| sigma``), so a component changes
    by at most a factor ``lambda / (sigma + lambda)`` of a bounded term, whatever sigma;
    components along the null space of a singular A do not reach the output.  Measured on SOFT
    outputs ``P N(A^+) P^T V`` (float32, jitter 1e-6) against ``torch.linalg.pinv`` in
    float64, m = 49 to 1024 landmarks among smooth token maps, d = 32:

    * cond(A) <= 150: relative error 4e-7 to 5e-6, as 20 Newton-Schulz steps (5e-7 to 6e-6);
    * close landmarks, cond(A) 2e3 to 2e6: 1e-6 to 7e-4, where 20 Newton steps are 8e-2 to
      0.8 away (unconverged on the small eigenvalues: ``sigma y_T = 1 - (1 - alpha
      sigma^2)^(2^T)``, so the default solver differs from ``A^+`` there and the two
      options give different outputs);
    * duplicate landmarks (A singular), m = 1024: 1.4e-6 to 6e-5;
    * the 11 SOFT layers of a randomly initialised SOFT-small at 512^2 (m = 256, cond(A) up
      to 2e4): 4e-7 to 1.6e-6 (Newton: 6e-7 to 4e-2).

    A jitter of 1e-5 or 1e-4 costs a decade of accuracy each; 1e-7 fails to factorise
    (and retries) more often in float32.
    If a factorisation still fails (float32 rounding can make a near-singular A indefinite),
    that matrix's ``lambda`` is raised 100-fold, at most :data:`CHOLESKY_RETRIES` times (up to
    10^6 times the base, ``lambda = tr(A) / m`` at the default jitter: then far from
    ``A^+``); a warning names the final ``lambda`` once per process, and again only when a
    later call needs a larger one (:func:`_log_raised_ridge`).  A matrix that fails even then
    (not PSD, inf or NaN) raises ``ValueError`` instead of returning NaN.

    Args:
        a: (..., m, m) symmetric positive semi-definite matrices.
        rhs: (..., m, k) right-hand sides, batch dimensions broadcastable with ``a``'s.
        ridge: a fixed ``lambda`` on top (the ``ridge`` of :func:`newton_schulz_pinv`: the
            authors' plain-SOFT code inverts ``A + 0.01 I``).
        jitter: the relative ridge, see :data:`CHOLESKY_JITTER`.

    Returns:
        (..., m, k) in ``rhs``'s dtype, computed in float32 (float64 stays float64) with
        autocast disabled.
    """
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f'cholesky_pinv_solve expects (..., m, m) matrices, got shape '
                         f'{tuple(a.shape)}')
    if rhs.dim() < 2 or rhs.shape[-2] != a.shape[-1]:
        raise ValueError(f'cholesky_pinv_solve: rhs must be (..., {a.shape[-1]}, k), got '
                         f'shape {tuple(rhs.shape)}')
    if not ridge >= 0 or not jitter > 0:
        raise ValueError(f'cholesky_pinv_solve needs ridge >= 0 and jitter > 0, got ridge '
                         f'{ridge!r} and jitter {jitter!r}')
    with Float32Island(rhs, a) as island:
        a, rhs = island.cast(a, rhs)
        factor, _ = ridged_cholesky(a, ridge, jitter)
        out = torch.cholesky_solve(rhs, factor)
    return island.back(out)


def ridged_cholesky(a: torch.Tensor, ridge: float = 0.0, jitter: float = CHOLESKY_JITTER):
    """Lower Cholesky factor of ``A + lambda I`` (see :func:`cholesky_pinv_solve`) and the
    ``lambda`` (..., 1) each matrix was factorised with (its base value, or raised).  The
    ridge goes onto the diagonal of a copy of A (no batch of identity matrices: at m = 1024
    forming ``A + lambda I`` took 3x as long as the copy)."""
    scale = a.diagonal(dim1=-2, dim2=-1).mean(-1, keepdim=True)          # tr(A) / m
    lam = ridge + jitter * scale                                          # (..., 1)
    shifted = a.clone()
    diagonal = shifted.diagonal(dim1=-2, dim2=-1)
    diagonal.add_(lam)
    base, first_failed = lam, 0
    for raises in range(CHOLESKY_RETRIES):
        factor, info = torch.linalg.cholesky_ex(shifted)
        if info.is_meta or is_fake(info):  # shapes only (flop counting, meta builds)
            return factor, lam
        failed = (info > 0)[..., None]
        if not failed.any():  # one host sync per call; the retries are the rare case
            _log_raised_ridge(raises, first_failed, info.numel(), jitter, lam, base)
            return factor, lam
        first_failed = first_failed or int(failed.sum())
        diagonal.add_(torch.where(failed, lam * 99, 0))                   # lam -> 100 lam
        lam = torch.where(failed, lam * 100, lam)
    factor, info = torch.linalg.cholesky_ex(shifted)
    if (info > 0).any():
        raise ValueError(f'cholesky_pinv_solve: {int((info > 0).sum())} of the matrices are '
                         f'not positive definite even with a ridge of '
                         f'{jitter * 100 ** CHOLESKY_RETRIES:g} tr(A) / m: they are not '
                         f'symmetric positive semi-definite or hold inf / NaN')
    _log_raised_ridge(CHOLESKY_RETRIES, first_failed, info.numel(), jitter, lam, base)
    return factor, lam


#: the most ridge raises a warning has named in this process (:func:`_log_raised_ridge`)
_RIDGE_RAISES_LOGGED = 0


def _log_raised_ridge(raises: int, failed: int, matrices: int, jitter: float,
                      lam: torch.Tensor, base: torch.Tensor) -> None:
    """Warn that ``failed`` of ``matrices`` factorisations failed at the ``base`` ridge and were
    solved with ``lam``, raised up to ``100^raises``-fold: once per process, and again only for
    more raises than already logged, not on every forward.  Nothing inside a traced graph (a
    log call is no graph op)."""
    global _RIDGE_RAISES_LOGGED
    if raises <= _RIDGE_RAISES_LOGGED or traced():
        return
    _RIDGE_RAISES_LOGGED = raises
    current_logger(__name__).warning(
        f'cholesky_pinv_solve: the Cholesky factorisation of {failed} of {matrices} matrices '
        f'failed at the base ridge lambda = ridge + {jitter:g} tr(A) / m, so their lambda was '
        f'raised 100-fold up to {raises} time(s), to at most '
        f'{float(lam[lam > base].max()):.3g} ({100 ** raises:g}x the base): they are solved '
        f'with (A + lambda I)^-1 at that lambda, further from A^+. Logged once per process, '
        f'again only if a later call needs a larger ridge.')


def symmetric_normalize(a_pinv: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """SOFT++'s normalised bottleneck ``D^{-1/2} A^+ D^{-1/2}``, ``D = diag(A 1_m)`` (Eq. 17).

    The normalisation wraps the pseudo-inverse, not A.  For a Gaussian-kernel A the diagonal
    is 1 and entries are >= 0, so every row sum is >= 1: no epsilon is needed and
    ``||D^{-1/2}||_2 <= 1``, hence ``||D^{-1/2} A^+ D^{-1/2}||_2 <= ||A^+||_2`` (Prop. 6).

    Args:
        a_pinv: (..., m, m) pseudo-inverse of ``a``.
        a: (..., m, m) bottleneck matrix with positive row sums.
    """
    dinv = a.sum(-1).rsqrt()
    return dinv[..., :, None] * a_pinv * dinv[..., None, :]


def check_attention_args(q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
                         ridge: float, pinv: str) -> None:
    """The argument checks of :func:`soft_attention` (shared with its fast form)."""
    if q.dim() != 4 or landmarks.dim() != 4 or v.dim() != 4:
        raise ValueError(f'soft_attention expects 4-D (B, h, n, d) tensors, got q '
                         f'{tuple(q.shape)}, landmarks {tuple(landmarks.shape)}, v '
                         f'{tuple(v.shape)}')
    if v.shape[-2] != q.shape[-2]:
        raise ValueError(f'soft_attention: q has {q.shape[-2]} tokens but v has '
                         f'{v.shape[-2]}')
    if ridge < 0:
        raise ValueError(f'ridge must be >= 0, got {ridge!r}')
    if pinv not in PINV_SOLVERS:
        raise ValueError(f'pinv must be one of {PINV_SOLVERS}, got {pinv!r}')


def landmark_kernel_rows(q: torch.Tensor, landmarks: torch.Tensor, keep: Optional[torch.Tensor],
                         rows: Optional[torch.Tensor], kernel=None) -> torch.Tensor:
    """``P = exp(Q - K~)`` (B, h, tokens, m), the columns of unused landmarks (``keep``, (B, 1,
    m) floats) and the rows of padded tokens (``rows``, (B, 1, tokens, 1)) zeroed; ``kernel``:
    the Gaussian kernel's form (default :func:`gaussian_kernel`)."""
    p = (kernel or gaussian_kernel)(q, landmarks, denom=2.0)
    if keep is not None:
        p = p * keep[..., None, :]
    if rows is not None:
        p = p * rows
    return p


def nystrom_middle(landmarks: torch.Tensor, keep: Optional[torch.Tensor], pv: torch.Tensor,
                   num_iters: int, init: str, sym_norm: bool, ridge: float, pinv: str,
                   kernel=None, custom_backward: bool = True) -> torch.Tensor:
    """``N(A^+) (P^T V)`` (B, h, m, d_v) for ``A = exp(Q~ - K~)`` (Eq. 9; ``N`` Eq. 17 when
    ``sym_norm``): Eq. 10 (``pinv='newton'``) or, for ``pinv='cholesky'``, a ridge-regularised
    solve with ``(A + lambda I)^{-1}`` in place of ``A^+`` (:func:`cholesky_pinv_solve`).
    Unused landmarks (``keep`` 0) get an identity block in A, so ``A^+`` on the used ones is
    that of the smaller problem.  ``kernel``: the Gaussian kernel's form (default
    :func:`gaussian_kernel`); ``custom_backward``: that of :func:`newton_schulz_pinv`."""
    a = (kernel or gaussian_kernel)(landmarks, landmarks, denom=2.0)    # (B, h, m, m)
    if keep is not None:
        # diag(1 - keep) as a product with I: ONNX opset 11 has no diag_embed
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a * (keep[..., :, None] * keep[..., None, :]) + (1 - keep)[..., None] * eye
    if pinv == 'cholesky':
        dinv = a.sum(-1, keepdim=True).rsqrt() if sym_norm else 1.0
        return dinv * cholesky_pinv_solve(a, dinv * pv, ridge)
    a_pinv = newton_schulz_pinv(a, num_iters, init, ridge, custom_backward)
    if sym_norm:
        a_pinv = symmetric_normalize(a_pinv, a)
    return a_pinv @ pv


def soft_attention(q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
                   num_iters: int = 20, init: str = 'safe', sym_norm: bool = True,
                   ridge: float = 0.0, valid: Optional[torch.Tensor] = None,
                   landmark_valid: Optional[torch.Tensor] = None,
                   pinv: str = 'newton') -> torch.Tensor:
    """SOFT / SOFT++ attention output ``S^ V`` without forming the n x n matrix ``S^``.

    ``S^ = exp(Q - K~) N(A^+) exp(Q~ - K)`` (Eq. 9; Eq. 17 when ``sym_norm``) with ``K = Q``,
    ``K~ = Q~`` = ``landmarks`` and ``A = exp(Q~ - K~)``.  Because ``exp(Q~ - K) =
    exp(Q - K~)^T =: P^T``, it is evaluated right to left as ``P (N(A^+) (P^T V))``:
    O(n m d + m^2 d + T m^3) time and O(n m) memory.

    Args:
        q: (B, h, n, d) tokens in kernel space, i.e. already multiplied by ``d^{-1/4}`` so
            that ``exp(-||.||^2 / 2)`` is Eq. 5 with ``d_e = d`` (as in the authors' code).
        landmarks: (B, h, m, d) bottleneck tokens ``Q~`` in the same space.
        v: (B, h, n, d_v) values.
        num_iters, init: Newton-Schulz settings (:func:`newton_schulz_pinv`).
        sym_norm: SOFT++'s normalisation (Eq. 17); ``False`` gives plain SOFT (Eq. 9).
        ridge: invert ``A + ridge I`` (:func:`newton_schulz_pinv`; 0 = paper, the authors'
            plain-SOFT code uses 0.01); Eq. 17's D is taken from A.
        valid: optional (B, n) bool mask of the real tokens of a padded batch: padded
            tokens leave ``P^T V`` (their rows of P are zero).
        landmark_valid: optional (B, m) bool mask of the landmarks to use: the others get
            zero columns in P and an identity block in A, so ``A^+`` (and Eq. 17's row sums)
            on the used landmarks are exactly those of the smaller problem.
        pinv: ``'newton'`` (default, Eq. 10 as above) or ``'cholesky'``: a ridge-regularised
            solve in place of ``A^+``, ``D^{-1/2} (A + lambda I)^{-1} D^{-1/2} P^T V`` by
            :func:`cholesky_pinv_solve` (``num_iters`` and ``init`` unused), O(m^3 / 3)
            instead of O(40 m^3).

    Batch padding is not in the paper; with both masks the output on the valid tokens equals
    that of the un-padded image.

    Returns:
        (B, h, n, d_v) in ``q``'s dtype; computed in float32 with autocast disabled.  The
        backbones run the fast form :func:`mmlinattn.kernels.soft_attention` (the same values
        up to rounding).
    """
    check_attention_args(q, landmarks, v, ridge, pinv)
    with Float32Island(q) as island:
        q32, lm32, v32 = island.cast(q, landmarks, v)
        keep = None if landmark_valid is None else island.cast(landmark_valid[:, None])
        rows = None if valid is None else island.cast(valid[:, None, :, None])
        p = landmark_kernel_rows(q32, lm32, keep, rows)                # P: (B, h, n, m)
        pv = p.transpose(-1, -2) @ v32                                  # P^T V: (B, h, m, d_v)
        out = p @ nystrom_middle(lm32, keep, pv, num_iters, init, sym_norm, ridge, pinv)
    return island.back(out)


def soft_attention_reference(q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
                             sym_norm: bool = True) -> torch.Tensor:
    """``S^ V`` with the n x n matrix ``S^`` formed explicitly (Eq. 9; Eq. 17 when
    ``sym_norm``) and ``A^+`` from ``torch.linalg.pinv`` (SVD): the dense counterpart of
    :func:`soft_attention` without masks, in the inputs' dtype.  O(n^2) memory.

    Args:
        q, landmarks, v: as in :func:`soft_attention` (kernel space, bandwidth 2).
    """
    p = gaussian_kernel_reference(q, landmarks, denom=2.0)        # exp(Q - K~): (n, m)
    a = gaussian_kernel_reference(landmarks, landmarks, denom=2.0)
    middle = torch.linalg.pinv(a)
    if sym_norm:
        dinv = torch.diag_embed(a.sum(-1) ** -0.5)
        middle = dinv @ middle @ dinv
    s_hat = p @ middle @ p.transpose(-1, -2)                    # (n, n)
    return s_hat @ v
