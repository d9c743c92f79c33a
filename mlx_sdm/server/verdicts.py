"""A verdict in the words the server sends: the estimator's numbers mapped to the three states
(verified / not verified / out of scope) with one plain sentence of why, and back to the store's
vocabulary so the chat's review queue sees served answers like its own."""

from __future__ import annotations

from typing import Any

from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.server.results import NOT_VERIFIED, OUT_OF_SCOPE, VERIFIED, ServedExemplar, ServedVerdict

ALPHA_TEXT = "0.95"
LABEL_WORDS = {1: "an acceptable answer", 0: "an unacceptable answer"}
REASON_PREDICTED_UNACCEPTABLE = "predicted_unacceptable"
REASON_OUT_OF_DISTRIBUTION = "out_of_distribution"


def _p(verdict: Any) -> str:
    return "—" if verdict.p_lower is None else f"{verdict.p_lower:.3f}"


def reason_in_words(status: str, code: str | None, verdict: Any) -> str:
    if status == VERIFIED:
        return (f"Verified: the verifier vouches for this answer (p_lower {_p(verdict)} ≥ {ALPHA_TEXT}), "
                "as it did for the similar answers listed.")
    if code == REASON_OUT_OF_DISTRIBUTION:
        return ("Out of scope: the question and answer are unlike anything the verifier was built on, "
                "so it can say nothing about them (not a judgement that the answer is wrong).")
    if code == "index_flipped":
        return ("Not verified: the question is in scope, but the most similar training answers disagree "
                "with the verifier's own prediction, so it cannot vouch for this one.")
    if code == REASON_PREDICTED_UNACCEPTABLE:
        return (f"Not verified: the verifier is confident (p_lower {_p(verdict)}) that this answer is "
                "NOT acceptable.")
    return (f"Not verified: the question is in scope, but the verifier's confidence (p_lower {_p(verdict)}) "
            f"is below {ALPHA_TEXT}.")


def from_estimator(verdict: Any, verifier: str | None) -> ServedVerdict:
    """``calibration.estimator.Verdict`` -> the served verdict (verified = admitted and ŷ = acceptable)."""
    judged = DocumentVerdict(verdict)  # the one rule (mlx_sdm/network/verdict.py)
    status, code = judged.status.value, judged.reason
    exemplars = tuple(
        ServedExemplar(id=str(e.id), label=int(e.label), label_text=LABEL_WORDS.get(int(e.label), f"label {e.label}"),
                       text=e.text, distance=float(e.distance))
        for e in verdict.exemplars
    )
    return ServedVerdict(
        status=status, reason=reason_in_words(status, code, verdict), reason_code=code,
        p_lower=None if verdict.p_lower is None else float(verdict.p_lower), q=int(verdict.q), d=float(verdict.d),
        q_bin=int(verdict.q_bin), prediction=int(verdict.prediction), exemplars=exemplars, verifier=verifier,
        raw=verdict.to_dict(),
    )


def no_verifier(why: str | None) -> ServedVerdict:
    return ServedVerdict(status=OUT_OF_SCOPE, reason="Out of scope: no verifier is loaded for this model"
                         + (f" ({why})." if why else "."), reason_code="no_verifier")


def no_features() -> ServedVerdict:
    return ServedVerdict(status=NOT_VERIFIED, reason="Not verified: the answer is empty, so there is nothing to judge.",
                         reason_code="empty_answer")


def cancelled() -> ServedVerdict:
    return ServedVerdict(status=NOT_VERIFIED, reason="Not verified: the answer was stopped before it was finished.",
                         reason_code="cancelled")


# ---------------------------------------------------------------------- the store's vocabulary


def store_status(verdict: ServedVerdict) -> str:
    """verified | not_verified | out_of_scope | unverifiable, as the chat stores it."""
    if verdict.reason_code in {"no_verifier", "empty_answer"}:
        return "unverifiable"
    return verdict.status


def store_dict(verdict: ServedVerdict) -> dict[str, Any] | None:
    """The verdict row as the chat stores it (``Verdict.to_dict()`` keys) plus the state by name."""
    if verdict.raw is None:
        return None
    return dict(verdict.raw, status=verdict.status, reason_text=verdict.reason)


def review_reasons(verdict: ServedVerdict) -> list[str]:
    """Why a served answer goes to the review queue (empty when verified or nothing judged it)."""
    if verdict.verified or verdict.q is None:
        return []
    return [verdict.reason_code or "below_threshold"]
