"""Fast BLAS on Linux.

The Linux ``mlx[cpu]`` wheel links a bundled reference BLAS (``mlx_cpu.libs/libblas-*.so``) that
runs a 1024x1024 float32 matmul at about 6 GFLOPS on our 2-core machines. Debian's
``libopenblas0-pthread`` runs the same matmul at about 200 GFLOPS. Loading OpenBLAS with
``RTLD_GLOBAL`` *before* ``mlx.core`` is imported puts its ``cblas_*``/``sgemm_`` symbols ahead of the
bundled library in the dynamic linker's global scope, so MLX calls OpenBLAS without any
``LD_PRELOAD`` (measured in ``mlx-sdm doctor`` and ``tests/test_blas.py``).

``mlx_sdm/__init__.py`` calls :func:`preload` first thing, so every entry point gets the fast
path. Set ``MLX_SDM_BLAS=reference`` to opt out (for A/B measurements).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: Where Debian and Ubuntu put OpenBLAS (``apt-get install libopenblas0-pthread``).
OPENBLAS_CANDIDATES: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
ENV_SWITCH = "MLX_SDM_BLAS"


@dataclass
class BlasState:
    """What :func:`preload` did, for ``mlx-sdm doctor``."""

    platform: str
    loaded_path: str | None = None
    reason: str = ""

    @property
    def fast(self) -> bool:
        return self.loaded_path is not None


_STATE: BlasState | None = None


def find_openblas() -> str | None:
    """Return the first OpenBLAS shared library present on this machine, or None."""
    override = os.environ.get("MLX_SDM_OPENBLAS")
    if override:
        return override if Path(override).exists() else None
    for candidate in OPENBLAS_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    return None


def preload() -> BlasState:
    """Load OpenBLAS globally before MLX, on Linux, when it is installed. Idempotent."""
    global _STATE
    if _STATE is not None:
        return _STATE
    if not sys.platform.startswith("linux"):
        _STATE = BlasState(sys.platform, reason="not Linux: MLX uses Accelerate/Metal")
        return _STATE
    if os.environ.get(ENV_SWITCH, "").lower() == "reference":
        _STATE = BlasState(sys.platform, reason=f"{ENV_SWITCH}=reference: bundled BLAS kept")
        return _STATE
    if "mlx.core" in sys.modules:
        _STATE = BlasState(sys.platform, reason="mlx.core was imported before mlx_sdm: too late to swap BLAS")
        return _STATE
    path = find_openblas()
    if path is None:
        _STATE = BlasState(
            sys.platform,
            reason="OpenBLAS not found: run `sudo apt-get install libopenblas0-pthread` (about 30x faster matmul)",
        )
        return _STATE
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:  # a broken install must not stop the program
        _STATE = BlasState(sys.platform, reason=f"could not load {path}: {exc}")
        return _STATE
    _STATE = BlasState(sys.platform, loaded_path=path, reason="OpenBLAS loaded ahead of the bundled BLAS")
    return _STATE


def state() -> BlasState:
    return preload() if _STATE is None else _STATE


def blas_libraries_mapped() -> list[str]:
    """BLAS libraries mapped into this process (Linux: from /proc/self/maps)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return []
    seen: list[str] = []
    for line in maps.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and ("blas" in parts[-1].lower() or "lapack" in parts[-1].lower()):
            if parts[-1] not in seen:
                seen.append(parts[-1])
    return seen


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def global_symbol_library(symbol: str = "cblas_sgemm") -> str | None:
    """The file of the library whose ``symbol`` the dynamic linker's global scope resolves first (Linux
    ``dlsym(RTLD_DEFAULT)`` + ``dladdr``), or None when no library in that scope defines it.

    MLX's own references to ``cblas_sgemm`` bind through the global scope before its bundled BLAS, so
    this names the library MLX's float32 matmul calls: a fact a test can check, where a speed is not."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    try:
        address = ctypes.cast(getattr(libc, symbol), ctypes.c_void_p).value
    except AttributeError:  # no library in the global scope defines it
        return None
    if not address:
        return None
    info = _DlInfo()
    if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode()


def measure_gflops(n: int = 1024, repeats: int = 8) -> float:
    """Measured float32 n x n matmul throughput on the CPU device, in GFLOPS."""
    import mlx.core as mx

    a = mx.random.normal((n, n))
    b = mx.random.normal((n, n))
    mx.eval(a, b)
    with mx.stream(mx.cpu):
        for _ in range(2):
            mx.eval(a @ b)
        start = time.perf_counter()
        for _ in range(repeats):
            mx.eval(a @ b)
        elapsed = (time.perf_counter() - start) / repeats
    return 2.0 * n**3 / elapsed / 1e9
