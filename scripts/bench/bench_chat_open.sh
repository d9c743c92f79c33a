#!/usr/bin/env bash
# How long the real chat (`mlx-sdm chat`, embedded SmolLM2, the default verifier and head) takes to open,
# measured in tmux from the moment the command starts:
#   first draw: the chat screen is on the terminal (its input's placeholder shows);
#   typed:      a word typed right after the first draw shows in the input (the UI answers keys while the
#               model loads);
#   ready:      the model, verifier and head are loaded (the status line names the verifier).
#
#   scripts/bench/bench_chat_open.sh [RUNS]        # default 3 runs; prints one line per run
#
# Environment: PYTHON (default .venv/bin/python), CHAT_ARGS (extra `mlx-sdm chat` arguments).
set -u
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
PYTHON=${PYTHON:-.venv/bin/python}
CHAT_ARGS=${CHAT_ARGS:-}
SESSION="mlx-sdm-open-$$"
command -v tmux >/dev/null || { echo "bench: tmux is not installed" >&2; exit 2; }
now() { date +%s.%N; }
pane() { tmux capture-pane -p -t "$SESSION" 2>/dev/null; }
trap 'tmux kill-session -t "$SESSION" 2>/dev/null' EXIT
for run in $(seq "$RUNS"); do
    store=$(mktemp -d /tmp/mlx-sdm-open.XXXXXX)
    start=$(now)
    tmux new-session -d -s "$SESSION" -x 120 -y 40 \
        "PYTHONPATH=$PWD $PYTHON -m mlx_sdm chat --db $store/chat.db $CHAT_ARGS"
    drawn="" typed="" ready=""
    deadline=$(echo "$start + 300" | bc)
    while (( $(echo "$(now) < $deadline" | bc) )); do
        screen=$(pane)
        if [ -z "$drawn" ] && echo "$screen" | grep -q "Ask something"; then
            drawn=$(now); tmux send-keys -t "$SESSION" -l "zqzq"
        fi
        if [ -n "$drawn" ] && [ -z "$typed" ] && echo "$screen" | grep -q "zqzq"; then typed=$(now); fi
        if [ -n "$typed" ] && echo "$screen" | grep -q "· verifier "; then ready=$(now); break; fi
        sleep 0.05
    done
    printf 'bench: run %s: first draw %.2f s, typed text shown %.2f s, ready %.2f s\n' "$run" \
        "$(echo "${drawn:-$deadline} - $start" | bc)" "$(echo "${typed:-$deadline} - $start" | bc)" \
        "$(echo "${ready:-$deadline} - $start" | bc)"
    pane > "${BENCH_SCREEN:-/dev/null}"  # the screen when ready (BENCH_SCREEN=FILE keeps it)
    tmux kill-session -t "$SESSION" 2>/dev/null
    rm -rf "$store"
    sleep 1
done
