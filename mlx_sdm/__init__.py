"""mlx-sdm: private, verified LLM chat on MLX.

Importing the package first puts the fast BLAS in place (see :mod:`mlx_sdm.blas`), before any
submodule imports ``mlx.core``.
"""

from mlx_sdm import blas as _blas

_blas.preload()

__version__ = "0.1.0"
