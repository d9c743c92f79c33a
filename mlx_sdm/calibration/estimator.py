"""The SDM estimator: fit (Alg. 1–3 + Eqs. 26–27), predict (Eq. 28 and the test-time procedure of
§ 13), explain by exemplar, add support points without retraining, save and load."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from mlx_sdm.atomic import atomic_directory
from mlx_sdm.calibration.activation import flipped, sdm_numpy, sdm_rank_keys, softmax_numpy
from mlx_sdm.calibration.adaptor import ExemplarAdaptor, forward_numpy_batches
from mlx_sdm.calibration.constants import ALPHA_PRIME, EXEMPLAR_DIM, PAPER_BATCH_SIZE, Q_BINS, RESCALER_BATCH_SIZE, \
    RESCALER_LEARNING_RATE, RESCALER_MAX_EPOCHS
from mlx_sdm.calibration.canonical import KIND_V1, KIND_V2, KINDS, predict_v2
from mlx_sdm.calibration.data import LabelledSet, check_fit_sets
from mlx_sdm.calibration.dkw import dkw_epsilon, effective_sample_sizes, rescaled_output, shifted_vectors
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.offsets import output_offsets, robust_q_tilde_min
from mlx_sdm.calibration.rescaler import quantile_vector, rescaled_similarity
from mlx_sdm.calibration.similarity import distance_quantile
from mlx_sdm.calibration.training import IterationResult, load_params, logistic_regression, run_iteration
from mlx_sdm.errors import ArtifactError, DataError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "estimator.safetensors"
SUPPORT = "support.json"

#: Project defaults for Alg. 1, chosen by measurement (see README "Defaults that differ from the
#: paper"); the paper's values are in constants.PAPER_*.
DEFAULT_LEARNING_RATE = 3e-4
DEFAULT_EPOCHS = 40
DEFAULT_ITERATIONS = 5

#: What the stored outCDFs (Eq. 9) hold: the log-odds of sdm(z')_c (activation.sdm_rank_keys). Folders without the manifest key hold
#: sdm(z')_c itself (before issue 9) and are read that way.
OUTCDF_SCALE = "log_odds"

REASONS = ("out_of_distribution", "below_threshold", "index_flipped")


@dataclass
class FitConfig:
    alpha: float = ALPHA_PRIME
    iterations: int = DEFAULT_ITERATIONS
    epochs: int = DEFAULT_EPOCHS
    batch_size: int = PAPER_BATCH_SIZE
    learning_rate: float = DEFAULT_LEARNING_RATE
    seed: int = 0
    exemplar_dim: int = EXEMPLAR_DIM
    normalize: bool = True
    knn_backend: str = "auto"
    rescaler_learning_rate: float = RESCALER_LEARNING_RATE
    rescaler_batch_size: int = RESCALER_BATCH_SIZE
    rescaler_max_epochs: int = RESCALER_MAX_EPOCHS
    #: "v1" = the paper's estimator (arXiv 2502.20167: rescaler, Alg. 3, offsets, Eq. 28);
    #: "v2" = the canonical estimator (arXiv 2509.12760: q′, v2 Alg. 1, SDM_HR^lower), canonical.py.
    estimator: str = KIND_V1


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

    def to_dict(self) -> dict:
        out = asdict(self)
        out["exemplars"] = [e.to_dict() for e in self.exemplars]
        return out


@dataclass
class _State:
    """Everything prediction needs (M*, its support set and eCDFs, offsets)."""

    params: dict[str, np.ndarray]
    normalization: tuple[float, float]
    support_ids: list[str]
    support_texts: list[str | None]
    support_exemplars: np.ndarray
    support_labels: np.ndarray
    support_predictions: np.ndarray
    dcdf_ca: list[np.ndarray]
    dcdf_tr: list[np.ndarray]
    outcdf: list[np.ndarray]
    calibration_q_tilde: list[np.ndarray]
    rescaler: np.ndarray
    psi: np.ndarray
    offsets: np.ndarray  # [C, Q_BINS]
    q_tilde_min_star: float
    q_tilde_min_robust: float
    threshold_succeeded: bool
    lr_weight: np.ndarray
    lr_bias: np.ndarray


class SDMEstimator:
    """Calibrated p̂(y|x)_lower over fixed embeddings (arXiv 2502.20167 § 2–13)."""

    def __init__(self, state: _State, manifest: dict, knn_backend: str = "auto"):
        self._state = state
        self.manifest = manifest
        self.num_classes = int(manifest["num_classes"])
        self.input_dim = int(manifest["input_dim"])
        self.exemplar_dim = int(manifest["exemplar_dim"])
        self.alpha = float(manifest["alpha"])
        self.kind = str(manifest.get("estimator", KIND_V1))
        self.outcdf_scale = str(manifest.get("outcdf_scale", "probability"))
        if self.kind not in KINDS:
            raise ArtifactError(f"manifest estimator kind {self.kind!r} is not one of {KINDS}; use a newer mlx-sdm")
        self.adaptor = ExemplarAdaptor(self.input_dim, self.exemplar_dim, self.num_classes)
        load_params(self.adaptor, state.params)
        self.adaptor.set_normalization(*state.normalization)
        self.index = SupportIndex(state.support_exemplars, state.support_labels, state.support_predictions,
                                  self.num_classes, backend=knn_backend)

    # ------------------------------------------------------------------------------------------ fit
    @classmethod
    def fit(cls, train: LabelledSet, calibration: LabelledSet, config: FitConfig | None = None,
            source: dict | None = None, progress: bool | Callable[[dict], None] | None = None) -> "SDMEstimator":
        """Alg. 1 with J iterations over train ∪ calibration, then Eqs. 26–27 across iterations."""
        config = config or FitConfig()
        if config.iterations < 1 or config.epochs < 1 or config.batch_size < 1 or config.exemplar_dim < 1:
            raise ValueError("FitConfig: iterations, epochs, batch_size and exemplar_dim must all be at least 1")
        if not 0.5 < config.alpha < 1.0:
            raise ValueError(f"FitConfig: alpha must be in (0.5, 1), got {config.alpha}")
        if config.estimator not in KINDS:
            raise ValueError(f"FitConfig: estimator must be one of {KINDS}, got {config.estimator!r}")
        num_classes = check_fit_sets(train, calibration)
        pool = LabelledSet.concat(train, calibration)
        rng = np.random.default_rng(config.seed)
        callback, bar = _progress(progress, config)
        results: list[IterationResult] = []
        best: IterationResult | None = None
        started = time.time()
        try:
            for j in range(1, config.iterations + 1):
                res = run_iteration(j, pool.embeddings, pool.labels, num_classes, config, rng, callback)
                results.append(res)
                if best is None or res.state.metric >= best.state.metric:  # ties → later j
                    best = res
        finally:
            if bar is not None:
                bar.close()
        q_mins = [r.threshold.q_tilde_min for r in results]  # failed iterations contribute +inf
        q_min_star = best.threshold.q_tilde_min
        if config.estimator == KIND_V2:  # no robust offsets in the canonical estimator
            q_min_robust, offsets = q_min_star, np.zeros((num_classes, Q_BINS))
        else:
            q_min_robust = robust_q_tilde_min(q_min_star, q_mins, config.alpha)  # Eq. 26
            offsets = output_offsets([r.medians for r in results], num_classes, config.alpha)  # Eq. 27
        assert best is not None  # iterations >= 1
        est = best.state
        support = pool.subset(best.train_index)
        cal = pool.subset(best.calibration_index)
        # logistic-regression reference on the same split and the same scalar normalisation
        mu, sigma = best.normalization
        lr_w, lr_b = logistic_regression((support.embeddings - mu) / sigma, support.labels, num_classes)
        lr_train = float(np.mean(np.argmax(((support.embeddings - mu) / sigma) @ lr_w + lr_b, 1) == support.labels))
        lr_cal = float(np.mean(np.argmax(((cal.embeddings - mu) / sigma) @ lr_w + lr_b, 1) == cal.labels))
        state = _State(
            params=best.params, normalization=best.normalization,
            support_ids=list(support.ids),
            support_texts=list(support.texts) if support.texts is not None else [None] * len(support),
            support_exemplars=est.hp_tr.astype(np.float32), support_labels=support.labels.copy(),
            support_predictions=est.yhat_tr.astype(np.int64),
            dcdf_ca=est.dcdf_ca, dcdf_tr=est.dcdf_tr, outcdf=est.outcdf,
            calibration_q_tilde=best.calibration_q_tilde, rescaler=best.rescaler_weight,
            psi=best.threshold.psi, offsets=offsets, q_tilde_min_star=q_min_star,
            q_tilde_min_robust=q_min_robust, threshold_succeeded=best.threshold.succeeded,
            lr_weight=lr_w, lr_bias=lr_b)
        manifest = {
            "format_version": FORMAT_VERSION,
            "estimator": config.estimator,
            "outcdf_scale": OUTCDF_SCALE,
            "input_dim": int(train.dim),
            "exemplar_dim": int(config.exemplar_dim),
            "num_classes": num_classes,
            "alpha": float(config.alpha),
            "iterations": int(config.iterations),
            "source": dict(source or {}),
            "config": asdict(config),
            "normalization": {"mu": best.normalization[0], "sigma": best.normalization[1]},
            "q_tilde_min_star": _finite_or_none(q_min_star),
            "q_tilde_min_robust": _finite_or_none(q_min_robust),
            "threshold_succeeded": bool(best.threshold.succeeded),
            "psi": [float(x) for x in best.threshold.psi],
            "training": {
                "best_iteration": best.iteration,
                "iterations": [r.stats() for r in results],
                "epochs_chosen": [r.epoch for r in results],
                "train_accuracy": est.train_accuracy,
                "calibration_accuracy": est.calibration_accuracy,
                "logistic_regression": {"train_accuracy": lr_train, "calibration_accuracy": lr_cal},
                "support_size": len(support),
                "calibration_size": len(cal),
                "seconds": round(time.time() - started, 2),
            },
        }
        return cls(state, manifest, knn_backend=config.knn_backend)

    # -------------------------------------------------------------------------------------- predict
    def _forward(self, embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim == 1:
            embeddings = embeddings[None, :]
        if embeddings.shape[1] != self.input_dim:
            raise DataError(f"has width {embeddings.shape[1]} but this estimator was trained on width {self.input_dim}",
                            field="embedding")
        return forward_numpy_batches(self.adaptor, embeddings)

    def predict_arrays(self, embeddings: np.ndarray) -> dict[str, np.ndarray]:
        """The § 13 test-time procedure (v1) or SDM_HR^lower (v2), vectorised. Per-row arrays
        (prediction, q, d, p_lower, admitted, ...)."""
        if self.kind == KIND_V2:
            return self._predict_arrays_v2(embeddings)
        st = self._state
        z, hp = self._forward(embeddings)  # step 1
        yhat = np.argmax(z, axis=1)
        rows = np.arange(len(yhat))
        qd = self.index.q_and_nearest(hp, yhat)  # step 2: Eq. 5, no exclusion
        d = distance_quantile(qd.d_nearest, st.dcdf_ca)  # step 3: Eq. 6
        s = sdm_numpy(z, qd.q, d)  # step 4: Eq. 7
        sdm_flip = flipped(s, yhat)
        q_prime = np.where(sdm_flip, 0, qd.q)
        # step 5: Eq. 9 (outCDFs over the log-odds of sdm, OUTCDF_SCALE; over sdm in older folders)
        v = quantile_vector(sdm_rank_keys(z, qd.q, d) if self.outcdf_scale == OUTCDF_SCALE else s, st.outcdf)
        q_tilde = rescaled_similarity(v, yhat, q_prime)  # Eq. 10
        centroid = rescaled_output(v, q_tilde, st.rescaler)  # Eq. 11
        centroid_flip = np.argmax(centroid, axis=1) != yhat
        q_tilde = np.where(centroid_flip, 0.0, q_tilde)
        n_hat = effective_sample_sizes(q_tilde, st.calibration_q_tilde)  # step 6: Eq. 12
        eps = dkw_epsilon(n_hat, self.alpha)  # Eq. 13
        v_lower, _ = shifted_vectors(v, yhat, eps)  # step 7: Eq. 14
        q_tilde_lower = rescaled_similarity(v_lower, yhat, q_prime)  # Eq. 16
        lower = rescaled_output(v_lower, q_tilde_lower, st.rescaler)  # Eq. 18
        lower_flip = np.argmax(lower, axis=1) != yhat
        q_tilde_lower = np.where(lower_flip, 0.0, q_tilde_lower)
        q_bin = np.floor(q_tilde_lower).astype(np.int64)
        m = st.offsets[yhat, np.clip(q_bin, 0, Q_BINS - 1)]
        m = np.where(q_bin < Q_BINS, m, 0.0)  # a bucket never observed has no offset
        p_adj = lower[rows, yhat] - m
        # Eq. 28 (with the reference's equivalent conditions, § 13 step 8)
        admitted = (st.threshold_succeeded & (q_bin >= 1) & (q_tilde_lower >= st.q_tilde_min_star)
                    & (q_tilde_lower >= st.q_tilde_min_robust) & (p_adj >= st.psi[yhat]))
        ood = (qd.q == 0) | (d <= 0)
        flip_any = sdm_flip | centroid_flip | lower_flip
        return {"prediction": yhat, "q": qd.q, "d": d, "d_nearest": qd.d_nearest, "q_bin": q_bin,
                "q_tilde": q_tilde, "q_tilde_lower": q_tilde_lower, "p_lower": np.maximum(0.0, p_adj),
                "p_centroid": centroid[rows, yhat], "admitted": admitted, "ood": ood, "flipped": flip_any & ~ood,
                "softmax": softmax_numpy(z), "logits": z, "exemplar": hp}

    def _predict_arrays_v2(self, embeddings: np.ndarray) -> dict[str, np.ndarray]:
        st = self._state
        z, hp = self._forward(embeddings)
        yhat = np.argmax(z, axis=1)
        qd = self.index.q_and_nearest(hp, yhat)  # v2 Eq. 4, no exclusion
        d = distance_quantile(qd.d_nearest, st.dcdf_ca)  # v2 Eq. 5
        r = predict_v2(z, qd.q, d, st.calibration_q_tilde, st.psi, st.q_tilde_min_star, st.threshold_succeeded,
                       self.alpha)
        ood = qd.q == 0
        q_bin = np.floor(r["q_prime_lower"]).astype(np.int64)
        return {"prediction": yhat, "q": qd.q, "d": d, "d_nearest": qd.d_nearest, "q_bin": q_bin,
                "q_tilde": r["q_prime"], "q_tilde_lower": r["q_prime_lower"],
                "p_lower": r["p_lower"],
                "p_centroid": r["p_centroid"], "admitted": r["admitted"], "ood": ood,
                "flipped": np.zeros(len(yhat), bool), "softmax": softmax_numpy(z), "logits": z, "exemplar": hp}

    def q_and_d(self, embeddings: np.ndarray, distance_cdfs: str = "calibration") -> dict[str, np.ndarray]:
        """ŷ, q (Eq. 5, no self-exclusion, not flip-adjusted), d_nearest and d (Eq. 6) for each row.

        ``distance_cdfs="training"`` uses the training dCDFs instead of the calibration ones, as the
        SDM network does for generated documents (§ 15.5)."""
        if distance_cdfs not in ("calibration", "training"):
            raise ValueError("distance_cdfs must be 'calibration' or 'training'")
        z, hp = self._forward(embeddings)
        yhat = np.argmax(z, axis=1)
        qd = self.index.q_and_nearest(hp, yhat)
        cdfs = self._state.dcdf_ca if distance_cdfs == "calibration" else self._state.dcdf_tr
        return {"prediction": yhat, "q": qd.q, "d_nearest": qd.d_nearest, "d": distance_quantile(qd.d_nearest, cdfs),
                "logits": z}

    def predict(self, embeddings: np.ndarray, explain: int = 0) -> list[Verdict]:
        """One :class:`Verdict` per row; ``explain=k`` adds the k nearest support exemplars."""
        a = self.predict_arrays(embeddings)
        neighbours = self._exemplars(a["exemplar"], explain) if explain > 0 else None
        out = []
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
                q_tilde_lower=float(a["q_tilde_lower"][i])))
        return out

    def explain(self, embeddings: np.ndarray, k: int = 5) -> list[list[Exemplar]]:
        """The k nearest support exemplars of each row (interpretability by exemplar)."""
        _, hp = self._forward(embeddings)
        return self._exemplars(hp, k)

    def _exemplars(self, hp: np.ndarray, k: int) -> list[list[Exemplar]]:
        st = self._state
        idx, dist = self.index.nearest(hp, k)
        return [[Exemplar(st.support_ids[j], int(st.support_labels[j]), int(st.support_predictions[j]), float(dd),
                          st.support_texts[j]) for j, dd in zip(ri, rd)] for ri, rd in zip(idx, dist)]

    # ---------------------------------------------------------------------------------- add support
    def add_support(self, ids: list[str], embeddings: np.ndarray, labels, texts: list[str | None] | None = None) -> None:
        """Add labelled points to the support set without retraining: their h' and current ŷ are
        computed with the frozen adaptor; q and d of later queries see them at once."""
        st = self._state
        ids = [str(i) for i in ids]
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim == 1:
            embeddings = embeddings[None, :]
        if not (len(ids) == len(embeddings) == len(labels)):
            raise DataError(f"ids ({len(ids)}), embeddings ({len(embeddings)}) and labels ({len(labels)}) differ in length")
        if texts is not None and len(texts) != len(ids):
            raise DataError("texts and ids differ in length", field="text")
        if not np.all(np.isfinite(embeddings)):
            raise DataError("embeddings must be finite (no NaN or inf)", field="embedding")
        if np.any((labels < 0) | (labels >= self.num_classes)):
            raise DataError(f"labels must be in 0..{self.num_classes - 1}", field="label")
        known = set(st.support_ids)
        for i in ids:
            if i in known:
                raise DataError(f"id {i!r} is already in the support set; ids must be unique", field="id")
            known.add(i)
        if len(set(ids)) != len(ids):
            raise DataError("ids repeat within the added points", field="id")
        z, hp = self._forward(embeddings)
        preds = np.argmax(z, axis=1).astype(np.int64)
        st.support_ids.extend(ids)
        st.support_texts.extend(texts if texts is not None else [None] * len(ids))
        st.support_exemplars = np.concatenate([st.support_exemplars, hp.astype(np.float32)])
        st.support_labels = np.concatenate([st.support_labels, labels])
        st.support_predictions = np.concatenate([st.support_predictions, preds])
        self.index.add(hp, labels, preds)
        self.manifest.setdefault("support_added", 0)
        self.manifest["support_added"] += len(ids)
        self.manifest["training"]["support_size"] = len(st.support_ids)

    @property
    def support_size(self) -> int:
        return len(self._state.support_ids)

    @property
    def support_ids(self) -> list[str]:
        return list(self._state.support_ids)

    def logistic_regression_predict(self, embeddings: np.ndarray) -> np.ndarray:
        """Predictions of the logistic-regression reference stored with the estimator."""
        mu, sigma = self._state.normalization
        x = (np.asarray(embeddings, dtype=np.float32) - mu) / sigma
        return np.argmax(x @ self._state.lr_weight + self._state.lr_bias, axis=1)

    # ------------------------------------------------------------------------------------ save/load
    def save(self, directory: str | Path) -> None:
        """safetensors + manifest.json + support.json, written as one atomic folder."""
        from safetensors.numpy import save_file

        st = self._state
        tensors = {f"adaptor.{k}": np.ascontiguousarray(v) for k, v in st.params.items()}
        tensors.update({
            "support.exemplars": st.support_exemplars, "support.labels": st.support_labels,
            "support.predictions": st.support_predictions, "rescaler": st.rescaler, "psi": st.psi,
            "offsets": st.offsets, "lr.weight": st.lr_weight, "lr.bias": st.lr_bias,
        })
        for name, arrays in (("dcdf_ca", st.dcdf_ca), ("dcdf_tr", st.dcdf_tr), ("outcdf", st.outcdf),
                             ("cal_q_tilde", st.calibration_q_tilde)):
            for c, arr in enumerate(arrays):
                tensors[f"{name}.{c}"] = np.ascontiguousarray(arr)
        manifest = dict(self.manifest)
        manifest["normalization"] = {"mu": st.normalization[0], "sigma": st.normalization[1]}
        manifest["q_tilde_min_star"] = _finite_or_none(st.q_tilde_min_star)
        manifest["q_tilde_min_robust"] = _finite_or_none(st.q_tilde_min_robust)
        manifest["threshold_succeeded"] = bool(st.threshold_succeeded)
        manifest["files"] = {"weights": WEIGHTS, "support": SUPPORT}
        with atomic_directory(directory) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / WEIGHTS),
                      metadata={"format_version": str(FORMAT_VERSION)})
            (tmp / SUPPORT).write_text(json.dumps({"ids": st.support_ids, "texts": st.support_texts}), encoding="utf-8")
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path, knn_backend: str = "auto", expect_input_dim: int | None = None) -> "SDMEstimator":
        """Load a saved estimator; refuses another format version or dimension with ArtifactError."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        directory = Path(directory)
        mpath = directory / MANIFEST
        if not mpath.is_file():
            raise ArtifactError(f"{directory}: no {MANIFEST}; not an SDM estimator folder (make one with `mlx-sdm train`)")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{mpath}: corrupt manifest ({exc.msg})") from exc
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise ArtifactError(f"{mpath}: format_version {version!r}, but this mlx-sdm reads format_version "
                                f"{FORMAT_VERSION}; retrain with `mlx-sdm train` or use the matching mlx-sdm version")
        if expect_input_dim is not None and int(manifest.get("input_dim", -1)) != int(expect_input_dim):
            raise ArtifactError(f"{mpath}: input_dim {manifest.get('input_dim')} but the embeddings here have dimension "
                                f"{expect_input_dim}; use an estimator trained on the same embedding model")
        try:
            t = load_file(str(directory / WEIGHTS))
            support = json.loads((directory / SUPPORT).read_text(encoding="utf-8"))
        except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a truncated or corrupt file
            raise ArtifactError(f"{directory}: cannot read the estimator files ({exc}); the folder is corrupt or "
                                "incomplete: copy it again or rebuild it with `mlx-sdm train`") from exc
        c, dim, m = int(manifest["num_classes"]), int(manifest["input_dim"]), int(manifest["exemplar_dim"])
        params = {k[len("adaptor."):]: v for k, v in t.items() if k.startswith("adaptor.")}
        g = params.get("g.weight")
        if g is None or g.shape != (m, dim) or t["support.exemplars"].shape[1:] != (m,) or t["rescaler"].shape != (c, c):
            raise ArtifactError(f"{directory}: weight shapes do not match the manifest's dimensions "
                                f"(input_dim {dim}, exemplar_dim {m}, num_classes {c}); the folder is corrupt")
        norm = manifest["normalization"]

        def _inf(x):
            return float("inf") if x is None else float(x)

        state = _State(
            params=params, normalization=(float(norm["mu"]), float(norm["sigma"])),
            support_ids=list(support["ids"]), support_texts=list(support["texts"]),
            support_exemplars=t["support.exemplars"], support_labels=t["support.labels"],
            support_predictions=t["support.predictions"],
            dcdf_ca=[t[f"dcdf_ca.{i}"] for i in range(c)], dcdf_tr=[t[f"dcdf_tr.{i}"] for i in range(c)],
            outcdf=[t[f"outcdf.{i}"] for i in range(c)], calibration_q_tilde=[t[f"cal_q_tilde.{i}"] for i in range(c)],
            rescaler=t["rescaler"], psi=t["psi"], offsets=t["offsets"],
            q_tilde_min_star=_inf(manifest["q_tilde_min_star"]), q_tilde_min_robust=_inf(manifest["q_tilde_min_robust"]),
            threshold_succeeded=bool(manifest["threshold_succeeded"]), lr_weight=t["lr.weight"], lr_bias=t["lr.bias"])
        return cls(state, manifest, knn_backend=knn_backend)


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _progress(progress, config: FitConfig):
    """(callback, tqdm bar or None): iteration j of J, epoch, loss, balanced q, time left."""
    if progress is None or progress is False:
        return None, None
    if callable(progress):
        return progress, None
    from tqdm import tqdm

    bar = tqdm(total=config.iterations * config.epochs, desc="Alg. 1", unit="epoch", dynamic_ncols=True)

    def callback(info: dict) -> None:
        bar.set_description(f"iteration {info['iteration']}/{info['iterations']}")
        bar.set_postfix(epoch=info["epoch"], loss=f"{info['loss']:.4f}", balanced_q=f"{info['balanced_q']:.1f}")
        bar.update(1)

    return callback, bar
