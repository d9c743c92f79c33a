import subprocess
import sys

import pytest

from mlx_sdm import blas


def _matmul_library(env_extra: dict) -> str:
    """In a fresh interpreter (the preload happens at import): the library MLX's float32 matmul binds to."""
    import os

    env = {**os.environ, **env_extra}
    code = "import mlx_sdm, mlx_sdm.blas as b, mlx.core as mx; mx.eval(mx.ones((4, 4)) @ mx.ones((4, 4))); print(b.global_symbol_library())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_fast_path_is_default_and_reference_opts_out():
    """Which BLAS MLX calls is a fact checked here; how fast it is belongs to `mlx-sdm doctor` and
    scripts/bench (a timed assertion fails on a busy machine)."""
    if blas.find_openblas() is None:
        pytest.skip("OpenBLAS not installed (scripts/setup.sh installs it on Linux)")
    assert blas.state().fast, blas.state().reason
    assert any("openblas" in p for p in blas.blas_libraries_mapped())
    assert "openblas" in _matmul_library({})
    assert "openblas" not in _matmul_library({"MLX_SDM_BLAS": "reference"})


def test_preload_too_late_is_reported(tmp_path):
    code = "import mlx.core, mlx_sdm.blas as b; print(b.state().fast, b.state().reason)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False") and "too late" in out


def test_doctor_reports_fields():
    from mlx_sdm.commands import doctor

    info = doctor.collect(256)
    for key in ("backend", "default_device", "blas", "gflops", "embedded_model"):
        assert key in info
    assert info["gflops"] > 0


def test_doctor_on_the_cpu_measures_blas_and_reports_no_gpu(capsys):
    from mlx_sdm.commands import doctor

    info = doctor.collect(128)
    if info["backend"] != "cpu":
        pytest.skip("a GPU backend: doctor measures the GPU instead")
    assert info["gpu"] is None and info["gflops"] > 0


def test_doctor_reads_the_gpu_from_nvidia_smi():
    from mlx_sdm.commands import doctor

    gpu = doctor.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 81559, 580.65.06")
    assert gpu == {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6, "driver": "580.65.06"}


def test_doctor_gpu_matmul_figure_on_a_gpu_backend():
    import mlx.core as mx

    from mlx_sdm.commands import doctor

    if not (mx.metal.is_available() or mx.cuda.is_available()):
        pytest.skip("no GPU backend on this machine")
    info = doctor.collect(128)
    assert info["gflops"] is None and info["gpu"]["name"] and info["gpu"]["tflops_bfloat16"] > 0
