"""The nested estimator kind ("nested"): high-reliability regions over an α ladder, the estimator of
the method's author's current SDK (PyPI ``reexpress-sdm``; research note "nested SDM estimators").

What it computes, on top of the canonical (v2) quantities q, d, SDM(z′) and q′ = min(q, (2+q)^{SDM_ŷ}):

* a ladder of α (1 − r, 1 − 2r, … above 0.5; r = the resolution, 0.05 by default), and for each α,
  highest first, one **region** fitted on the calibration rows not already claimed by a higher
  region: the smallest q′ cutoff at which, among the remaining rows with q′ ≥ cutoff and ⌊q′⌋ >
  ood_limit, every class c is present and at most ⌊(1 − α)·n_c⌋ of its rows have SDM(z′)_c < α;
  the region keeps that cutoff and, per class, the ⌊(1 − α)·n_c⌋-th smallest SDM(z′)_c of those
  rows as its output threshold. A calibration row the region accepts leaves the residual.
* a row **falls in** a region when ⌊q′⌋ > ood_limit, q′ ≥ the cutoff and exactly one class — the
  prediction — has SDM(z′)_c ≥ its threshold. Its centroid region α is the highest α whose region it
  falls in (0 when none); its DKW-lower region α is the highest α whose region it still falls in after
  d is lowered by that α's DKW error, ε_α = max_c √(ln(2/(1−α)) / 2n̂_c), n̂_c = #{class-c
  calibration q′ ≤ q′}.
* admission at α′: the DKW-lower region α ≥ α′.

Everything is float32 in the SDK's order of operations, so a model read from a ``.sdmkitmodel``
gives the SDK's numbers; distances are squared L2 (the SDK's ``distanceMetric``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.calibration.activation import softmax_numpy
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.state import EstimatorState

__all__ = ["NestedSettings", "Region", "fit_regions", "predict_nested", "region_alphas"]

DEFAULT_RESOLUTION = 0.05
#: The q cap (the SDK's maxNeighbors): q counts the agreeing prefix of the nearest 2048 at most.
DEFAULT_MAX_NEIGHBORS = 2048
#: Relative slack when comparing a region α with α′ (both come from decimal ladders).
ALPHA_SLACK = 1e-9


@dataclass(frozen=True)
class Region:
    """One rung of the ladder: α, the smallest q′ it admits, and one SDM threshold per class."""

    alpha: float
    min_q_prime: float
    thresholds: tuple[float, ...]

    def to_json(self) -> dict:
        return {"alpha": self.alpha, "min_q_prime": self.min_q_prime, "thresholds": list(self.thresholds)}

    @staticmethod
    def from_json(d: dict) -> "Region":
        return Region(float(d["alpha"]), float(d["min_q_prime"]), tuple(float(x) for x in d["thresholds"]))


@dataclass(frozen=True)
class NestedSettings:
    """What prediction needs besides the state: the regions (highest α first) and the constants."""

    regions: tuple[Region, ...]
    resolution: float = DEFAULT_RESOLUTION
    ood_limit: int = 0
    q_offset: float = 2.0
    max_neighbors: int | None = DEFAULT_MAX_NEIGHBORS

    def to_manifest(self) -> dict:
        return {"regions": [r.to_json() for r in self.regions], "alpha_resolution": self.resolution,
                "ood_limit": self.ood_limit, "q_offset": self.q_offset, "max_neighbors": self.max_neighbors,
                "distance_metric": "squared_l2"}

    @staticmethod
    def from_manifest(m: dict) -> "NestedSettings":
        return NestedSettings(tuple(Region.from_json(r) for r in m.get("regions", [])),
                              float(m.get("alpha_resolution", DEFAULT_RESOLUTION)), int(m.get("ood_limit", 0)),
                              float(m.get("q_offset", 2.0)),
                              None if m.get("max_neighbors") is None else int(m["max_neighbors"]))


def ladder(resolution: float = DEFAULT_RESOLUTION) -> tuple[float, ...]:
    """The α ladder, highest first: 1 − k·r for k = 1, 2, … while above 0.5 (rounded to 10 places)."""
    if not 5e-5 <= resolution < 0.5:
        raise ValueError(f"alpha resolution must be in [0.00005, 0.5), got {resolution}")
    out, k = [], 1
    while (a := round(1.0 - k * resolution, 10)) > 0.5:
        out.append(a)
        k += 1
    return tuple(out)


# ------------------------------------------------------------------------------ float32 primitives
def distance_quantile32(d0: np.ndarray, cdfs: list[np.ndarray]) -> np.ndarray:
    """d = min_c (1 − #{S_c < d0}/n_c) in float32; 0 for every row when any class has no distances."""
    d0 = np.maximum(np.asarray(d0, dtype=np.float32).reshape(-1), np.float32(0.0))
    if not cdfs or any(len(c) == 0 for c in cdfs):
        return np.zeros(len(d0), np.float32)
    out = np.ones(len(d0), np.float32)
    for c in cdfs:
        ins = np.searchsorted(np.asarray(c, np.float32), d0, side="left").astype(np.float32)
        np.minimum(out, np.float32(1.0) - ins / np.float32(len(c)), out=out)
    return out


def sdm32(logits: np.ndarray, q: np.ndarray, d: np.ndarray, q_offset: float) -> np.ndarray:
    """SDM(z′) = softmax(z′ · d · ln(q_offset + q)) in float32."""
    z = np.asarray(logits, np.float32)
    scale = np.log(np.asarray(q, np.float32) + np.float32(q_offset))
    x = z * np.asarray(d, np.float32)[:, None] * scale[:, None]
    e = np.exp(x - x.max(axis=1, keepdims=True)).astype(np.float32)
    return e / e.sum(axis=1, keepdims=True, dtype=np.float32)


def q_prime32(q: np.ndarray, p: np.ndarray, q_offset: float) -> np.ndarray:
    """q′ = min(q, (q_offset + q)^p) in float32."""
    q = np.asarray(q, np.float32)
    return np.minimum(q, np.power(np.float32(q_offset) + q, np.asarray(p, np.float32), dtype=np.float32))


def dkw_errors32(sizes: np.ndarray, alpha: float) -> np.ndarray:
    """ε = √(ln(2/(1−α)) / 2n) per entry of ``sizes`` in float32; 1 where n = 0."""
    sizes = np.asarray(sizes, np.int64)
    out = np.ones(sizes.shape, np.float32)
    pos = sizes > 0
    out[pos] = np.sqrt(np.log(np.float32(2.0 / (1.0 - alpha))) / (2 * sizes[pos]).astype(np.float32))
    return out


def falls_in(q_prime: np.ndarray, probs: np.ndarray, yhat: np.ndarray, region: Region, ood_limit: int) -> np.ndarray:
    """Rows that fall in ``region``: in distribution, q′ ≥ its cutoff, exactly the prediction above threshold."""
    qp = np.asarray(q_prime, np.float32)
    above = np.asarray(probs, np.float32) >= np.asarray(region.thresholds, np.float32)
    return ((np.floor(qp) > ood_limit) & (qp >= np.float32(region.min_q_prime)) & (above.sum(axis=1) == 1)
            & above[np.arange(len(yhat)), yhat])


# ---------------------------------------------------------------------------------------- fitting
def _region_at(alpha: float, probs: np.ndarray, q_prime: np.ndarray, labels: np.ndarray, rows: np.ndarray,
               num_classes: int) -> Region | None:
    """The region at ``alpha`` over the candidate ``rows``: the first q′ cutoff (ascending) at which
    every class is present and few enough of its rows are below α; None when no cutoff passes."""
    tail = round(1.0 - alpha, 10)
    order = rows[np.argsort(q_prime[rows], kind="stable")]
    qs, ys = q_prime[order], labels[order]
    below = probs[order, ys] < np.float32(alpha)
    starts = np.flatnonzero(np.r_[True, qs[1:] != qs[:-1]])
    onehot = np.eye(num_classes, dtype=np.int64)[ys]
    counts = np.cumsum(onehot[::-1], axis=0)[::-1][starts]  # rows of each class from each cutoff on
    bad = np.cumsum((onehot * below[:, None])[::-1], axis=0)[::-1][starts]
    ok = np.all((counts > 0) & (bad <= np.floor(tail * counts)), axis=1)
    if not ok.any():
        return None
    kept = order[starts[int(np.argmax(ok))]:]
    thresholds = []
    for c in range(num_classes):
        values = np.sort(probs[kept[labels[kept] == c], c])
        thresholds.append(max(float(values[min(int(tail * len(values)), len(values) - 1)]), 0.0))
    return Region(alpha, float(qs[starts[int(np.argmax(ok))]]), tuple(thresholds))


def fit_regions(probs: np.ndarray, q_prime: np.ndarray, labels: np.ndarray, predictions: np.ndarray,
                num_classes: int, resolution: float = DEFAULT_RESOLUTION, ood_limit: int = 0) -> tuple[Region, ...]:
    """The nested regions, highest α first, from the calibration SDM(z′), q′, labels and predictions."""
    probs = np.asarray(probs, np.float32)
    q_prime = np.asarray(q_prime, np.float32).reshape(-1)
    labels = np.asarray(labels, np.int64).reshape(-1)
    predictions = np.asarray(predictions, np.int64).reshape(-1)
    residual = np.ones(len(labels), bool)
    in_dist = np.floor(q_prime) > ood_limit
    regions: list[Region] = []
    for alpha in ladder(resolution):
        rows = np.flatnonzero(residual & in_dist)
        if rows.size == 0:
            break
        region = _region_at(alpha, probs, q_prime, labels, rows, num_classes)
        if region is None:
            continue
        regions.append(region)
        residual &= ~falls_in(q_prime, probs, predictions, region, ood_limit)
    return tuple(regions)


# ------------------------------------------------------------------------------------- prediction
def region_alphas(logits: np.ndarray, q: np.ndarray, d: np.ndarray, cal_q_prime: list[np.ndarray],
                  settings: NestedSettings) -> dict[str, np.ndarray]:
    """Per row: SDM(z′), q′, the centroid region α, and the DKW-lower region α with the lowered
    SDM and q′ of the rung that admitted it (ε = 1 lowering where no rung did)."""
    z = np.asarray(logits, np.float32)
    n = len(z)
    rows, yhat = np.arange(n), np.argmax(z, axis=1)
    probs = sdm32(z, q, d, settings.q_offset)
    qp = q_prime32(q, probs[rows, yhat], settings.q_offset)
    sizes = np.stack([np.searchsorted(np.asarray(c, np.float32), qp, side="right") for c in cal_q_prime], axis=1)
    centroid = np.zeros(n)
    for region in settings.regions:
        new = falls_in(qp, probs, yhat, region, settings.ood_limit) & (centroid == 0.0)
        centroid[new] = region.alpha
    d = np.asarray(d, np.float32)
    lower_d = np.clip(d - np.float32(1.0), np.float32(0.0), np.float32(1.0))
    lower = sdm32(z, q, lower_d, settings.q_offset)
    qp_lower = q_prime32(q, lower[rows, yhat], settings.q_offset)
    lower_alpha = np.zeros(n)
    for region in settings.regions:
        eps = dkw_errors32(sizes, region.alpha).max(axis=1)
        d_r = np.clip(d - eps, np.float32(0.0), np.float32(1.0))
        p_r = sdm32(z, q, d_r, settings.q_offset)
        qp_r = q_prime32(q, p_r[rows, yhat], settings.q_offset)
        new = falls_in(qp_r, p_r, yhat, region, settings.ood_limit) & (lower_alpha == 0.0)
        lower_alpha[new], lower[new], qp_lower[new] = region.alpha, p_r[new], qp_r[new]
    return {"prediction": yhat, "sdm": probs, "q_prime": qp, "region_alpha": centroid,
            "region_alpha_lower": lower_alpha, "sdm_lower": lower, "q_prime_lower": qp_lower}


def nested_q_d(st: EstimatorState, index: SupportIndex, hp: np.ndarray, yhat: np.ndarray,
               max_neighbors: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, the L2 nearest distance, d) of each row against the support set; d is looked up with the
    squared distance in float32, as the stored (squared L2) distance eCDFs are."""
    qd = index.q_and_nearest(hp, yhat)
    q = qd.q if max_neighbors is None else np.minimum(qd.q, max_neighbors)
    return q, qd.d_nearest, distance_quantile32(squared32(qd.d_nearest), st.dcdf_ca)


def squared32(d_nearest: np.ndarray) -> np.ndarray:
    """The squared L2 distance in float32 (exact float64 distance squared, then rounded once)."""
    return np.square(np.asarray(d_nearest, np.float64)).astype(np.float32)


def admitted_at(region_alpha: np.ndarray, alpha: float) -> np.ndarray:
    """Admission at α′ by region: the row's region α is at least α′."""
    return np.asarray(region_alpha) >= alpha - ALPHA_SLACK


def predict_nested(st: EstimatorState, index: SupportIndex, z: np.ndarray, hp: np.ndarray, alpha: float,
                   settings: NestedSettings) -> dict[str, np.ndarray]:
    """The nested kind's per-row arrays (the keys of predict_paper, plus the two region α)."""
    z = np.asarray(z, np.float32)
    yhat = np.argmax(z, axis=1)
    q, d_nearest, d = nested_q_d(st, index, hp, yhat, settings.max_neighbors)
    r = region_alphas(z, q, d, st.calibration_q_tilde, settings)
    rows = np.arange(len(yhat))
    admitted = admitted_at(r["region_alpha_lower"], alpha)
    return {"prediction": yhat, "q": q, "d": d.astype(np.float64), "d_nearest": d_nearest,
            "q_bin": np.floor(r["q_prime_lower"]).astype(np.int64), "q_tilde": r["q_prime"],
            "q_tilde_lower": r["q_prime_lower"], "p_lower": r["sdm_lower"][rows, yhat],
            "p_centroid": r["sdm"][rows, yhat], "admitted": admitted,
            "ood": np.floor(r["q_prime"]) <= settings.ood_limit, "flipped": np.zeros(len(yhat), bool),
            "softmax": softmax_numpy(z), "logits": z, "exemplar": hp,
            "region_alpha": r["region_alpha"], "region_alpha_lower": r["region_alpha_lower"], "sdm": r["sdm"]}
