"""The chat engine: ONE long-lived worker thread owns every piece of MLX state (model, head,
verifier, monitors; MLX streams are thread-local) and runs every turn and review decision.

Callers (the Textual UI, ``mlx-sdm chat --plain``, tests) talk to it only through methods that
queue a job and return a :class:`concurrent.futures.Future`, and through events
(:mod:`mlx_sdm.session.events`) delivered on the engine's thread.

A turn is: store the user's message → generate (streaming tokens with log-probs; the document
features are captured in the same pass) → verify (verified with ``p_lower`` / rejected with a
reason / unverifiable) → monitor (AUQ level + cumulative confidence, TRACER prefix risk) →
escalate (MEDIUM logs; HIGH pauses with a reflection until :meth:`ChatEngine.resume`; CRITICAL
aborts with an explanation; an irreversible tool pauses already at MEDIUM) → store the answer,
its verdict, monitor snapshot and (when rejected or escalated) its review-queue entry in ONE
transaction.

Review decisions (:meth:`ChatEngine.decide`) put the labelled answer's document features into the
verifier's support set at once (``SDMEstimator.add_support``, no retraining), save the updated
verifier atomically, and :meth:`ChatEngine.undo_decision` takes the point out again.
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import itertools
import json
import queue
import re
import threading
import time
import traceback
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import DataError, MlxSdmError, ModelMismatchError
from mlx_sdm.session.events import (
    DecisionResult,
    EngineEvent,
    EngineInfo,
    ErrorEvent,
    EscalationEvent,
    EventCallback,
    MonitorEvent,
    PauseInfo,
    StatusEvent,
    SupportEvent,
    TokenEvent,
    TurnFinishedEvent,
    TurnResult,
    VerdictEvent,
)
from mlx_sdm.session.store import (
    LABEL_ACCEPTABLE,
    REASON_ESCALATED_CRITICAL,
    REASON_ESCALATED_HIGH,
    REASON_ESCALATED_IRREVERSIBLE,
    REASON_PREDICTED_UNACCEPTABLE,
    ChatStore,
    MessageRecord,
)

DEFAULT_MAX_TOKENS = 256
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and accurately."
#: Monitoring spec § 2.6: the reflection injected on HIGH (keeps the phrase "NOT confident").
REFLECTION_PROMPT = (
    "Stop and state your uncertainty explicitly before going on. List each point in your current reasoning "
    "that you are NOT confident about. For every point give (1) what you already know, (2) what you do not "
    "know, (3) what information would resolve it."
)
#: Tool calls are read from the answer in the common ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` form.
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
VERIFIER_OFF = {"none", "off", "no"}


@dataclass
class EngineConfig:
    """How the engine loads and runs. ``verifier=None`` = the default verifier shipped for the model
    (answers are "unverifiable" when none fits); ``"none"`` turns verification off."""

    model: str | None = None
    verifier: str | None = None
    head: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    system_prompt: str | None = None  # None: the verifier's own system prompt (its documents' distribution), else DEFAULT_SYSTEM_PROMPT
    irreversible_tools: tuple[str, ...] = ()
    quantized: bool = False
    generate_reflection: bool = True  # on HIGH, let the model state its uncertainty before pausing
    reflection_max_tokens: int = 96
    embedder: str = "minilm"  # TRACER sentence embedder: "minilm", "hidden" (the chat model's pooled states) or "none"
    enable_p_true: bool = True
    semantic_sampling: bool = False  # AUQ System 2 (opt-in): up to 5 extra samples when the confidence is in [0.50, 0.72]
    auq_thresholds: tuple[float, float, float] = (0.80, 0.60, 0.40)  # floors of LOW / MEDIUM / HIGH on P_t (spec § 2.5)
    reuse_cache: bool = True  # keep the last session's KV cache: a turn prefills only its new tokens
    reviewed_verifier_dir: str | None = None  # where the verifier with review labels is saved; default beside the store


@dataclass
class EngineComponents:
    """Everything MLX the engine owns. Built ON the worker thread by ``load_components`` (or a
    caller-supplied factory, e.g. tests with a tiny model)."""

    lm: Any  # mlx_sdm.lm.loading.LoadedModel
    verifier: Any | None = None  # mlx_sdm.network.verifier.DocumentVerifier
    verifier_path: str | None = None  # the base verifier on disk (review labels are re-applied on top of it)
    unverifiable_reason: str | None = None
    head: Any | None = None  # a callable hidden -> vocabulary logits (SDM network head)
    head_path: str | None = None
    embedder: Any | None = None  # TRACER sentence embedder (encode(texts) -> (N, D)); None = lexical fallback


def feature_model_id(fingerprint: dict) -> str:
    """A short, stable id of the model that computed a feature vector."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def parse_tool_calls(text: str) -> list[dict]:
    """Tool calls proposed in an answer (``<tool_call>{json}</tool_call>``); malformed blocks are ignored."""
    calls = []
    for block in TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"]:
            args = obj.get("arguments", {})
            calls.append({"name": obj["name"], "arguments": args if isinstance(args, (dict, str)) else {}})
    return calls


def load_components(config: EngineConfig) -> EngineComponents:
    """The real loader: model (embedded SmolLM2 by default), head, verifier, embedder."""
    from mlx_sdm.lm.loading import load_model

    lm = load_model(config.model, quantized=config.quantized)
    head = None
    if config.head:
        from mlx_sdm.network.heads import load_head

        heads = load_head(config.head, lm.model, lm.fingerprint)
        head = heads.vocab_logits
    verifier, verifier_path, reason = _load_verifier(config, lm)
    from mlx_sdm.monitor.embedders import EMBEDDER_CHOICES, make_embedder

    if config.embedder not in EMBEDDER_CHOICES:
        raise DataError(f"unknown embedder {config.embedder!r}; use one of {', '.join(EMBEDDER_CHOICES)}", field="embedder")
    embedder = make_embedder(config.embedder, model=lm.model, tokenizer=lm.tokenizer, model_name=lm.name)
    return EngineComponents(
        lm=lm, verifier=verifier, verifier_path=verifier_path, unverifiable_reason=reason,
        head=head, head_path=config.head, embedder=embedder,
    )


def _load_verifier(config: EngineConfig, lm: Any) -> tuple[Any | None, str | None, str | None]:
    from mlx_sdm.network import verifier as verifier_mod

    if config.verifier is not None and config.verifier.lower() in VERIFIER_OFF:
        return None, None, "verification is off (--verifier none)"
    if config.verifier is not None:  # named explicitly: a mismatch is an error, not a silent downgrade
        return verifier_mod.DocumentVerifier.load(config.verifier, expect_fingerprint=lm.fingerprint), config.verifier, None
    path = verifier_mod.DEFAULT_VERIFIER_DIR
    if not Path(path).exists():
        return None, None, "no default verifier is installed (weights/); build one with scripts/build_default_verifier.py"
    try:
        return verifier_mod.DocumentVerifier.load(path, expect_fingerprint=lm.fingerprint), str(path), None
    except ModelMismatchError as exc:
        return None, None, f"the default verifier was built for another model: {exc}"


class ChatEngine:
    """Owner of all MLX state; every public method is thread-safe and returns at once."""

    def __init__(
        self,
        config: EngineConfig,
        store: ChatStore,
        *,
        on_event: EventCallback | None = None,
        components: Callable[[EngineConfig], EngineComponents] | None = None,
    ):
        self.config = config
        self.store = store
        self._listeners: list[EventCallback] = [on_event] if on_event else []
        self._factory = components or load_components
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self._turns = itertools.count(1)
        self._info: EngineInfo | None = None
        self._load_error: BaseException | None = None
        self._components: EngineComponents | None = None
        self._monitors: dict[str, Any] = {}
        self._prefix: dict[str, Any] = {}  # session id -> PrefixCache of its last answer (one session kept)
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._worker, name="mlx-sdm-engine", daemon=True)
        self._thread.start()
        _LIVE_ENGINES.add(self)
        self.ready: Future = self._submit(self._load)

    # ------------------------------------------------------------------ public API (any thread)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Receive every event; returns a function that unsubscribes."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def info(self) -> EngineInfo | None:
        """What is loaded (None until :attr:`ready` resolves)."""
        return self._info

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def send(self, session_id: str, text: str, *, on_event: EventCallback | None = None) -> Future:
        """Start a turn: the user says ``text`` in session ``session_id``. Resolves to a :class:`TurnResult`."""
        if not text.strip():
            raise DataError("the message is empty; type something to send", field="text")
        started = time.perf_counter()
        return self._submit(lambda: self._turn(session_id, text, on_event=on_event, started=started, guidance_for=None))

    def resume(self, session_id: str, guidance: str, *, on_event: EventCallback | None = None) -> Future:
        """Resume a paused turn with the user's guidance: the model answers again, seeing the
        reflection and the guidance. Resolves to a :class:`TurnResult`."""
        started = time.perf_counter()
        return self._submit(lambda: self._resume(session_id, guidance, on_event=on_event, started=started))

    def cancel(self) -> None:
        """Stop the running generation at the next token (the partial answer is kept, status "cancelled")."""
        self._cancel.set()

    def pending_pause(self, session_id: str) -> PauseInfo | None:
        """The turn of ``session_id`` waiting for guidance, if any (read from the store; survives restarts)."""
        return _pending_pause(self.store.messages(session_id))

    def decide(
        self, review_id: int, label: int, *, note: str | None = None, completion: str | None = None,
        on_event: EventCallback | None = None,
    ) -> Future:
        """Label a review-queue entry (1 acceptable / 0 unacceptable; ``completion`` = an edited,
        acceptable answer). The point joins the verifier's support set at once. Resolves to a :class:`DecisionResult`."""
        return self._submit(lambda: self._decide(review_id, label, note, completion, on_event))

    def undo_decision(self, *, on_event: EventCallback | None = None) -> Future:
        """Undo the most recent decision and take its point out of the support set.
        Resolves to a :class:`DecisionResult` (``applied`` = the support set changed) or None."""
        return self._submit(lambda: self._undo(on_event))

    def delete_session(self, session_id: str) -> Future:
        """Delete a session; if it held active review decisions, the support set is rebuilt without them."""
        return self._submit(lambda: self._delete_session(session_id))

    def verify_text(self, prompt: str, completion: str) -> Future:
        """Verify an arbitrary (prompt, completion) by force-decoding. Resolves to (status, verdict dict | None, reason)."""
        def run():
            system = self._system_prompt()
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            return self._verify(self._features_for(messages, completion))

        return self._submit(run)

    def call(self, fn: Callable[[EngineComponents], Any]) -> Future:
        """Run ``fn(components)`` on the engine's thread (for scripts and tests that need the model)."""
        return self._submit(lambda: fn(self._require()))

    def shutdown(self, wait: bool = True, timeout: float | None = 30.0) -> None:
        self._cancel.set()
        self._jobs.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker plumbing

    def _submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        if not self._thread.is_alive():
            future.set_exception(MlxSdmError("the chat engine has shut down"))
            return future
        self._jobs.put((fn, future))
        return future

    def _worker(self) -> None:
        import mlx.core as mx  # this thread's MLX stream is the one every job runs on

        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            self._busy.set()
            try:
                result = fn()
                mx.synchronize()  # no work left in flight on this thread's stream between jobs
                future.set_result(result)
            except BaseException as exc:  # delivered to the caller through the future
                future.set_exception(exc)
            finally:
                self._busy.clear()
        # MLX needs a thread's streams destroyed by that thread before it ends, or the process may abort
        # at exit ("terminate called without an active exception"; ml-explore/mlx#3126): drain, drop the
        # state, then clear_streams.
        mx.synchronize()
        self._components = None
        self._monitors.clear()
        gc.collect()
        mx.clear_streams()
        self._emit(None, StatusEvent(session_id=None, turn=0, state="stopped", message="engine stopped"))

    def _emit(self, on_event: EventCallback | None, event: EngineEvent) -> None:
        for callback in ([on_event] if on_event else []) + list(self._listeners):
            try:
                callback(event)
            except Exception:  # a broken listener must not kill a turn
                traceback.print_exc()

    def _require(self) -> EngineComponents:
        if self._components is None:
            raise self._load_error or MlxSdmError("the chat engine is not loaded")
        return self._components

    def _load(self) -> EngineInfo:
        self._emit(None, StatusEvent(session_id=None, turn=0, state="loading", message="loading model and verifier"))
        try:
            components = self._factory(self.config)
        except BaseException as exc:
            self._load_error = exc
            self._emit(None, ErrorEvent(session_id=None, turn=0, message=str(exc), error_type=type(exc).__name__))
            raise
        self._components = components
        self._feature_model = feature_model_id(components.lm.fingerprint)
        reviewed = self._reviewed_dir()
        if components.verifier is not None:
            self._apply_all_support(save=False, reload=False)  # just loaded: add the store's review labels
        self._info = EngineInfo(
            model_name=components.lm.name,
            model_fingerprint=dict(components.lm.fingerprint),
            feature_model=self._feature_model,
            verifier_path=components.verifier_path if components.verifier is not None else None,
            unverifiable_reason=components.unverifiable_reason if components.verifier is None else None,
            support_size=self._support_size(),
            reviewed_verifier_path=str(reviewed) if (components.verifier is not None and reviewed is not None) else None,
            head_path=components.head_path,
            embedder=getattr(components.embedder, "name", None),
            max_tokens=self.config.max_tokens,
            irreversible_tools=list(self.config.irreversible_tools),
        )
        self._emit(None, StatusEvent(session_id=None, turn=0, state="ready", message=f"model {components.lm.name} ready"))
        return self._info

    # ------------------------------------------------------------------ turns

    def _conversation(self, session_id: str) -> list[dict]:
        """The chat the model sees, rebuilt from the store (so a reopened session continues as it was)."""
        messages: list[dict] = []
        system = self._system_prompt()
        if system:
            messages.append({"role": "system", "content": system})
        for m in self.store.messages(session_id):
            if m.role == "user":
                messages.append({"role": "user", "content": m.text})
            elif m.role == "assistant" and m.kind == "chat" and m.status in {"done", "paused", "resumed"}:
                messages.append({"role": "assistant", "content": m.text})
                meta = m.metadata or {}
                if meta.get("reflection_prompt"):
                    messages.append({"role": "system", "content": meta["reflection_prompt"]})
                    if meta.get("reflection"):
                        messages.append({"role": "assistant", "content": meta["reflection"]})
        return messages

    def _system_prompt(self) -> str | None:
        if self.config.system_prompt is not None:
            return self.config.system_prompt or None
        verifier = self._require().verifier
        recipe = getattr(verifier, "recipe", None)
        if recipe is not None and recipe.system:
            return recipe.system
        return DEFAULT_SYSTEM_PROMPT

    def _delimiter(self) -> str:
        recipe = getattr(self._require().verifier, "recipe", None)
        return recipe.delimiter if recipe is not None else "end_of_turn"

    def _turn(
        self, session_id: str, text: str, *, on_event: EventCallback | None, started: float, guidance_for: int | None
    ) -> TurnResult:
        components = self._require()
        turn = next(self._turns)
        self._cancel.clear()
        try:
            self.store.get_session(session_id)
            monitor = self._monitor_for(session_id)  # replays the stored session before this message
            if guidance_for is None:
                user_id = self.store.add_message(session_id, "user", text)
            else:
                user_id = self.store.add_guidance(session_id, guidance_for, text)
                monitor.resume(text)
            return self._answer(components, session_id, turn, user_id, text, on_event=on_event, started=started)
        except BaseException as exc:
            self._emit(on_event, ErrorEvent(session_id=session_id, turn=turn, message=str(exc), error_type=type(exc).__name__))
            self._emit(on_event, TurnFinishedEvent(session_id=session_id, turn=turn, status="error"))
            raise

    def _resume(self, session_id: str, guidance: str, *, on_event: EventCallback | None, started: float) -> TurnResult:
        if not guidance.strip():
            raise DataError("guidance is empty; tell the model how to go on", field="guidance")
        pause = self.pending_pause(session_id)
        if pause is None:
            raise DataError(f"session {session_id!r} has no paused turn to resume", field="session")
        return self._turn(session_id, guidance, on_event=on_event, started=started, guidance_for=pause.message_id)

    def _answer(
        self, components: EngineComponents, session_id: str, turn: int, user_id: int, user_text: str, *,
        on_event: EventCallback | None, started: float,
    ) -> TurnResult:
        prompt = self._conversation(session_id)
        created_at = _now()
        first: list[float] = []

        def on_token(piece: str, token_id: int | None, logprob: float | None) -> bool:
            if not first:
                first.append(time.perf_counter() - started)
            self._emit(on_event, TokenEvent(session_id=session_id, turn=turn, text=piece, token_id=token_id, logprob=logprob))
            return not self._cancel.is_set()

        t0 = time.perf_counter()
        prefix = self._prefix.pop(session_id, None)
        self._prefix.clear()  # one cached conversation at a time (a KV cache can be ~100 MB)
        gen = self._generate(components, prompt, self.config.max_tokens, on_token, prefix=prefix)
        generation_s = time.perf_counter() - t0
        base = dict(session_id=session_id, turn=turn, user_message_id=user_id, first_token_s=first[0] if first else None,
                    generation_s=generation_s, tokens=len(gen.tokens), prompt_tokens=gen.prompt_tokens,
                    reused_tokens=gen.reused_tokens)

        # TRACER's user step (its coherence gap embeds two texts) is scored after generation, not before the first token
        self._monitor_for(session_id).observe_user(user_text)
        if gen.cancelled:
            mid = self.store.add_answer(
                session_id, gen.text, status="cancelled", created_at=created_at, prompt=prompt, tokens=gen.tokens,
                token_logprobs=gen.logprobs, metadata={"finish_reason": "cancelled"},
            )
            self._emit(on_event, TurnFinishedEvent(session_id=session_id, turn=turn, status="cancelled", message_id=mid, text=gen.text))
            return TurnResult(status="cancelled", text=gen.text, message_id=mid, verdict_status=None, verdict=None, monitor=None, **base)

        # verify
        verdict_status, verdict, verdict_reason = self._verify(gen.features)
        self._emit(on_event, VerdictEvent(
            session_id=session_id, turn=turn, status=verdict_status, verdict=verdict, reason=verdict_reason,
            verifier=self._info.verifier_path if self._info else None,
        ))

        # monitor (P(True) reuses the answer's KV cache: only the question is prefilled)
        tool_calls = parse_tool_calls(gen.text)
        p_true = None
        if self.config.enable_p_true:
            from mlx_sdm.monitor.p_true import PTrueScorer

            p_true = PTrueScorer(components.lm.model, components.lm.tokenizer,
                                 prompt + [{"role": "assistant", "content": gen.text}],
                                 cache=gen.cache, cached_tokens=gen.cached_tokens)
        sampler = None
        if self.config.semantic_sampling:
            from mlx_sdm.session.monitoring import ChatSampler

            sampler = ChatSampler(components.lm, prompt, len(gen.token_ids), head=components.head)
        monitor = self._monitor_for(session_id).score_answer(
            answer=gen.text, tokens=gen.tokens, logprobs=gen.logprobs, tool_calls=tool_calls, p_true=p_true, verdict=verdict,
            sampler=sampler,
        )
        if self.config.reuse_cache:
            from mlx_sdm.session.generation import settle_prefix

            kept = settle_prefix(gen.prefix)
            if kept is not None:
                self._prefix[session_id] = kept
        self._emit(on_event, MonitorEvent(session_id=session_id, turn=turn, monitor=monitor))

        # escalate (spec § 2.5-2.6: MEDIUM logs, HIGH pauses with a reflection, CRITICAL aborts; irreversible tools pause at MEDIUM)
        plan = plan_escalation(monitor, [c["name"] for c in tool_calls], verdict_status, verdict_reason)
        status, reasons, reflection, explanation = plan.status, plan.review_reasons, None, plan.explanation
        metadata: dict[str, Any] = {"finish_reason": gen.finish_reason}
        if verdict_reason:
            metadata["verdict_reason"] = verdict_reason
        if plan.event_action is not None:
            self._emit(on_event, EscalationEvent(
                session_id=session_id, turn=turn, level=plan.level, action=plan.event_action, message=plan.message,
                confidence=monitor.get("cumulative_confidence"), irreversible=plan.irreversible, tool_names=plan.tool_names,
            ))
        if explanation:
            metadata["explanation"] = explanation
        if status == "paused":
            metadata["pause_message"] = plan.message
        if plan.reflect:
            metadata["reflection_prompt"] = REFLECTION_PROMPT
            reflection = REFLECTION_PROMPT
            if self.config.generate_reflection:
                ask = prompt + [{"role": "assistant", "content": gen.text}, {"role": "system", "content": REFLECTION_PROMPT}]

                def on_reflection(piece: str, token_id: int | None, logprob: float | None) -> bool:
                    self._emit(on_event, TokenEvent(session_id=session_id, turn=turn, text=piece, token_id=token_id,
                                                    logprob=logprob, phase="reflection"))
                    return not self._cancel.is_set()

                stated = self._generate(components, ask, self.config.reflection_max_tokens, on_reflection, features=False)
                metadata["reflection"] = stated.text
                reflection = stated.text or REFLECTION_PROMPT
        if tool_calls:
            metadata["tool_calls"] = tool_calls

        mid = self.store.add_answer(
            session_id, gen.text, status=status, created_at=created_at, prompt=prompt, tokens=gen.tokens,
            token_logprobs=gen.logprobs, features=gen.features, feature_model=self._feature_model,
            verdict_status=verdict_status, verdict=verdict, verifier=self._info.verifier_path if self._info else None,
            monitor=monitor, review_reasons=reasons, metadata=metadata,
        )
        review_id = self.store.message(mid).review_id
        self._emit(on_event, TurnFinishedEvent(
            session_id=session_id, turn=turn, status=status, message_id=mid, text=gen.text,
            reflection=reflection, explanation=explanation, review_id=review_id,
        ))
        return TurnResult(status=status, text=gen.text, message_id=mid, verdict_status=verdict_status, verdict=verdict,
                          monitor=monitor, review_id=review_id, reflection=reflection, explanation=explanation,
                          verdict_reason=verdict_reason, **base)

    def _monitor_for(self, session_id: str):
        monitor = self._monitors.get(session_id)
        if monitor is None:
            from mlx_sdm.session.monitoring import MonitorConfig, SessionMonitor

            components = self._require()
            low, medium, high = self.config.auq_thresholds
            config = MonitorConfig(low_threshold=low, medium_threshold=medium, high_threshold=high,
                                   irreversible_tool_names=tuple(self.config.irreversible_tools),
                                   enable_p_true=self.config.enable_p_true,
                                   enable_semantic_sampling=self.config.semantic_sampling)
            monitor = SessionMonitor(session_id, config, lm=components.lm, embedder=components.embedder)
            monitor.replay(self.store.messages(session_id))
            self._monitors[session_id] = monitor
        return monitor

    # ------------------------------------------------------------------ generation and verification

    def _generate(self, components: EngineComponents, messages: list[dict], max_tokens: int,
                  on_token: Callable[[str, int | None, float | None], bool], *, features: bool = True, prefix=None):
        from mlx_sdm.session.generation import generate_answer

        return generate_answer(
            components.lm, messages, max_tokens=max_tokens, temperature=self.config.temperature,
            head=components.head, on_token=on_token, features=features, keep_cache=features, delimiter=self._delimiter(),
            prefix=prefix if self.config.reuse_cache else None,
        )

    def _features_for(self, prompt: list[dict], completion: str) -> np.ndarray:
        from mlx_sdm.lm.features import force_decode_features

        return np.asarray(force_decode_features(self._require().lm, prompt, completion, delimiter=self._delimiter()),
                          dtype=np.float32)

    def _verify(self, features: np.ndarray | None) -> tuple[str, dict | None, str | None]:
        components = self._require()
        if components.verifier is None:
            return "unverifiable", None, components.unverifiable_reason
        if features is None:
            return "unverifiable", None, "no document features were captured"
        verdict = components.verifier.verify_features(np.asarray(features, dtype=np.float32))
        data = verdict.to_dict()
        if not verdict.admitted:
            return "rejected", data, verdict.reason or "below_threshold"
        if int(verdict.prediction) != LABEL_ACCEPTABLE:
            return "rejected", data, REASON_PREDICTED_UNACCEPTABLE
        return "verified", data, None

    # ------------------------------------------------------------------ review feedback

    def _estimator(self) -> Any:
        return self._require().verifier.estimator

    def _support_size(self) -> int | None:
        components = self._require()
        if components.verifier is None:
            return None
        return int(self._estimator().support_size)

    def _reviewed_dir(self) -> Path | None:
        if self.config.reviewed_verifier_dir:
            return Path(self.config.reviewed_verifier_dir)
        components = self._require()
        if components.verifier_path is None:
            return None
        base = Path(components.verifier_path).resolve()
        tag = hashlib.sha256(str(base).encode()).hexdigest()[:8]
        return self.store.path.parent / "verifiers" / f"{base.name}-reviewed-{tag}"

    def _apply_all_support(self, *, save: bool, reload: bool = True) -> None:
        """(Re)build the support set: the base verifier (reloaded from disk unless ``reload=False``) plus
        every active decision made on this model. Points the verifier already holds (a reviewed copy
        passed as --verifier) are not added twice."""
        components = self._require()
        if reload and components.verifier_path is not None:
            from mlx_sdm.network.verifier import DocumentVerifier

            components.verifier = DocumentVerifier.load(components.verifier_path, expect_fingerprint=components.lm.fingerprint)
        held = set(self._estimator().support_ids)
        points = [p for p in self.store.support_points(feature_model=self._feature_model) if p.decision.support_id not in held]
        if points:
            self._estimator().add_support(
                [p.decision.support_id for p in points],
                np.stack([p.features for p in points]).astype(np.float32),
                np.array([p.label for p in points], dtype=np.int64),
                [p.text for p in points],
            )
        if save:
            self._save_reviewed([p.decision.id for p in self.store.support_points(feature_model=self._feature_model)])

    def _save_reviewed(self, decision_ids: list[int]) -> str | None:
        target = self._reviewed_dir()
        if target is None:
            return None
        components = self._require()
        components.verifier.save(target)  # atomic (estimator.save writes through atomic_directory)
        atomic_write_text(
            target.parent / (target.name + ".review.json"),
            json.dumps({"base_verifier": components.verifier_path, "decision_ids": decision_ids,
                        "support_size": self._support_size(), "store": str(self.store.path)}, indent=1),
        )
        return str(target)

    def _decide(self, review_id: int, label: int, note: str | None, completion: str | None,
                on_event: EventCallback | None) -> DecisionResult:
        components = self._require()
        item = self.store.review_item(review_id)
        message = self.store.message(item.message_id)
        features = None
        if completion is not None:
            if message.prompt is None:
                raise DataError(f"review entry {review_id} has no stored prompt, so an edited completion cannot be "
                                "re-encoded; mark it acceptable or unacceptable instead", field="completion")
            features = self._features_for(message.prompt, completion)
        superseded = item.decision is not None
        decision = self.store.record_decision(
            review_id, label, note=note, completion=completion, features=features,
            feature_model=self._feature_model if features is not None else None,
        )
        point_model = self._feature_model if features is not None else message.feature_model
        if components.verifier is None:
            result = DecisionResult(decision.id, review_id, decision.label, False, None, None,
                                    "recorded; no verifier is loaded, so the support set is unchanged")
        elif point_model != self._feature_model or (features is None and message.features is None):
            result = DecisionResult(decision.id, review_id, decision.label, False, self._support_size(), None,
                                    "recorded; the answer's features come from another model, so this verifier cannot use them")
        else:
            if superseded:  # the old label of this entry must leave the support set: rebuild
                self._apply_all_support(save=False)
            else:
                vec = features if features is not None else message.features
                self._estimator().add_support(
                    [decision.support_id], np.asarray(vec, dtype=np.float32)[None, :],
                    np.array([decision.label], dtype=np.int64), [completion or message.text],
                )
            points = self.store.support_points(feature_model=self._feature_model)
            saved = self._save_reviewed([p.decision.id for p in points])
            result = DecisionResult(decision.id, review_id, decision.label, True, self._support_size(), saved,
                                    f"added to the support set (now {self._support_size()} points)")
        self._refresh_info()
        self._emit(on_event, SupportEvent(session_id=item.session_id, turn=0, action="added" if result.applied else "skipped",
                                          support_size=result.support_size, decision_id=decision.id, message=result.message))
        return result

    def _undo(self, on_event: EventCallback | None) -> DecisionResult | None:
        components = self._require()
        decision = self.store.undo_last_decision()
        if decision is None:
            return None
        applied, saved = False, None
        if components.verifier is not None:
            self._apply_all_support(save=False)
            points = self.store.support_points(feature_model=self._feature_model)
            saved = self._save_reviewed([p.decision.id for p in points])
            applied = True
        result = DecisionResult(decision.id, decision.review_id, decision.label, applied, self._support_size(), saved,
                                "decision undone" + (f"; support set back to {self._support_size()} points" if applied else ""))
        self._refresh_info()
        self._emit(on_event, SupportEvent(session_id=None, turn=0, action="removed", support_size=result.support_size,
                                          decision_id=decision.id, message=result.message))
        return result

    def _delete_session(self, session_id: str) -> int:
        removed = self.store.delete_session(session_id)
        self._monitors.pop(session_id, None)
        self._prefix.pop(session_id, None)
        if removed and self._require().verifier is not None:
            self._apply_all_support(save=False)
            self._save_reviewed([p.decision.id for p in self.store.support_points(feature_model=self._feature_model)])
            self._refresh_info()
        return removed

    def _refresh_info(self) -> None:
        if self._info is not None:
            self._info = replace(self._info, support_size=self._support_size())


# ---------------------------------------------------------------------- helpers


@dataclass
class EscalationPlan:
    """What a turn does with its monitor verdict: the answer's status, why it goes to review, the
    escalation event to emit (None at LOW), and whether to ask the model for a reflection."""

    status: str  # "done" | "paused" | "aborted"
    level: str
    event_action: str | None  # None | "log" | "pause" | "abort"
    message: str
    review_reasons: list[str]
    reflect: bool
    irreversible: bool
    tool_names: list[str]
    explanation: str | None = None


def plan_escalation(monitor: dict, tool_names: list[str], verdict_status: str | None,
                    verdict_reason: str | None) -> EscalationPlan:
    """The escalation ladder (monitoring spec § 2.5-2.6) applied to one answer's monitor snapshot."""
    level, action = monitor.get("level") or "low", monitor.get("action") or "proceed"
    irreversible = bool(monitor.get("irreversible"))
    confidence = _fmt(monitor.get("cumulative_confidence"))
    reasons = [verdict_reason or "rejected"] if verdict_status == "rejected" else []
    if action == "abort":
        explanation = (
            f"Aborted: the session's cumulative confidence {confidence} fell below the CRITICAL floor "
            f"({_fmt(monitor.get('critical_below'))}); the answer is kept for review but not used. "
            "Rephrase the question or start a new chat."
        )
        return EscalationPlan("aborted", level, "abort", explanation, reasons + [REASON_ESCALATED_CRITICAL], False,
                              irreversible, tool_names, explanation)
    if action == "pause_for_human":
        by_tool = irreversible and level != "high"
        message = (
            f"Paused at {level.upper()} uncertainty (cumulative confidence {confidence})"
            + (f" before the irreversible tool call(s) {', '.join(tool_names)}" if irreversible else "")
            + ". Give guidance to resume."
        )
        reflect = level == "high" and bool(monitor.get("inject_reflection", True))  # § 2.6: HIGH only, not the override
        return EscalationPlan("paused", level, "pause", message,
                              reasons + [REASON_ESCALATED_IRREVERSIBLE if by_tool else REASON_ESCALATED_HIGH],
                              reflect, irreversible, tool_names)
    if action == "proceed_with_log":
        return EscalationPlan("done", level, "log", f"MEDIUM uncertainty logged (cumulative confidence {confidence})",
                              reasons, False, irreversible, tool_names)
    return EscalationPlan("done", level, None, "", reasons, False, irreversible, tool_names)


_LIVE_ENGINES: "weakref.WeakSet[ChatEngine]" = weakref.WeakSet()


@atexit.register
def _shutdown_live_engines() -> None:
    """An engine left running at interpreter exit is stopped cleanly (its thread clears its MLX streams)."""
    for engine in list(_LIVE_ENGINES):
        engine.shutdown(wait=True, timeout=10)



def _pending_pause(messages: list[MessageRecord]) -> PauseInfo | None:
    for m in reversed(messages):
        if m.role == "user" and m.kind in {"chat", "guidance"}:
            return None  # the user moved on (or already resumed)
        if m.role == "assistant" and m.kind == "chat":
            if m.status != "paused":
                return None
            meta, mon = m.metadata or {}, m.monitor or {}
            return PauseInfo(
                session_id=m.session_id, message_id=m.id, level=mon.get("level"),
                confidence=mon.get("cumulative_confidence"), reflection=meta.get("reflection") or meta.get("reflection_prompt"),
                irreversible=bool(mon.get("irreversible")),
            )
    return None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _now() -> str:
    from mlx_sdm.session.store import now_iso

    return now_iso()

