#!/usr/bin/env bash
# Set up everything (scripts/setup.sh --test) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest "$@"
