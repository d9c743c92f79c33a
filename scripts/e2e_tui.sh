#!/usr/bin/env bash
# End-to-end drive of the real chat UI (embedded SmolLM2 with the shipped default fine-tuned folder) in tmux:
# a five-step conversation, each step checked on the screen and printed as ok / FAIL.
#
#   scripts/e2e_tui.sh [--svg DIR]
#
#   1. an everyday question ("What is the capital of Australia?"): a prose answer, judged as an everyday
#      question by the open-question verifier ("✔ verified" or "✘ not verified", never "out of scope");
#   2. the README's news article: {"topic": "sports"}, "✔ verified"; its evidence expanded (ctrl+b);
#   3. a follow-up ("Why did you pick that topic?"): a prose answer, not forced into the task's JSON;
#   4. the review queue (ctrl+r): the turn-1 answer (else the first queued one) marked acceptable; the
#      review footer's "support set N points" moves by one (the chat's status line does not show the count);
#   5. the article again: the same answer and the same verdict as in step 2;
#   6. edit and resend (ctrl+up): the follow-up of step 3 edited and sent in a new branch holding turns 1
#      and 2; its answer gets a badge, and the original session keeps its own turn 3;
#   7. branch (ctrl+f): a new session from turn 1 (both of its answers), titled as a branch; the sessions
#      screen (ctrl+o) says "turn 1 of “<title>”" (and "turn 2 of …" for the edit's branch) in its
#      "branched from" column;
#   8. search (ctrl+p → Search sessions…): "Australia" finds the question in the original and in both
#      branches; enter opens a hit's session;
#   9. a 30-turn everyday session in a new chat (scripts/everyday_session.py's messages): every turn answered,
#      and (issue 41) no pause, no line of raw numbers in any turn's lines on the screen (q=, d=, p_lower, bin,
#      ⌊q̃⌋, support set: those stay in the evidence, collapsed, and the status line), no answer that repeats an
#      earlier one verbatim and none that loops (the monitor's loop rule), read back from the session's store.
# Step 1 also regenerates its answer (ctrl+g): a second, sampled answer appears under the first ("answer 2
# (sampled)"), each with its own badge.
# Then it exports the session (ctrl+s) and quits (ctrl+q). Exit status 0 when every step was seen.
#
# Each step's screen is saved as text under E2E_OUT (NN-step.txt; the store is E2E_OUT/store). With
# --svg DIR (or E2E_SVG=DIR) the same run also saves SVG screenshots there, taken by the app itself (f12):
# chat-everyday, chat-regenerated, verified-answer, chat-follow-up, review-queue, chat-same-again,
# chat-edited, sessions-branch, search (.svg); the docs' screenshots are made with
# `scripts/e2e_tui.sh --svg docs/screenshots`.
#
# Environment: PYTHON (default .venv/bin/python), E2E_OUT (default a new temp dir), E2E_SIZE (the
# terminal, default 120x50), LOAD_TIMEOUT and
# ANSWER_TIMEOUT (s, default 300 each), CHAT_ARGS (extra `mlx-sdm chat` arguments, default
# "--max-tokens 64"), GUIDANCE (the reply when the session monitor pauses a turn at HIGH), E2E_TURNS (the long
# session's turns, default 30: fewer for a quick check) and E2E_SESSION_ONLY=1 (step 9 alone, in the first chat).
set -u
cd "$(dirname "$0")/.."
SVG_DIR=${E2E_SVG:-}
while [ $# -gt 0 ]; do
    case $1 in
        --svg) SVG_DIR=${2:?--svg needs a folder}; shift 2 ;;
        --svg=*) SVG_DIR=${1#--svg=}; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "e2e: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
PYTHON=${PYTHON:-.venv/bin/python}
E2E_OUT=${E2E_OUT:-$(mktemp -d /tmp/mlx-sdm-e2e.XXXXXX)}
LOAD_TIMEOUT=${LOAD_TIMEOUT:-300}
ANSWER_TIMEOUT=${ANSWER_TIMEOUT:-300}
CHAT_ARGS=${CHAT_ARGS:-"--max-tokens 64"}
# 50 rows: the verified answer, its badge and its whole expanded evidence fit on one screen.
E2E_SIZE=${E2E_SIZE:-120x50}
GUIDANCE=${GUIDANCE:-"Answer in one short sentence."}
QUESTION="What is the capital of Australia?"
FOLLOW_UP="Why did you pick that topic?"
# The README's article (tests/test_default_verifies_smollm2.py, ARTICLE).
ARTICLE='Classify the topic of the following news article. Respond using the following JSON: {"topic": str}. ARTICLE: Striker'"'"'s late goal sends United into cup semi-final. A stoppage-time header gave United a 2-1 win away from home and a place in the semi-finals. The manager praised his players for never giving up after falling behind early.'
BADGE='(✔ verified|✘ not verified|\? not verified|○ out of scope|· no verifier)'
SESSION="mlx-sdm-e2e-$$"
STATUS=0
PAUSES=0
PAUSED_TURNS=""

command -v tmux >/dev/null || { echo "e2e: tmux is not installed" >&2; exit 2; }
command -v bc >/dev/null || { echo "e2e: bc is not installed" >&2; exit 2; }
mkdir -p "$E2E_OUT/store" "$E2E_OUT/svg" || exit 2
if [ -n "$SVG_DIR" ]; then mkdir -p "$SVG_DIR" || exit 2; fi

now() { date +%s.%N; }
elapsed() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }
pane() { tmux capture-pane -p -t "$SESSION"; }
# The chat column only: no left border, no monitor panel, no indentation.
chat_column() { pane | sed -e 's/[[:space:]]*▏.*$//' -e 's/^ █ \{0,1\}//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//'; }
# Turn N's lines: from its "assistant · turn N" title to its monitor line.
turn_block() { no_toasts || true; chat_column | awk -v t="assistant · turn $1" '$0 == t {f = 1; next} f && /^AUQ / {exit} f {print}'; }
# The regenerated answer N of turn T: its lines from "assistant · turn T · answer N (sampled)".
regen_block() { no_toasts || true; chat_column | awk -v t="assistant · turn $1 · answer $2 (sampled)" '$0 == t {f = 1; next} f && /^AUQ / {exit} f {print}'; }
regen_badge() { regen_block "$1" "$2" | grep -E "^[▸▾]? ?$BADGE" | head -1 | sed 's/^[▸▾] //'; }
header() { pane | grep -m1 -o "[^◆]* — verified local chat" | sed 's/ — verified local chat$//; s/^ *//'; }
turn_answer() { turn_block "$1" | awk '/^(▸|▾) / {exit} {print}' | sed '/^$/d'; }
turn_badge() { turn_block "$1" | grep -E "^[▸▾]? ?$BADGE" | head -1 | sed 's/^[▸▾] //'; }
# The support set's count is the review screen's (its footer); the chat's status line does not show it.
support_in_footer() { pane | grep -o "pending · support set [0-9]* points" | grep -o "[0-9][0-9]* points" | grep -o "[0-9]*" | tail -1; }
# Textual's toasts (drawn with ▌ at the right) cover the status line's end; wait until they are gone.
no_toasts() { local i; for i in $(seq 120); do pane | grep -q "▌" || return 0; sleep 0.1; done; return 1; }
# The chat screen is showing (not the review queue or a prompt): its input's placeholder or footer.
in_chat() { pane | tail -1 | grep -q "Stop .*Evidence"; }
back_to_chat() {  # escape until the chat screen shows (a lone escape can be lost while a worker finishes)
    local i; for i in 1 2 3; do
        in_chat && return 0
        tmux send-keys -t "$SESSION" Escape; sleep 1
    done
    in_chat
}
save() {  # save NAME: the screen as text under E2E_OUT
    pane > "$E2E_OUT/$1.txt"
    echo "e2e: (screen saved: $E2E_OUT/$1.txt)"
}
ok() { echo "e2e: ok   $1"; }
fail() { echo "e2e: FAIL $1"; STATUS=1; }
check() { if [ "$2" = 1 ]; then ok "$1"; else fail "$1"; fi; }
wait_for() {  # wait_for REGEX TIMEOUT_S -> 0 when the pane matches within the timeout
    local deadline; deadline=$(echo "$(now) + $2" | bc)
    while (( $(echo "$(now) < $deadline" | bc) )); do
        pane | grep -Eq -- "$1" && return 0
        sleep 0.1
    done
    return 1
}
shot() {  # shot NAME: with --svg, the app saves the screen (f12) and it is moved to DIR/NAME.svg
    [ -n "$SVG_DIR" ] || return 0
    no_toasts  # a clean picture: no "MEDIUM logged" or decision toast over it
    local before; before=$(ls "$E2E_OUT/svg" | wc -l)
    tmux send-keys -t "$SESSION" F12
    local deadline; deadline=$(echo "$(now) + 10" | bc)
    while (( $(echo "$(now) < $deadline" | bc) )) && [ "$(ls "$E2E_OUT/svg" | wc -l)" -le "$before" ]; do sleep 0.1; done
    sleep 0.5  # the driver writes the file from a thread
    local newest; newest=$(ls -t "$E2E_OUT/svg"/*.svg 2>/dev/null | head -1)
    if [ "$(ls "$E2E_OUT/svg" | wc -l)" -gt "$before" ] && grep -q "</svg>" "$newest"; then
        cp "$newest" "$SVG_DIR/$1.svg" && echo "e2e: (screenshot $SVG_DIR/$1.svg)"
    else
        fail "screenshot $1.svg (f12 saved nothing in $E2E_OUT/svg)"
    fi
    no_toasts  # Textual's "Saved screenshot" toast fades before the next step
}
cleanup() { tmux kill-session -t "$SESSION" 2>/dev/null; }
trap cleanup EXIT

ask() {  # ask N TEXT: send TEXT, time its first token on screen, wait for turn N's verdict and the end of the turn
    local n=$1 text=$2 t_enter first="" resumed=0 deadline screen
    in_chat || { fail "turn $n: the chat screen is not showing; not typing into another screen"; return 1; }
    tmux send-keys -t "$SESSION" -l "$text"
    sleep 0.3
    t_enter=$(now)
    tmux send-keys -t "$SESSION" Enter
    deadline=$(echo "$t_enter + $ANSWER_TIMEOUT" | bc)
    while (( $(echo "$(now) < $deadline" | bc) )); do
        if turn_block "$n" | grep -Eqv "^$|answering|verifying|$BADGE"; then first=$(now); break; fi
        sleep 0.05
    done
    if [ -n "$first" ]; then
        printf 'e2e: turn %s: first token on screen %.2f s after Enter\n' "$n" "$(echo "$first - $t_enter" | bc)"
    else
        fail "turn $n: no streamed token within $ANSWER_TIMEOUT s"; return 1
    fi
    while (( $(echo "$(now) < $deadline" | bc) )); do
        screen=$(pane)
        if echo "$screen" | grep -q "Paused: "; then
            PAUSES=$((PAUSES + 1)); PAUSED_TURNS="$PAUSED_TURNS $n"
            if [ $resumed -eq 1 ]; then  # paused again after the resume: leave the turn paused
                echo "e2e: turn $n paused again after the resume; escape leaves it paused"
                tmux send-keys -t "$SESSION" Escape; sleep 0.5; break
            fi
            echo "e2e: turn $n: the monitor paused it (HIGH); answering the guidance prompt"
            save "turn-$n-paused"
            tmux send-keys -t "$SESSION" -l "$GUIDANCE"; sleep 0.3; tmux send-keys -t "$SESSION" Enter
            resumed=1; sleep 1; continue
        fi
        if turn_badge "$n" | grep -Eq "$BADGE" && ! echo "$screen" | grep -q "generating…\|stopping…"; then
            echo "e2e: turn $n over $(elapsed "$t_enter") s after Enter"
            sleep 0.5; return 0
        fi
        sleep 0.2
    done
    fail "turn $n: no verdict within $ANSWER_TIMEOUT s"; return 1
}
show_turn() {  # show_turn N: its answer and badge, as the report's key lines
    echo "e2e:   answer: $(turn_answer "$1" | tr '\n' ' ' | sed 's/ $//')"
    echo "e2e:   badge:  $(turn_badge "$1")"
}
is_prose() {  # is_prose N: an answer that is not the task's JSON
    local a; a=$(turn_answer "$1")
    [ -n "$a" ] && ! echo "$a" | head -1 | grep -q '^[[:space:]]*[{"]'
}

env_vars=(MLX_SDM_SCREENSHOT_DIR="$E2E_OUT/svg")
for name in PYTHONPATH HF_HUB_OFFLINE; do [ -n "${!name:-}" ] && env_vars+=("$name=${!name}"); done
echo "e2e: screens, store and svgs in $E2E_OUT"
tmux new-session -d -s "$SESSION" -x "${E2E_SIZE%x*}" -y "${E2E_SIZE#*x}" \
    "env $(printf '%q ' "${env_vars[@]}") $PYTHON -m mlx_sdm chat --db $E2E_OUT/store/chat.db $CHAT_ARGS; echo EXITED \$?; sleep 30"
t_start=$(now)
if wait_for "model [^·]+ · (verifier [^·]+ · head|its own verifier)" "$LOAD_TIMEOUT"; then
    ok "model and verifier loaded in $(elapsed "$t_start") s"
else
    fail "the model did not load within $LOAD_TIMEOUT s"; save "00-load"; exit 1
fi
sleep 1
save "00-ready"

E2E_TURNS=${E2E_TURNS:-30}
if [ "${E2E_SESSION_ONLY:-0}" != 1 ]; then  # steps 1-8 (E2E_SESSION_ONLY=1: step 9 alone)
echo "e2e: -- step 1: an everyday question"
if ask 1 "$QUESTION"; then
    show_turn 1
    check "1: a prose answer" "$(is_prose 1 && echo 1)"
    check "1: judged as an everyday question (✔ verified, ✘ or ? not verified)" \
        "$(turn_badge 1 | grep -qE "^(✔ verified|✘ not verified|\? not verified)" && echo 1)"
fi
save "01-everyday-question"
shot chat-everyday

echo "e2e: -- step 1b: regenerate the everyday answer"
if in_chat; then
    tmux send-keys -t "$SESSION" C-g
    if wait_for "assistant · turn 1 · answer 2 \(sampled\)" 10; then
        deadline=$(echo "$(now) + $ANSWER_TIMEOUT" | bc)
        while (( $(echo "$(now) < $deadline" | bc) )); do
            regen_badge 1 2 | grep -Eq "$BADGE" && ! pane | grep -q "generating…\|stopping…" && break
            sleep 0.2
        done
        echo "e2e:   answer 2: $(regen_block 1 2 | awk '/^(▸|▾) / {exit} {print}' | sed '/^$/d' | tr '\n' ' ' | sed 's/ $//')"
        echo "e2e:   badge:    $(regen_badge 1 2)"
        check "1b: a second answer with its own badge, the first keeps its badge ($(turn_badge 1))" \
            "$(regen_badge 1 2 | grep -Eq "$BADGE" && turn_badge 1 | grep -Eq "$BADGE" && echo 1)"
    else
        fail "1b: regenerate (ctrl+g) showed no second answer"
    fi
else
    fail "1b: the chat screen is not showing"
fi
save "01b-regenerated"
shot chat-regenerated

echo "e2e: -- step 2: the README's news article"
if ask 2 "$ARTICLE"; then
    show_turn 2
    check '2: the answer {"topic": "sports"}' "$(turn_answer 2 | grep -qx '{"topic": "sports"}' && echo 1)"
    check "2: ✔ verified" "$(turn_badge 2 | grep -q '^✔ verified' && echo 1)"
    ARTICLE_ANSWER=$(turn_answer 2); ARTICLE_BADGE=$(turn_badge 2)
fi
save "02-article"
tmux send-keys -t "$SESSION" C-b
if wait_for "Verified: calibrated|The most similar examples|no exemplars were stored" 10; then
    sleep 0.5  # the chat log settles at its new bottom
    ok "2: evidence expanded (ctrl+b)"
    chat_column | awk '/^(▾) /{f=1} f' | grep -v "^$" | head -12 | sed 's/^/e2e:   /'
else
    fail "2: evidence expanded (ctrl+b)"
fi
save "02b-article-evidence"
shot verified-answer
tmux send-keys -t "$SESSION" C-b  # collapse it again
sleep 0.5

echo "e2e: -- step 3: a follow-up"
if ask 3 "$FOLLOW_UP"; then
    show_turn 3
    check "3: a prose answer, not the task's JSON" "$(is_prose 3 && echo 1)"
fi
save "03-follow-up"
shot chat-follow-up

echo "e2e: -- step 4: a review label"
no_toasts
tmux send-keys -t "$SESSION" C-r
if wait_for "Review queue" 10 && wait_for "support set [0-9]+ points" 10; then
    ok "4: review queue open"
    support=$(support_in_footer)
    echo "e2e:   queue: $(pane | grep -o "[0-9]* pending")"
    chat_column | awk '/^when +session +reason/{f=1; print; next} f && /^▔/{exit} f && NF && !/^▉$/' | sed 's/^/e2e:     /'
    save "04-review-queue"
    if pane | grep -q "The queue is empty"; then
        fail "4: the queue is empty (the unverified answer of turn 1 should be in it)"
    else
        for _ in 1 2 3 4 5 6; do  # move to the turn-1 answer when it is queued
            chat_column | awk '$0 == "prompt" {getline; print; exit}' | grep -qxF "$QUESTION" && break
            tmux send-keys -t "$SESSION" j; sleep 0.3
        done
        echo "e2e:   labelled acceptable: $(chat_column | awk '$0 == "prompt" {getline; print; exit}') → $(chat_column | awk '$0 == "answer" {getline; print; exit}')"
        tmux send-keys -t "$SESSION" a
        if [ -n "$support" ] && wait_for "support set $((support + 1)) points" 60; then
            ok "4: the label is in the support set (review footer: support set $support → $((support + 1)) points)"
        else
            fail "4: review footer shows support set $((${support:-0} + 1)) points (it said ${support:-nothing} before)"
        fi
        pane | grep -o "[0-9]* pending · support set [0-9]* points[^│]*" | head -1 | sed 's/ *$//; s/^/e2e:   /'
        save "04b-review-labelled"
        shot review-queue
    fi
else
    fail "4: review queue open (ctrl+r)"; save "04-review-queue"
fi
back_to_chat || fail "4: back to the chat (escape)"
no_toasts
save "04c-chat-after-label"

echo "e2e: -- step 5: the article again"
if ask 4 "$ARTICLE"; then
    show_turn 4
    check "5: the same answer as in step 2" "$([ -n "${ARTICLE_ANSWER:-}" ] && [ "$(turn_answer 4)" = "$ARTICLE_ANSWER" ] && echo 1)"
    check "5: the same verdict as in step 2 (${ARTICLE_BADGE:-none})" \
        "$([ -n "${ARTICLE_BADGE:-}" ] && [ "$(turn_badge 4)" = "$ARTICLE_BADGE" ] && echo 1)"
fi
save "05-article-again"
shot chat-same-again

echo "e2e: -- step 6: edit and resend the follow-up"
tmux send-keys -t "$SESSION" C-Up
if wait_for "Edit and resend which question" 10; then
    tmux send-keys -t "$SESSION" k; sleep 0.3; tmux send-keys -t "$SESSION" Enter  # turn 3, above the last
    if wait_for "edit of turn 3 · " 10 && wait_for "$FOLLOW_UP" 5; then
        ok "6: a new branch \"$(header)\" with the follow-up in the prompt"
        no_toasts
        tmux send-keys -t "$SESSION" -l " Answer in one sentence."
        sleep 0.3
        tmux send-keys -t "$SESSION" Enter
        if wait_for "assistant · turn 3" "$ANSWER_TIMEOUT"; then
            deadline=$(echo "$(now) + $ANSWER_TIMEOUT" | bc)
            while (( $(echo "$(now) < $deadline" | bc) )); do
                turn_badge 3 | grep -Eq "$BADGE" && ! pane | grep -q "generating…\|stopping…" && break
                sleep 0.2
            done
            show_turn 3
            check "6: the edited question answered in the branch, with a badge" "$(turn_badge 3 | grep -Eq "$BADGE" && echo 1)"
            check "6: the branch holds turns 1 and 2 (and no turn 4)" \
                "$(pane | grep -q "assistant · turn 4" || echo 1)"
        else
            fail "6: no answer to the edited question"
        fi
    else
        fail "6: the edit did not open a branch with the question in the prompt"
    fi
else
    fail "6: edit and resend (ctrl+up) opened no picker"
fi
save "06-edited"
shot chat-edited

echo "e2e: -- step 7: branch from turn 1"
no_toasts
tmux send-keys -t "$SESSION" C-f
if wait_for "Branch: continue from which turn" 10; then
    tmux send-keys -t "$SESSION" Home; sleep 0.3; tmux send-keys -t "$SESSION" Enter  # turn 1
    if wait_for "branch · edit of turn 3 · " 10 && wait_for "branched from" 5; then
        ok "7: a new session \"$(header)\" from turn 1"
        check "7: it holds turn 1 with both answers, and no turn 2" \
            "$(pane | grep -q "assistant · turn 1 · answer 2 (sampled)" && ! pane | grep -q "assistant · turn 2" && echo 1)"
        save "07-branch"
        no_toasts
        tmux send-keys -t "$SESSION" C-o
        if wait_for "branched from" 10 && wait_for "turn 1" 5; then
            pane | grep -E "turn [0-9]+ of “" | sed 's/[│┃█]/ /g; s/  */ /g; s/^/e2e:   /'
            check "7: the sessions screen says where each branch came from (\"turn 1 of “…”\", \"turn 2 of “…”\")" \
                "$(pane | grep -q "turn 1 of “" && pane | grep -q "turn 2 of “" && echo 1)"
            save "07b-sessions"
            shot sessions-branch
        else
            fail "7: the sessions screen (ctrl+o) with its branched-from column"
        fi
        tmux send-keys -t "$SESSION" Escape  # close the sessions screen (the chat's footer shows under it)
        for _ in $(seq 50); do pane | grep -q "branched from" || break; sleep 0.1; done
        pane | grep -q "branched from" && fail "7: the sessions screen closed (escape)"
        back_to_chat || fail "7: back to the chat (escape)"
    else
        fail "7: the branch did not open"
    fi
else
    fail "7: branch (ctrl+f) opened no picker"
fi

echo "e2e: -- step 8: search"
no_toasts
tmux send-keys -t "$SESSION" C-p; sleep 0.5
tmux send-keys -t "$SESSION" -l "Search sessions"; sleep 0.5
tmux send-keys -t "$SESSION" Enter
if wait_for "Search sessions" 10 && wait_for "enter or ↓ to the hits" 10; then
    tmux send-keys -t "$SESSION" -l "Australia"
    if wait_for "[0-9]+ hits?" 10; then
        sleep 0.5
        hits=$(pane | grep -oE "[0-9]+ hits?" | head -1 | grep -oE "^[0-9]+")
        echo "e2e:   $hits hits for \"Australia\""
        check "8: the question found in the original and both branches (at least 3 hits)" "$([ "${hits:-0}" -ge 3 ] && echo 1)"
        save "08-search"
        shot search
        tmux send-keys -t "$SESSION" Enter; sleep 0.3; tmux send-keys -t "$SESSION" Enter  # to the hits, open the first
        if wait_for "Stop .*Evidence" 10 && in_chat && wait_for " — verified local chat" 10; then
            sleep 1
            check "8: enter opened the hit's session: \"$(header)\"" "$(pane | grep -q "What is the capital of Australia?" && [ -n "$(header)" ] && echo 1)"
        else fail "8: enter on a hit opened its session"; back_to_chat; fi
        save "08b-opened"
    else
        fail "8: no hits for Australia"
    fi
else
    fail "8: the palette's Search sessions… did not open"
fi
back_to_chat || fail "8: back to the chat"

fi  # steps 1-8

echo "e2e: -- step 9: a $E2E_TURNS-turn everyday session (scripts/everyday_session.py's messages) in a new chat"
[ "${E2E_SESSION_ONLY:-0}" = 1 ] || { tmux send-keys -t "$SESSION" C-n; sleep 1; }
PAUSES=0; PAUSED_TURNS=""
RAW_LINES=""
# the estimator's numbers and terms, which a turn's lines must not show outside its (collapsed) evidence
RAW='(\bq=|\bd=|p_lower|q_bin|⌊q̃⌋|\bbin\b|support set|\bAUQ\b)'
n=0
while IFS= read -r message; do
    n=$((n + 1))
    ask "$n" "$message" || break
    echo "e2e:   turn $n: $(turn_badge "$n")"
    raw=$(turn_block "$n" | grep -v "^model [^·]* · verifier" | grep -E "$RAW" | head -2)  # not the status line
    [ -n "$raw" ] && RAW_LINES="$RAW_LINES
turn $n: $raw"
done < <($PYTHON scripts/everyday_session.py --print-turns | head -n "$E2E_TURNS")
save "09-long-session"
check "9: all $E2E_TURNS turns answered" "$([ "$n" -eq "$E2E_TURNS" ] && echo 1)"
check "9: no pause in $E2E_TURNS turns (paused:${PAUSED_TURNS:- none})" "$([ "$PAUSES" -eq 0 ] && echo 1)"
check "9: no line of raw numbers in a turn's lines${RAW_LINES:+:$RAW_LINES}" "$([ -z "$RAW_LINES" ] && echo 1)"
# the answers as stored (whole, not as wrapped on the screen): none repeats an earlier one, none loops
answers_check=$(PYTHONPATH="${PYTHONPATH:-}:." $PYTHON - "$E2E_OUT/store/chat.db" "$E2E_TURNS" <<'PY'
import sqlite3, sys
from mlx_sdm.monitor.online.degenerate import degenerate_answer
db, turns = sys.argv[1], int(sys.argv[2])
rows = sqlite3.connect(db).execute(
    "SELECT session_id, text, status FROM messages WHERE role = 'assistant' AND kind = 'chat' ORDER BY id").fetchall()
last = rows[-1][0] if rows else None
answers = [(t, s) for sid, t, s in rows if sid == last]
seen, bad = set(), []
for i, (text, status) in enumerate(answers, 1):
    key = " ".join(text.split())
    if key and key in seen:
        bad.append(f"turn {i} repeats an earlier answer verbatim: {key[:60]!r}")
    seen.add(key)
    found = degenerate_answer(text)
    if found is not None and found.kind != "quotes_braces":
        bad.append(f"turn {i} loops: {found.reason}")
    if status == "paused":
        bad.append(f"turn {i} is paused")
print(f"{len(answers)} answers read back;" + ("".join(" " + b + ";" for b in bad) or " none repeated, none loops"))
PY
)
echo "e2e:   $answers_check"
check "9: no answer repeated verbatim, no loop (the store)" "$(echo "$answers_check" | grep -q 'none repeated, none loops' && echo 1)"

tmux send-keys -t "$SESSION" C-s  # Markdown and session JSONL under <store dir>/exports
sleep 1.5
if ls "$E2E_OUT"/store/exports/session-*.md "$E2E_OUT"/store/exports/session-*.jsonl >/dev/null 2>&1; then
    ok "export: $(ls "$E2E_OUT"/store/exports | tr '\n' ' ')"
else
    fail "export (nothing in $E2E_OUT/store/exports)"
fi
tmux send-keys -t "$SESSION" C-q
if wait_for "EXITED 0" 30; then ok "quit (ctrl+q), exit status 0"; else fail "quit (ctrl+q)"; fi
save "06-after-quit"
if [ $STATUS -eq 0 ]; then echo "e2e: all steps seen"; else echo "e2e: some steps FAILED"; fi
exit $STATUS
