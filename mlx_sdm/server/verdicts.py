"""A verdict as the server sends it, at the JSON edge: the turn's :class:`DocumentVerdict` with its badge, its short
line as ``reason`` and the evidence's sentence as ``explanation`` (:mod:`mlx_sdm.network.verdict_words`), the calibrated numbers (null when no estimator judged the answer),
the nearest exemplars and the verifier that judged it; or, for an answer stopped before it was finished, the words
of a stopped answer (nothing was judged)."""

from __future__ import annotations

from typing import Any

from mlx_sdm.network.evidence import exemplar_label_words
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.network.verdict_words import STOPPED, VerdictWords, verdict_words

#: The reason code of a stopped answer.
CANCELLED = "cancelled"


def verdict_body(verdict: DocumentVerdict | None, verifier: str | None) -> dict[str, Any]:
    """The ``verdict`` object of a served answer (None: the answer was stopped, nothing was judged);
    ``verifier``: the folder of the verifier that judged it."""
    if verdict is None:
        return _body(STOPPED, CANCELLED, None, None)
    judged = verdict.verdict
    if judged is None:
        return _body(verdict_words(verdict), verdict.reason, None, verifier)
    numbers = {"p_lower": None if judged.p_lower is None else float(judged.p_lower), "q": int(judged.q),
               "d": float(judged.d), "q_bin": int(judged.q_bin), "prediction": int(judged.prediction),
               "exemplars": [{"id": str(e.id), "label": int(e.label), "label_text": exemplar_label_words(e.label),
                              "text": e.text, "distance": float(e.distance)} for e in judged.exemplars]}
    return _body(verdict_words(verdict), verdict.reason, numbers, verifier)


def _body(words: VerdictWords, code: str | None, numbers: dict[str, Any] | None, verifier: str | None) -> dict[str, Any]:
    numbers = numbers or {"p_lower": None, "q": None, "d": None, "q_bin": None, "prediction": None, "exemplars": []}
    return {"status": words.status.value, "verified": words.status is VerdictStatus.VERIFIED, "reason": words.line,
            "explanation": words.sentence, "reason_code": code, "badge": words.badge, **numbers, "verifier": verifier}
