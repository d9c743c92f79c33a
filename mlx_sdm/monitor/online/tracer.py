"""TRACER trajectory risk (docs/monitoring.md, TRACER).

Per step: content-aware surprisal ``U`` (3.3), agent repetition ``Da`` (3.4), coherence gaps
``DoA`` / ``DoU`` (3.5); MAX-composite step risk ``r`` and the tail aggregation (3.7):

    r_t    = max(U_t, alpha*Da_t, beta*DoA_t, gamma*DoU_t)
    TRACER = (1-w) * mean(top-K r) + w * max(r),   K = max(1, floor(k*N))

Online: :meth:`TracerMonitor.observe` gives the prefix score ``R_t`` after every step. Offline:
:func:`score_session` scores a whole :class:`~mlx_sdm.monitor.session_file.records.Session`.

The sentence embedder is a choice (:mod:`mlx_sdm.monitor.online.embedders`); every step output records
which one was used (``embedder``; None = Jaccard-only fallback, with ``DoA = DoU = 0``). Steps
without log-probs get ``U = 0`` and ``surprisal_source = "missing"``; for agent steps a
:class:`MonitorWarning` says so once per session.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from mlx_sdm.monitor.online.embedders import Embedder, EmbeddingCache
from mlx_sdm.monitor.session_file.records import Session, SessionStep, ToolCall, TracerOutput

# 3.3: content-token predicate
LOGPROB_THRESHOLD = -0.05  # content iff logprob <= -0.05, i.e. p <= pi_0 = exp(-0.05)
EMPTY_SURPRISAL = 1e-4  # U when a step has no content tokens (the paper's epsilon)
STRIP_CHARS = ".,!?;:()[]{}\"'-"
STOP_WORDS = frozenset(
    """the is are was were be been being a an to of in on at for with from by as or and but if then this that
    these those it its i you he she we they my your his her am can will would could should may have has had do
    does did please sorry wait help need want""".split()
) | frozenset(["[tool_call]", "\n", "\\n", " ", "", ".", ",", "!", "?", ":", ";", "-", "(", ")", "[", "]", "{", "}", "'", '"'])
MAX_EMBED_CHARS = 60_000  # 3.5: keep the last 60,000 characters


class MonitorWarning(UserWarning):
    """A monitor fell back to fewer signals (e.g. missing log-probs) and says so."""


@dataclass
class TracerConfig:
    """Reference defaults (docs/monitoring.md, TRACER weights): (alpha, beta, gamma, k, w) = (4, 4, 5, 0.26, 0.2), tuned on
    tau2 with text-embedding-004; re-tune for a local embedder."""

    alpha: float = 4.0
    beta: float = 4.0
    gamma: float = 5.0
    k: float = 0.26
    w: float = 0.2
    text_window: int = 3  # m: last agent messages compared for text repetition
    tool_window: int = 5  # last agent tool turns compared for duplicate calls
    logprob_threshold: float = LOGPROB_THRESHOLD
    empty_surprisal: float = EMPTY_SURPRISAL
    max_embed_chars: int = MAX_EMBED_CHARS

    @classmethod
    def reference_code_dataclass_defaults(cls) -> "TracerConfig":
        """The ``TRACERConfig`` dataclass defaults of the reference code: (1, 1, 1, 0.1, 0.1)."""
        return cls(alpha=1.0, beta=1.0, gamma=1.0, k=0.1, w=0.1)

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "k"):
            if getattr(self, name) < 0:
                raise ValueError(f"TracerConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.w <= 1.0:
            raise ValueError(f"TracerConfig.w must be in [0, 1], got {self.w}")


# ----------------------------------------------------------------------------------------------
# 3.3 surprisal


def _clean(piece: str) -> str:
    return piece.strip().lower().strip(STRIP_CHARS)


def _is_numeric(clean: str) -> bool:
    digits = clean.replace(".", "").replace("-", "")
    return digits.isdigit()


def is_content_token(token: str, logprob: float | None, threshold: float = LOGPROB_THRESHOLD) -> bool:
    """The 3.3 predicate, checked in order: confident tokens, punctuation, stop words, numbers."""
    if logprob is None or logprob > threshold:
        return False
    clean = _clean(token)
    if not clean or clean in STOP_WORDS:
        return False
    return not _is_numeric(clean)


def content_surprisal(
    tokens: Sequence[str], logprobs: Sequence[float | None], *, threshold: float = LOGPROB_THRESHOLD,
    empty: float = EMPTY_SURPRISAL,
) -> float:
    """U_t = mean(-log p_j) over content tokens; ``empty`` (1e-4) when there are none."""
    if len(tokens) != len(logprobs):
        raise ValueError(f"{len(tokens)} tokens but {len(logprobs)} log-probs; they must align")
    nll = [-lp for tok, lp in zip(tokens, logprobs) if is_content_token(tok, lp, threshold)]
    return float(np.mean(nll)) if nll else empty


# ----------------------------------------------------------------------------------------------
# 3.4 repetition


def tracer_word_set(text: str) -> set[str]:
    words = set()
    for piece in text.lower().split():
        clean = piece.strip(STRIP_CHARS)
        if clean and clean not in STOP_WORDS and not _is_numeric(clean):
            words.add(clean)
    return words


def tracer_jaccard(a: str, b: str) -> float:
    """TRACER lexical Jaccard: whitespace words, punctuation stripped, stop words and numbers dropped;
    0 if either set is empty."""
    sa, sb = tracer_word_set(a), tracer_word_set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def _parse_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def tool_signature(call: ToolCall | dict) -> str:
    """name + arguments sorted by key; a string argument is parsed as JSON first."""
    name = call.name if isinstance(call, ToolCall) else call["name"]
    args = call.arguments if isinstance(call, ToolCall) else call.get("arguments", {})
    return name + json.dumps(_parse_arguments(args), sort_keys=True, ensure_ascii=False, default=str)


def _render_arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def action_text(step: SessionStep) -> str:
    """``content | Tool: name(args) | ...`` (3.5)."""
    parts = [step.text] if step.text else []
    parts += [f"Tool: {c.name}({_render_arguments(c.arguments)})" for c in step.tool_calls]
    return " | ".join(parts)


def observation_text(step: SessionStep) -> str:
    return " | ".join("Observation: " + (o if o else "[empty]") for o in step.observations)


# ----------------------------------------------------------------------------------------------
# 3.7 aggregation


def step_risk(U: float, Da: float, DoA: float, DoU: float, config: TracerConfig) -> float:
    """MAX-composite: r_t = max(U, alpha*Da, beta*DoA, gamma*DoU)."""
    return float(max(U, config.alpha * Da, config.beta * DoA, config.gamma * DoU))


def tracer_score(r: Sequence[float], k: float, w: float) -> float:
    """(1-w)*TM_k + w*max(r); K = max(1, floor(k*N)), all steps if k >= 1; 0 for an empty trajectory."""
    arr = np.asarray(r, dtype=np.float64)
    n = arr.size
    if n == 0:
        return 0.0
    K = n if k >= 1 else max(1, math.floor(k * n + 1e-9))
    top = np.sort(arr)[::-1][:K]
    return float((1.0 - w) * top.mean() + w * arr.max())


def prefix_scores(r: Sequence[float], k: float, w: float) -> list[float]:
    """R_t = TRACER(r_1..r_t) for every prefix (not monotone in t)."""
    return [tracer_score(r[: t + 1], k, w) for t in range(len(r))]


def saup_rms(U: Sequence[float], Da: Sequence[float], DoA: Sequence[float], DoU: Sequence[float], config: TracerConfig) -> float:
    """The "SAUP" baseline of the TRACER code (3.9): sqrt(mean((W_t*U_t)^2)), W_t = 1 + a*Da + b*DoA + g*DoU.

    Not the AUQ EMA propagation (``propagate_ema`` in :mod:`mlx_sdm.monitor.online.auq`)."""
    U, Da, DoA, DoU = (np.asarray(x, dtype=np.float64) for x in (U, Da, DoA, DoU))
    if U.size == 0:
        return 0.0
    W = 1.0 + config.alpha * Da + config.beta * DoA + config.gamma * DoU
    return float(np.sqrt(np.mean((W * U) ** 2)))


# ----------------------------------------------------------------------------------------------
# online monitor


@dataclass
class TracerSessionResult:
    steps: list[TracerOutput]
    score: float
    prefix: list[float]
    embedder: str | None
    missing_logprobs: int = 0  # agent steps whose U fell back to 0

    @property
    def surprisal_available(self) -> bool:
        return self.missing_logprobs == 0


@dataclass
class TracerMonitor:
    """Online TRACER over one session: call :meth:`observe` with each step in order."""

    config: TracerConfig = field(default_factory=TracerConfig)
    embedder: Embedder | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        self._cache = EmbeddingCache(self.embedder) if self.embedder is not None else None
        self._agent_texts: list[str] = []
        self._tool_turns: list[set[str]] = []
        self._last_agent_text: str | None = None
        self.outputs: list[TracerOutput] = []
        self._risks: list[float] = []
        self._warned_missing = False
        self.missing_logprobs = 0

    @property
    def embedder_name(self) -> str | None:
        return self.embedder.name if self.embedder is not None else None

    # -- embeddings ----------------------------------------------------------------------------
    def _cos(self, a: str, b: str) -> float | None:
        if self._cache is None or not a or not b:
            return None
        try:
            va, vb = self._cache.get([a[-self.config.max_embed_chars :], b[-self.config.max_embed_chars :]])
        except Exception as exc:  # embedding failure -> distance 0 (3.5), but say so
            warnings.warn(f"TRACER: embedding failed ({exc}); coherence gap set to 0", MonitorWarning, stacklevel=3)
            return None
        na, nb = np.linalg.norm(va), np.linalg.norm(vb)
        if na == 0 or nb == 0:
            return None
        return float(np.dot(va, vb) / (na * nb))

    def _delta(self, a: str, b: str) -> float:
        """delta(u, v) = clip(1 - cos, 0, 2); 0 if a text is empty, no embedder, or failure."""
        cos = self._cos(a, b)
        return 0.0 if cos is None else float(np.clip(1.0 - cos, 0.0, 2.0))

    # -- per-step features ---------------------------------------------------------------------
    def _surprisal(self, step: SessionStep) -> tuple[float, str]:
        if step.token_logprobs is None:
            if step.actor == "agent":
                self.missing_logprobs += 1
                if not self._warned_missing:
                    self._warned_missing = True
                    where = f"session {self.session_id!r}, " if self.session_id else ""
                    warnings.warn(
                        f"TRACER: {where}step {step.step_id!r} has no token log-probs; surprisal U is set to 0 and "
                        "the risk uses situational signals only (repetition, coherence gaps)",
                        MonitorWarning, stacklevel=3,
                    )
            return 0.0, "missing"
        tokens = step.tokens
        if tokens is None:
            raise ValueError(f"step {step.step_id!r}: token_logprobs without tokens; the content filter needs the token strings")
        return content_surprisal(tokens, step.token_logprobs, threshold=self.config.logprob_threshold,
                                 empty=self.config.empty_surprisal), "logprobs"

    def _repetition(self, step: SessionStep) -> float:
        text_rep = 0.0
        if step.text:
            for previous in self._agent_texts[-self.config.text_window :]:
                J = tracer_jaccard(step.text, previous)
                cos = self._cos(step.text, previous)
                # soft AND: meaning (cos) and words (J); Jaccard-only without an embedder
                value = J if self._cache is None else float(np.clip(cos if cos is not None else 0.0, 0.0, 1.0)) * J
                text_rep = max(text_rep, value)
        tool_rep = 0.0
        if step.tool_calls:
            sigs = {tool_signature(c) for c in step.tool_calls}
            if any(sigs & earlier for earlier in self._tool_turns[-self.config.tool_window :]):
                tool_rep = 1.0
        return max(text_rep, tool_rep)

    def observe(self, step: SessionStep) -> TracerOutput:
        """Score one step and return its features with the prefix score R_t."""
        U, source = self._surprisal(step)
        Da = DoA = DoU = 0.0
        if step.actor == "agent":
            Da = self._repetition(step)
            if step.tool_calls:
                DoA = self._delta(action_text(step), observation_text(step))
            if step.text:
                self._agent_texts.append(step.text)
                self._last_agent_text = step.text
            if step.tool_calls:
                self._tool_turns.append({tool_signature(c) for c in step.tool_calls})
        else:
            if step.tool_calls:  # tau2 telecom user tools: the gap is user tool call vs its observations
                DoU = self._delta(action_text(step), observation_text(step))
            elif self._last_agent_text:
                DoU = self._delta(self._last_agent_text, step.text)
        r = step_risk(U, Da, DoA, DoU, self.config)
        self._risks.append(r)
        out = TracerOutput(U=U, Da=Da, DoA=DoA, DoU=DoU, r=r, prefix_risk=self.score(),
                           embedder=self.embedder_name, surprisal_source=source)
        self.outputs.append(out)
        return out

    def score(self) -> float:
        return tracer_score(self._risks, self.config.k, self.config.w)

    def result(self) -> TracerSessionResult:
        return TracerSessionResult(
            steps=list(self.outputs), score=self.score(), prefix=[o.prefix_risk for o in self.outputs],
            embedder=self.embedder_name, missing_logprobs=self.missing_logprobs,
        )


def score_session(session: Session, config: TracerConfig | None = None, embedder: Embedder | None = None) -> TracerSessionResult:
    """Offline TRACER over a whole session (same features as the online path)."""
    monitor = TracerMonitor(config or TracerConfig(), embedder, session_id=session.session_id)
    for step in session.steps:
        monitor.observe(step)
    return monitor.result()


def risk_to_probability(risk: float | np.ndarray) -> float | np.ndarray:
    """TRACER risk (>= 0, higher = worse) as a success probability: exp(-R) [RESOLVED here; any
    strictly decreasing map leaves AUROC/AUARC unchanged, TPS depends on the choice]."""
    return np.exp(-np.asarray(risk, dtype=np.float64)) if isinstance(risk, np.ndarray) else math.exp(-risk)

