"""A verdict as the server sends it: the session layer's :class:`DocumentVerdict` (the ONE rule for
verified / not verified / out of scope, and its plain-word explanation) with the numbers and the
nearest exemplars, or the reason there is no verdict."""

from __future__ import annotations

from typing import Any

from mlx_sdm.network.verdict import DocumentVerdict, exemplar_label_words
from mlx_sdm.server.results import NOT_VERIFIED, OUT_OF_SCOPE, ServedExemplar, ServedVerdict

NO_VERIFIER, EMPTY_ANSWER, CANCELLED = "no_verifier", "empty_answer", "cancelled"


def from_document(judged: DocumentVerdict, verifier: str | None) -> ServedVerdict:
    verdict = judged.verdict
    exemplars = tuple(
        ServedExemplar(id=str(e.id), label=int(e.label), label_text=exemplar_label_words(e.label),
                       text=e.text, distance=float(e.distance))
        for e in verdict.exemplars
    )
    return ServedVerdict(
        status=judged.status.value, reason=judged.explanation(), reason_code=judged.reason,
        p_lower=None if verdict.p_lower is None else float(verdict.p_lower), q=int(verdict.q), d=float(verdict.d),
        q_bin=int(verdict.q_bin), prediction=int(verdict.prediction), exemplars=exemplars, verifier=verifier,
        judged=judged,
    )


def without_verdict(code: str, why: str) -> ServedVerdict:
    """No verifier judged the answer: out of scope when none is loaded, not verified otherwise."""
    if code == NO_VERIFIER:
        return ServedVerdict(status=OUT_OF_SCOPE, reason=f"Out of scope: {why}.", reason_code=code)
    return ServedVerdict(status=NOT_VERIFIED, reason=f"Not verified: {why}.", reason_code=code)


def store_status(verdict: ServedVerdict) -> str:
    """The stored state (the store's VERDICT_STATES): the verdict's own, or "unverifiable" without one."""
    return verdict.status if verdict.judged is not None else "unverifiable"


def store_dict(verdict: ServedVerdict) -> dict[str, Any] | None:
    """What the store keeps of a verdict: ``DocumentVerdict.to_dict()``, as the chat stores it."""
    return verdict.judged.to_dict() if verdict.judged is not None else None
