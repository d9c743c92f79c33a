"""Float tolerances that follow from the computation, not from what one machine happened to produce.

Two evaluations of the same transformer output that differ only in the ORDER of their floating-point
reductions (a KV-cached decode vs a full recompute, a padded batch vs one sequence, one device's
kernels vs another's) differ by rounding alone. Each reduction of length ``K`` computed with unit
roundoff ``u`` has a relative error of at most about ``sqrt(K) * u`` (the probabilistic bound of
Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019;
the worst case ``K * u`` is never approached by independent rounding errors), and to first order the
errors of ``S`` sequential reductions add. Both evaluations carry such an error, so

    |a - b|  <=  2 * S * sqrt(K) * u * scale,        scale = max |output|,

with ``S = REDUCTIONS_PER_LAYER * layers + 1`` (per layer: RMSNorm, q/k/v projections, scores, the
weighted sum over positions, output projection, RMSNorm, gate/up, down; then the final norm) and ``K``
the longest reduction (hidden width, MLP width or sequence length). ``u`` is that of the matmuls the
device really runs: float32 (2^-24) on the CPU and Metal, TF32 (2^-11) on a CUDA GPU unless
``MLX_ENABLE_TF32=0`` (tests/conftest.py sets it to 0 so the suite checks float32 semantics everywhere).
"""

from __future__ import annotations

import math
import os

import mlx.core as mx

FLOAT32_UNIT_ROUNDOFF = 2.0**-24
TF32_UNIT_ROUNDOFF = 2.0**-11  # 10 explicit mantissa bits
REDUCTIONS_PER_LAYER = 9

#: Values computed from float32 logits or float32 MLX/BLAS products (a softmax or SDM output, a p_lower,
#: a probability), compared with a stored fixture, another implementation, or what another machine wrote.
#: Another CPU's kernels round the same float32 products differently (FMA or not, AVX-512 or AVX2
#: reduction trees, a vectorised exp), so the logits of a small network (|z| of order 1, reductions of a
#: few dozen terms) differ by a few float32 ulps, and a probability computed from them by about as much:
#: a softmax moves by at most 2 * max|dz| (max|dz| / 2 with two classes). 16 u (about 9.5e-7), used as
#: both rtol and atol, leaves room for about eight such roundings on each side. Measured:
#: 2.7e-8, one ulp of a logit of 0.64, between an Intel Xeon and the machine that wrote the fixture.
#: Discrete outputs (predictions, q, eCDF quantiles, counts, admitted) are compared exactly instead.
FLOAT32_TOLERANCE = 16 * FLOAT32_UNIT_ROUNDOFF


def matmul_unit_roundoff() -> float:
    """Unit roundoff of float32 matmuls on the default device."""
    cuda = getattr(mx, "cuda", None)
    on_cuda_gpu = mx.default_device() == mx.gpu and cuda is not None and cuda.is_available()
    if on_cuda_gpu and os.environ.get("MLX_ENABLE_TF32", "1") != "0":
        return TF32_UNIT_ROUNDOFF
    return FLOAT32_UNIT_ROUNDOFF


def reordered_forward_atol(scale: float, *, width: int, layers: int) -> float:
    """Bound on |a - b| for two evaluations of a ``layers``-deep transformer output of magnitude
    ``scale`` whose longest reduction has length ``width`` (see the module docstring)."""
    reductions = REDUCTIONS_PER_LAYER * layers + 1
    return 2.0 * reductions * math.sqrt(width) * matmul_unit_roundoff() * float(scale)


def model_width(args, sequence_length: int = 0) -> int:
    """The longest reduction in an mlx-lm model's forward pass (hidden, MLP or sequence length)."""
    return max(int(args.hidden_size), int(getattr(args, "intermediate_size", 0) or 0), int(sequence_length))
