"""What a turn asks of the parts it does not own, as :class:`typing.Protocol` s: the verifier that judges
its answer (:class:`TurnVerifier`, implemented by :class:`~mlx_sdm.network.verifier.DocumentVerifier`), which
verifier judges a question routed to a task (:class:`VerifierProvider`, implemented by
:class:`~mlx_sdm.executor.review.ReviewService`, whose support sets hold the review labels) and the session
monitor that reads it (:class:`TurnMonitor`, implemented by :class:`~mlx_sdm.turn.monitoring.SessionMonitor`).
The pipeline and the review service call these methods and nothing else. The type checker holds each real class
to its Protocol (tests/test_type_check.py): ``_holds`` below and in ``turn/monitoring.py``, and the turn service,
which hands its review service to the pipeline, fail it when a class drifts from what the turn asks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

import numpy as np

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.records import ToolCall
from mlx_sdm.network.coverage import TaskRoute, VerifierCoverage
from mlx_sdm.network.verdict import DocumentVerdict

if TYPE_CHECKING:  # MLX types: the UI imports the turn's values without loading MLX
    from mlx_sdm.calibration.estimator import SDMEstimator
    from mlx_sdm.monitor.online.p_true import PTrueScorer
    from mlx_sdm.network.second_look import SecondLook, SecondLookSpec
    from mlx_sdm.network.verifier import DocumentVerifier


class JudgedUnit(Protocol):
    """How a verifier reads an answer: where the judged unit ends (``lm.features`` delimiter rules)."""

    @property
    def delimiter(self) -> str: ...

    @property
    def routes_tasks(self) -> bool: ...


class TurnVerifier(Protocol):
    """The verifier a turn is judged by (:class:`~mlx_sdm.network.verifier.DocumentVerifier`)."""

    @property
    def recipe(self) -> JudgedUnit: ...

    @property
    def estimator(self) -> SDMEstimator: ...

    @property
    def members(self) -> Mapping[str, TurnVerifier]: ...

    @property
    def coverage(self) -> VerifierCoverage: ...

    def route(self, prompt: str, previous: str | None = None) -> TaskRoute:
        """Where a question goes (a follow-up read with the question before it)."""

    def recipe_for(self, task: str | None) -> JudgedUnit:
        """How the verifier of ``task`` (a member, or this one) reads an answer."""

    def estimator_for(self, task: str | None) -> SDMEstimator:
        """The estimator whose support set judges ``task``'s questions."""

    def judge(self, features: np.ndarray, explain: int = 5, *, task: str | None = None,
              route: TaskRoute | None = None, answer: str | None = None) -> DocumentVerdict:
        """The verdict on one answer's features (``answer``: its text, which a label member reads)."""

    def support_label(self, task: str | None, right: int, text: str | None) -> int | None:
        """The class a reviewed answer routed to ``task`` joins the judging support set with (None: none)."""

    def second_look_spec(self, task: str | None) -> SecondLookSpec | None:
        """How the member judging ``task`` draws its second look (None: it reads the answer's states alone)."""

    def judge_second_look(self, features: np.ndarray, look: SecondLook, embed: Callable[[list[str]], np.ndarray],
                          explain: int = 5, *, task: str | None, route: TaskRoute | None = None) -> DocumentVerdict:
        """The verdict on one answer from its states and its second look."""

    def save(self, directory: str | Path) -> None:
        """Write the verifier, atomically."""


class VerifierProvider(Protocol):
    """Which verifier judges a question routed to ``task`` (None: unrouted): its support set holds the review labels
    given under that verifier and that task (:class:`~mlx_sdm.executor.review.ReviewService`)."""

    def verifier_for(self, task: str | None) -> TurnVerifier: ...


class AnswerSampler(Protocol):
    """AUQ System 2's sampled answers to the turn's question (docs/monitoring.md, AUQ System 2 sampling)."""

    def sample(self, n: int) -> list[str]: ...


class TurnMonitor(Protocol):
    """The session's monitor (:class:`~mlx_sdm.turn.monitoring.SessionMonitor`): it sees each user step and
    scores each answer."""

    def observe_user(self, text: str, *, new_turn: bool = True) -> None:
        """A user step; ``new_turn``: a new question (False: guidance for a paused turn)."""

    def score_answer(self, *, answer: str, tokens: Sequence[str] | None, logprobs: Sequence[float] | None,
                     tool_calls: Sequence[ToolCall], p_true: PTrueScorer | None = None,
                     verdict: DocumentVerdict | None = None,
                     sampler: AnswerSampler | None = None) -> MonitorReading:
        """The reading of one answer."""


if TYPE_CHECKING:
    def _holds(verifier: DocumentVerifier) -> TurnVerifier:
        """The checker's proof that the real verifier is what :class:`TurnVerifier` says (never called)."""
        return verifier
