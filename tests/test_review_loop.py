"""The review-loop promise, as scripts/bench/review_loop.py measures it: labelling answers of a task the
verifier has never seen, through add_support (as the review service does), keeps every admitted stratum of
that task's held-out answers >= alpha' at every step, or admits nothing; and reviews make some of them
verifiable."""

from __future__ import annotations

import numpy as np

import mlx_sdm  # noqa: F401
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from tests.scripts_side import load_script

review_loop = load_script("bench/review_loop.py")
Labelled, decision_latency, review_steps = review_loop.Labelled, review_loop.decision_latency, review_loop.review_steps

D = 12


def _task(rng, n, offset, tag):
    """A task in its own region of feature space (coordinate ``offset`` shifted by 6); the answer is
    correct (y = 1) on one side of coordinate 1, as in every task (the signal the adaptor reads)."""
    x = rng.normal(0, 1, (n, D))
    x[:, offset] += 6.0
    y = (x[:, 1] > 0).astype(np.int64)
    x[:, 1] += np.where(y == 1, 1.5, -1.5)
    return x.astype(np.float32), y


def test_review_steps_keep_the_promise_and_open_the_new_task():
    rng = np.random.default_rng(0)
    xa, ya = _task(rng, 400, 0, "a")  # the task the verifier was built on
    est = SDMEstimator.fit(LabelledSet([f"tr{i}" for i in range(200)], xa[:200], ya[:200]),
                           LabelledSet([f"ca{i}" for i in range(200)], xa[200:], ya[200:]),
                           FitConfig(iterations=1, epochs=8, learning_rate=1e-3, exemplar_dim=16, seed=0))
    xb, yb = _task(rng, 250, 8, "b")  # never seen: its own region of feature space
    reviewed = Labelled([f"rev{i}" for i in range(50)], xb[:50], yb[:50], [f"b{i}" for i in range(50)])
    held = Labelled([f"ho{i}" for i in range(200)], xb[50:], yb[50:], [""] * 200)
    steps = review_steps(est, reviewed, held, (0, 10, 25, 50))
    assert [s.reviewed for s in steps] == [0, 10, 25, 50]
    assert [s.support_size for s in steps] == [est.support_size - 50 + n for n in (0, 10, 25, 50)]
    assert all(s.promise_holds(0.95) for s in steps)
    assert steps[0].row.marginal.admitted == 0  # unseen task: nothing admitted before any review
    assert steps[-1].row.marginal.admitted > 0  # after 50 reviews some answers of the new task are admitted


def test_decision_latency_reports_one_timing_per_decision():
    rng = np.random.default_rng(1)
    xa, ya = _task(rng, 200, 0, "a")
    est = SDMEstimator.fit(LabelledSet([f"tr{i}" for i in range(100)], xa[:100], ya[:100]),
                           LabelledSet([f"ca{i}" for i in range(100)], xa[100:], ya[100:]),
                           FitConfig(iterations=1, epochs=4, exemplar_dim=8, seed=0))

    class Verifier:  # the verify_features / estimator surface of a DocumentVerifier
        def __init__(self):
            self.estimator = SDMEstimator.load(saved)

        def verify_features(self, x, explain=0):
            return self.estimator.predict(np.asarray(x)[None, :], explain=explain)[0]

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        saved = f"{tmp}/est"
        est.save(saved)
        answers = Labelled(["x0", "x1", "x2"], xa[:3], ya[:3], ["", "", ""])
        seconds, changed = decision_latency(Verifier, answers, 3)
    assert len(seconds) == 3 and all(s >= 0 for s in seconds) and 0 <= changed <= 3


def test_the_labels_of_a_run_are_scoped_to_the_task_its_questions_route_to():
    """Review labels are kept per verifier and task: the run reports the task whose support set its labels
    join, and refuses questions that would route to several tasks."""
    import pytest

    from mlx_sdm.network.verifier import FeatureRecipe

    label_scope = review_loop.label_scope

    class Verifier:  # the route surface of a DocumentVerifier
        recipe = FeatureRecipe(task_systems=(("Claim:", "checker"), ("Tweet:", "sentiment")),
                               task_names=("fever", "sentiment"))

        def route(self, prompt):
            return self.recipe.route(prompt)

    x, y = np.zeros((2, D), np.float32), np.array([0, 1])
    tweets = Labelled(["t0", "t1"], x, y, ["", ""], ["Tweet: great flight", "Tweet: lost my bag"])
    claims = Labelled(["c0", "c1"], x, y, ["", ""], ["Claim: Paris is in France.", "Claim: Rome is in Spain."])
    unseen = Labelled(["u0", "u1"], x, y, ["", ""], ["Email: win money", "Email: meeting at 3"])
    assert label_scope(Verifier(), tweets, tweets) == "sentiment"
    assert label_scope(Verifier(), unseen) is None  # a task the verifier never saw: unrouted questions
    with pytest.raises(ValueError, match="several tasks"):
        label_scope(Verifier(), tweets, claims)
