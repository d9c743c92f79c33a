"""Review decisions as their own service: a label on a queued answer puts that answer's document
features into the verifier's support set at once (``SDMEstimator.add_support``, no retraining), and
the reviewed verifier is saved atomically beside the store. A label joins ONLY the verifier it was
given under (the store keeps that verifier's identity with the decision), never another verifier
that happens to run on the same model.

Runs on the thread that owns MLX (it re-encodes edited completions and rebuilds the estimator).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import DataError
from mlx_sdm.session.pipeline import TurnComponents
from mlx_sdm.session.store import ChatStore, SupportPoint


def feature_model_id(fingerprint: dict) -> str:
    """A short, stable id of the model that computed a feature vector."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def verifier_key(path: str | None) -> str | None:
    """The identity a review label is kept under: the base verifier's resolved folder."""
    return None if path is None else str(Path(path).resolve())


@dataclass
class DecisionResult:
    decision_id: int
    review_id: int
    label: int
    applied: bool  # the point went into the verifier's support set
    support_size: int | None
    saved_to: str | None  # where the updated verifier was saved (atomically)
    message: str = ""


class ReviewService:
    """Decisions → the loaded verifier's support set (see the module docstring)."""

    def __init__(self, store: ChatStore, components: TurnComponents, *, reviewed_dir: str | None = None,
                 features_for: Callable[[list[dict], str], np.ndarray] | None = None):
        self.store = store
        self.components = components
        self.feature_model = feature_model_id(components.lm.fingerprint)
        self.verifier = verifier_key(components.verifier_path) if components.verifier is not None else None
        self._reviewed_dir = reviewed_dir
        self._features_for = features_for

    # -- what is loaded -------------------------------------------------------------------------
    @property
    def support_size(self) -> int | None:
        verifier = self.components.verifier
        return None if verifier is None else int(verifier.estimator.support_size)

    def reviewed_dir(self) -> Path | None:
        if self._reviewed_dir:
            return Path(self._reviewed_dir)
        if self.components.verifier_path is None:
            return None
        base = Path(self.components.verifier_path).resolve()
        tag = hashlib.sha256(str(base).encode()).hexdigest()[:8]
        return self.store.path.parent / "verifiers" / f"{base.name}-reviewed-{tag}"

    def points(self) -> list[SupportPoint]:
        """This verifier's labelled points (same model, same verifier)."""
        return self.store.support_points(feature_model=self.feature_model, verifier=self.verifier)

    # -- support set ----------------------------------------------------------------------------
    def apply_all(self, *, save: bool, reload: bool = True) -> None:
        """(Re)build the support set: the base verifier (reloaded from disk unless ``reload=False``)
        plus every active decision given under it. Points it already holds are not added twice."""
        components = self.components
        if components.verifier is None:
            return
        if reload and components.verifier_path is not None:
            from mlx_sdm.network.verifier import DocumentVerifier

            components.verifier = DocumentVerifier.load(components.verifier_path,
                                                        expect_fingerprint=components.lm.fingerprint)
        estimator = components.verifier.estimator
        held = set(estimator.support_ids)
        points = [p for p in self.points() if p.decision.support_id not in held]
        if points:
            estimator.add_support([p.decision.support_id for p in points],
                                  np.stack([p.features for p in points]).astype(np.float32),
                                  np.array([p.label for p in points], dtype=np.int64), [p.text for p in points])
        if save:
            self.save()

    def save(self) -> str | None:
        target = self.reviewed_dir()
        if target is None or self.components.verifier is None:
            return None
        self.components.verifier.save(target)  # atomic (estimator.save writes through atomic_directory)
        atomic_write_text(target.parent / (target.name + ".review.json"), json.dumps(
            {"base_verifier": self.components.verifier_path, "decision_ids": [p.decision.id for p in self.points()],
             "support_size": self.support_size, "store": str(self.store.path)}, indent=1))
        return str(target)

    # -- decisions ------------------------------------------------------------------------------
    def decide(self, review_id: int, label: int, *, note: str | None = None,
               completion: str | None = None) -> DecisionResult:
        """Label a review-queue entry (1 acceptable / 0 unacceptable; ``completion`` = an edited,
        acceptable answer, re-encoded with the model)."""
        item = self.store.review_item(review_id)
        message = self.store.message(item.message_id)
        features = None
        if completion is not None:
            if message.prompt is None or self._features_for is None:
                raise DataError(f"review entry {review_id} has no stored prompt, so an edited completion cannot be "
                                "re-encoded; mark it acceptable or unacceptable instead", field="completion")
            features = self._features_for(message.prompt, completion)
        superseded = item.decision is not None
        given_under = verifier_key(message.verifier) or self.verifier
        decision = self.store.record_decision(
            review_id, label, note=note, completion=completion, features=features,
            feature_model=self.feature_model if features is not None else None, verifier=given_under,
        )
        point_model = self.feature_model if features is not None else message.feature_model

        def result(applied: bool, text: str, saved: str | None = None) -> DecisionResult:
            return DecisionResult(decision.id, review_id, decision.label, applied, self.support_size, saved, text)

        if self.components.verifier is None:
            return result(False, "recorded; no verifier is loaded, so the support set is unchanged")
        if given_under != self.verifier:
            return result(False, "recorded for the verifier that judged this answer; the loaded verifier is another "
                                 "one, so its support set is unchanged")
        if point_model != self.feature_model or (features is None and message.features is None):
            return result(False, "recorded; the answer's features come from another model, so this verifier cannot "
                                 "use them")
        if superseded:  # the old label of this entry must leave the support set: rebuild
            self.apply_all(save=False)
        else:
            vector = features if features is not None else message.features
            self.components.verifier.estimator.add_support(
                [decision.support_id], np.asarray(vector, dtype=np.float32)[None, :],
                np.array([decision.label], dtype=np.int64), [completion or message.text])
        saved = self.save()
        return result(True, f"added to the support set (now {self.support_size} points)", saved)

    def undo(self) -> DecisionResult | None:
        """Undo the most recent decision and take its point out of the support set."""
        decision = self.store.undo_last_decision()
        if decision is None:
            return None
        applied, saved = False, None
        if self.components.verifier is not None:
            self.apply_all(save=False)
            saved, applied = self.save(), True
        text = "decision undone" + (f"; support set back to {self.support_size} points" if applied else "")
        return DecisionResult(decision.id, decision.review_id, decision.label, applied, self.support_size, saved, text)

    def after_delete(self, removed: int) -> None:
        """A deleted session took its decisions with it: rebuild the support set without them."""
        if removed and self.components.verifier is not None:
            self.apply_all(save=False)
            self.save()
