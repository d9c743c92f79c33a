"""The SDM estimator: fit (Alg. 1–3 + Eqs. 26–27, fitting.py), predict (Eq. 28 and the test-time
procedure of docs/method.md § 13, prediction.py), explain by exemplar, add support points without retraining, save
and load (persistence.py).

FitConfig and its defaults (fit_config.py), Verdict and Exemplar (row_verdict.py) and the folder constants
(persistence.py) are imported from the modules that define them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlx_sdm.calibration.adaptor import ExemplarAdaptor, apply_normalization, forward_numpy_batches
from mlx_sdm.calibration.canonical import KIND_NESTED, KIND_V1, KIND_V2, KINDS
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.fitting import Progress, fit_state
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.nested import NestedSettings, distance_quantile32, nested_q_d, predict_nested, squared32
from mlx_sdm.calibration.nested_fit import fit_nested
from mlx_sdm.calibration.persistence import load_estimator, save_estimator
from mlx_sdm.calibration.prediction import predict_canonical, predict_paper
from mlx_sdm.calibration.sdmkit import is_sdmkit_path, load_sdmkit, save_sdmkit
from mlx_sdm.calibration.similarity import distance_quantile
from mlx_sdm.calibration.state import EstimatorState
from mlx_sdm.calibration.training import load_params
from mlx_sdm.calibration.row_verdict import Exemplar, Verdict, verdicts
from mlx_sdm.errors import ArtifactError, DataError



class SDMEstimator:
    """Calibrated p̂(y|x)_lower over fixed embeddings (arXiv 2502.20167 § 2–13)."""

    def __init__(self, state: EstimatorState, manifest: dict, knn_backend: str = "auto"):
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
        self.nested = NestedSettings.from_manifest(manifest["nested"]) if self.kind == KIND_NESTED else None
        self.adaptor = ExemplarAdaptor(self.input_dim, self.exemplar_dim, self.num_classes)
        load_params(self.adaptor, state.params)
        self.adaptor.set_normalization(*state.normalization)
        self.index = SupportIndex(state.support_exemplars, state.support_labels, state.support_predictions,
                                  self.num_classes, backend=knn_backend)

    # ------------------------------------------------------------------------------------------ fit
    @classmethod
    def fit(cls, train: LabelledSet, calibration: LabelledSet, config: FitConfig | None = None,
            source: dict | None = None, progress: Progress = None) -> "SDMEstimator":
        """Alg. 1 with J iterations over train ∪ calibration, then Eqs. 26–27 across iterations."""
        config = config or FitConfig()
        fit = fit_nested if config.estimator == KIND_NESTED else fit_state
        state, manifest = fit(train, calibration, config, source=source, progress=progress)
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
        z, hp = self._forward(embeddings)  # step 1
        if self.nested is not None:
            return predict_nested(self._state, self.index, z, hp, self.alpha, self.nested)
        if self.kind == KIND_V2:
            return predict_canonical(self._state, self.index, z, hp, self.alpha)
        return predict_paper(self._state, self.index, z, hp, self.alpha, self.outcdf_scale)

    def q_and_d(self, embeddings: np.ndarray, distance_cdfs: str = "calibration") -> dict[str, np.ndarray]:
        """ŷ, q (Eq. 5, no self-exclusion, not flip-adjusted), d_nearest and d (Eq. 6) for each row.

        ``distance_cdfs="training"`` uses the training dCDFs instead of the calibration ones, as the
        SDM network does for generated documents (§ 15.5)."""
        if distance_cdfs not in ("calibration", "training"):
            raise ValueError("distance_cdfs must be 'calibration' or 'training'")
        z, hp = self._forward(embeddings)
        yhat = np.argmax(z, axis=1)
        cdfs = self._state.dcdf_ca if distance_cdfs == "calibration" else self._state.dcdf_tr
        if self.nested is not None:  # squared-L2 eCDFs, float32 lookups
            q, d_nearest, _ = nested_q_d(self._state, self.index, hp, yhat, self.nested.max_neighbors)
            return {"prediction": yhat, "q": q, "d_nearest": d_nearest, "logits": z,
                    "d": distance_quantile32(squared32(d_nearest), cdfs).astype(np.float64)}
        qd = self.index.q_and_nearest(hp, yhat)
        return {"prediction": yhat, "q": qd.q, "d_nearest": qd.d_nearest, "d": distance_quantile(qd.d_nearest, cdfs),
                "logits": z}

    def predict(self, embeddings: np.ndarray, explain: int = 0) -> list[Verdict]:
        """One :class:`Verdict` per row; ``explain=k`` adds the k nearest support exemplars."""
        a = self.predict_arrays(embeddings)
        neighbours = self._exemplars(a["exemplar"], explain) if explain > 0 else None
        return verdicts(a, neighbours)

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
        self._check_new_support(ids, embeddings, labels, texts)
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

    def _check_new_support(self, ids: list[str], embeddings: np.ndarray, labels: np.ndarray,
                           texts: list[str | None] | None) -> None:
        """DataError naming the field when the points to add cannot join the support set."""
        if not (len(ids) == len(embeddings) == len(labels)):
            raise DataError(f"ids ({len(ids)}), embeddings ({len(embeddings)}) and labels ({len(labels)}) differ in length")
        if texts is not None and len(texts) != len(ids):
            raise DataError("texts and ids differ in length", field="text")
        if not np.all(np.isfinite(embeddings)):
            raise DataError("embeddings must be finite (no NaN or inf)", field="embedding")
        if np.any((labels < 0) | (labels >= self.num_classes)):
            raise DataError(f"labels must be in 0..{self.num_classes - 1}", field="label")
        known = set(self._state.support_ids)
        for i in ids:
            if i in known:
                raise DataError(f"id {i!r} is already in the support set; ids must be unique", field="id")
            known.add(i)
        if len(set(ids)) != len(ids):
            raise DataError("ids repeat within the added points", field="id")

    @property
    def support_size(self) -> int:
        return len(self._state.support_ids)

    @property
    def support_ids(self) -> list[str]:
        return list(self._state.support_ids)

    @property
    def admits_nothing(self) -> bool:
        """v1 / v2: Alg. 3 found no high-probability region (docs/method.md § 11), so no input is ever admitted
        (the nested kind admits by its own region ladder: not decided here, False)."""
        return self.nested is None and not self._state.threshold_succeeded

    @property
    def has_logistic_reference(self) -> bool:
        """False for a model read from a .sdmkitmodel package, which holds no such reference."""
        return bool(np.any(self._state.lr_weight))

    def logistic_regression_predict(self, embeddings: np.ndarray) -> np.ndarray:
        """Predictions of the logistic-regression reference stored with the estimator."""
        x = apply_normalization(embeddings, self._state.normalization)
        return np.argmax(x @ self._state.lr_weight + self._state.lr_bias, axis=1)

    # ------------------------------------------------------------------------------------ save/load
    def save(self, directory: str | Path) -> None:
        """safetensors + manifest.json + support.json, written as one atomic folder; a path ending in
        ``.sdmkitmodel`` gets the portable package instead (nested kind only)."""
        if is_sdmkit_path(directory):
            save_sdmkit(self._state, self.manifest, directory)
            return
        save_estimator(self._state, self.manifest, directory)

    @classmethod
    def load(cls, directory: str | Path, knn_backend: str = "auto", expect_input_dim: int | None = None) -> "SDMEstimator":
        """Load a saved estimator (a folder of `mlx-sdm train`, or a ``.sdmkitmodel`` package); refuses
        another format version or dimension with ArtifactError."""
        load = load_sdmkit if is_sdmkit_path(directory) else load_estimator
        state, manifest = load(directory, expect_input_dim)
        return cls(state, manifest, knn_backend=knn_backend)
