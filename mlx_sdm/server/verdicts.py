"""A verdict as the server sends it: the network layer's :class:`DocumentVerdict` with the one badge and
sentence (:func:`mlx_sdm.network.verdict.verdict_words`), the numbers and the nearest exemplars, or the
reason there is no verdict."""

from __future__ import annotations

from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus, exemplar_label_words, verdict_words
from mlx_sdm.server.results import ServedExemplar, ServedVerdict

CANCELLED = "cancelled"


def from_document(judged: DocumentVerdict | None, verifier: str | None, why: str | None = None) -> ServedVerdict:
    """``judged`` None: no verifier judged the answer (``why`` says why)."""
    words = verdict_words(judged, no_verifier_reason=why)
    verdict = judged.verdict if judged is not None else None
    if verdict is None:
        code = judged.reason if judged is not None else VerdictStatus.NO_VERIFIER.value
        return ServedVerdict(status=words.status.value, reason=words.sentence, reason_code=code, badge=words.badge,
                             verifier=verifier, judged=judged)
    exemplars = tuple(
        ServedExemplar(id=str(e.id), label=int(e.label), label_text=exemplar_label_words(e.label),
                       text=e.text, distance=float(e.distance))
        for e in verdict.exemplars
    )
    return ServedVerdict(
        status=words.status.value, reason=words.sentence, reason_code=judged.reason, badge=words.badge,
        p_lower=None if verdict.p_lower is None else float(verdict.p_lower), q=int(verdict.q), d=float(verdict.d),
        q_bin=int(verdict.q_bin), prediction=int(verdict.prediction), exemplars=exemplars, verifier=verifier,
        judged=judged,
    )


def cancelled() -> ServedVerdict:
    """The answer was stopped before it was finished: nothing was judged."""
    return ServedVerdict(status=VerdictStatus.NOT_VERIFIED.value, reason_code=CANCELLED, badge="✘ not verified · stopped",
                         reason="Not verified: the answer was stopped before it was finished.")
