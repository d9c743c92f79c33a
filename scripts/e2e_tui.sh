#!/usr/bin/env bash
# End-to-end drive of the real chat UI with the embedded model, in tmux.
#
#   scripts/e2e_tui.sh [PROMPT]
#
# Starts `mlx-sdm chat` (the Textual UI; embedded SmolLM2 and its default verifier) on a fresh
# store in a detached 120x40 tmux session, waits for the model to load, types PROMPT, presses
# Enter, and polls the pane every 20 ms to time the first streamed token on screen (the issue's
# "first token within 2 s of Enter"). Then it waits for the verdict badge, expands the evidence,
# exports the session, opens the review queue, marks the answer acceptable (the support set grows
# by one) and undoes it, opens the help screen, printing each screen it saw, and quits with
# ctrl+q. Exit status 0 when every step was seen, 1 otherwise.
#
# Environment: PYTHON (default .venv/bin/python), E2E_DIR (default a new temp dir; the store goes
# there), LOAD_TIMEOUT (s, default 240), ANSWER_TIMEOUT (s, default 240),
# CHAT_ARGS (extra arguments for `mlx-sdm chat`, default "--max-tokens 64").
# When the session monitor pauses the turn (HIGH), the script shows the reflection and the
# guidance prompt, answers with GUIDANCE and waits for the resumed answer.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PROMPT=${1:-"Paris is the capital of France. Is this claim true or false?"}
GUIDANCE=${GUIDANCE:-"Answer in one short sentence."}
E2E_DIR=${E2E_DIR:-$(mktemp -d /tmp/mlx-sdm-e2e.XXXXXX)}
LOAD_TIMEOUT=${LOAD_TIMEOUT:-240}
ANSWER_TIMEOUT=${ANSWER_TIMEOUT:-240}
CHAT_ARGS=${CHAT_ARGS:-"--max-tokens 64"}
SESSION="mlx-sdm-e2e-$$"
STATUS=0

command -v tmux >/dev/null || { echo "e2e: tmux is not installed" >&2; exit 2; }
now() { date +%s.%N; }
pane() { tmux capture-pane -p -t "$SESSION"; }
show() { echo "---------------- $1 ----------------"; pane; echo; }
wait_for() {  # wait_for REGEX TIMEOUT_S -> 0 when the pane matches within the timeout
    local deadline; deadline=$(echo "$(now) + $2" | bc)
    while (( $(echo "$(now) < $deadline" | bc) )); do
        pane | grep -Eq "$1" && return 0
        sleep 0.1
    done
    return 1
}
step() {  # step NAME REGEX TIMEOUT
    if wait_for "$2" "$3"; then echo "e2e: ok   $1"; else echo "e2e: FAIL $1 (no /$2/ within $3 s)"; STATUS=1; fi
}
cleanup() { tmux kill-session -t "$SESSION" 2>/dev/null; }
trap cleanup EXIT

echo "e2e: store and log in $E2E_DIR"
tmux new-session -d -s "$SESSION" -x 120 -y 40 \
    "$PYTHON -m mlx_sdm chat --db $E2E_DIR/chat.db $CHAT_ARGS; echo EXITED \$?; sleep 30"

t_start=$(now)
step "model loaded" "model [^·]+ · verifier" "$LOAD_TIMEOUT"
t_loaded=$(now)
printf 'e2e: load time %.1f s\n' "$(echo "$t_loaded - $t_start" | bc)"
show "chat, ready"

tmux send-keys -t "$SESSION" -l "$PROMPT"
sleep 0.3
t_enter=$(now)
tmux send-keys -t "$SESSION" Enter
# First token: a text line appears under the "assistant · turn 1" title before the badge line.
first=""
deadline=$(echo "$t_enter + $ANSWER_TIMEOUT" | bc)
while (( $(echo "$(now) < $deadline" | bc) )); do
    if pane | awk '/assistant · turn 1/{f=1; next} f && /verifying|verified|not verified|out of scope|unverifiable|stopped/{exit} f && /[[:alnum:]]/{found=1; exit} END{exit !found}'; then
        first=$(now); break
    fi
    sleep 0.02
done
if [ -n "$first" ]; then
    printf 'e2e: first token on screen %.2f s after Enter\n' "$(echo "$first - $t_enter" | bc)"
else
    echo "e2e: FAIL no streamed token within $ANSWER_TIMEOUT s"; STATUS=1
fi
step "verdict badge" "(✔ verified|✘ not verified|○ out of scope|\? unverifiable)" "$ANSWER_TIMEOUT"
t_done=$(now)
printf 'e2e: answer + verdict %.1f s after Enter\n' "$(echo "$t_done - $t_enter" | bc)"
# The turn is over when the status line stops saying "generating" (a HIGH pause opens the guidance prompt).
resumed=0
deadline=$(echo "$(now) + $ANSWER_TIMEOUT" | bc)
while (( $(echo "$(now) < $deadline" | bc) )); do
    screen=$(pane)
    if echo "$screen" | grep -q "Paused: " && [ $resumed -eq 0 ]; then
        echo "e2e: ok   HIGH pause: reflection shown, guidance asked"
        show "escalation (HIGH)"
        tmux send-keys -t "$SESSION" -l "$GUIDANCE"
        sleep 0.3
        tmux send-keys -t "$SESSION" Enter
        resumed=1
        sleep 1
        continue
    fi
    if echo "$screen" | grep -q "Paused: "; then  # paused again after the resume: leave it paused
        echo "e2e: paused again after the resume; escape leaves the turn paused"
        tmux send-keys -t "$SESSION" Escape
        sleep 0.5
        break
    fi
    if ! echo "$screen" | grep -q "generating…\|stopping…"; then break; fi
    sleep 0.2
done
printf 'e2e: turn over %.1f s after Enter%s\n' "$(echo "$(now) - $t_enter" | bc)" "$([ $resumed -eq 1 ] && echo ' (resumed once with guidance)')"
show "chat, answered"

# Expand the evidence of the last answer (ctrl+b).
tmux send-keys -t "$SESSION" C-b
if pane | grep -q "unverifiable"; then
    echo "e2e: (answer unverifiable: no evidence to expand)"
else
    step "evidence expanded" "nearest training exemplars|no exemplars were stored" 10
fi
show "evidence"

# Export (ctrl+s): Markdown and session JSONL under <store dir>/exports.
tmux send-keys -t "$SESSION" C-s
sleep 1
if ls "$E2E_DIR"/exports/session-*.md "$E2E_DIR"/exports/session-*.jsonl >/dev/null 2>&1; then
    echo "e2e: ok   export: $(ls "$E2E_DIR"/exports | tr '\n' ' ')"
else
    echo "e2e: FAIL export (nothing in $E2E_DIR/exports)"; STATUS=1
fi

tmux send-keys -t "$SESSION" C-r
step "review queue" "Review queue" 10
show "review queue"
# Mark the first queued answer acceptable (a): the verifier's support set grows by one at once.
before=$(pane | grep -o "support set [0-9]* points" | grep -o "[0-9]*" | head -1)
if pane | grep -q "pending" && [ -n "$before" ] && ! pane | grep -q "The queue is empty"; then
    tmux send-keys -t "$SESSION" a
    step "decision in the support set ($before -> $((before + 1)) points)" "support set $((before + 1)) points" 60
    show "review queue, after a decision"
    tmux send-keys -t "$SESSION" z
    step "undo ($((before + 1)) -> $before points)" "support set $before points" 60
else
    echo "e2e: (no queued answer or no verifier: no decision to make)"
fi
tmux send-keys -t "$SESSION" Escape
sleep 0.5
tmux send-keys -t "$SESSION" F1
step "help" "key +│ chat" 10
show "help"
tmux send-keys -t "$SESSION" Escape
sleep 0.3
tmux send-keys -t "$SESSION" C-q
step "quit" "EXITED 0" 30
show "after quit"
exit $STATUS
