"""What a prediction returns per row: :class:`Verdict` (ŷ, p̂_lower when admitted by Eq. 28, q, d,
the bucket, why it was not admitted) and the support :class:`Exemplar` s that explain it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

REASONS = ("out_of_distribution", "below_threshold", "index_flipped")


@dataclass
class Exemplar:
    id: str
    label: int
    prediction: int
    distance: float
    text: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Verdict:
    prediction: int
    p_lower: float | None
    admitted: bool
    q: int
    d: float
    q_bin: int
    reason: str | None
    exemplars: list[Exemplar] = field(default_factory=list)
    softmax: list[float] = field(default_factory=list)
    d_nearest: float = 0.0
    q_tilde_lower: float = 0.0
    #: The nested kind only (None otherwise): the highest α of the ladder whose region the row falls
    #: in, by the centroid estimate and by the DKW-lower one (0.0: no region).
    region_alpha: float | None = None
    region_alpha_lower: float | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["exemplars"] = [e.to_dict() for e in self.exemplars]
        for key in ("region_alpha", "region_alpha_lower"):  # the nested kind only; other kinds keep their keys
            if out[key] is None:
                del out[key]
        return out


def verdicts(a: dict[str, np.ndarray], neighbours: list[list[Exemplar]] | None) -> list[Verdict]:
    """One :class:`Verdict` per row of the per-row arrays ``a`` of ``SDMEstimator.predict_arrays``;
    a row not admitted gets the first reason that applies (out of distribution, then flipped)."""
    out = []
    regions = a.get("region_alpha"), a.get("region_alpha_lower")
    for i in range(len(a["prediction"])):
        if a["admitted"][i]:
            reason = None
        elif a["ood"][i]:
            reason = "out_of_distribution"
        elif a["flipped"][i]:
            reason = "index_flipped"
        else:
            reason = "below_threshold"
        out.append(Verdict(
            prediction=int(a["prediction"][i]),
            p_lower=float(a["p_lower"][i]) if a["admitted"][i] else None,
            admitted=bool(a["admitted"][i]), q=int(a["q"][i]), d=float(a["d"][i]), q_bin=int(a["q_bin"][i]),
            reason=reason, exemplars=neighbours[i] if neighbours is not None else [],
            softmax=[float(x) for x in a["softmax"][i]], d_nearest=float(a["d_nearest"][i]),
            q_tilde_lower=float(a["q_tilde_lower"][i]),
            region_alpha=None if regions[0] is None else float(regions[0][i]),
            region_alpha_lower=None if regions[1] is None else float(regions[1][i])))
    return out
