"""The label formulation and the marginal baselines (usecases/label_formulation.py) on hand-made rows."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.network.label_member import NO_CLASS, class_index
from mlx_sdm.usecases.label_formulation import (AnswerJudgement, ClassRows, cross_fitted, fit_on_rows,
                                                fit_probe_baselines, fold_index, halves, judge_labels)


def rows(n: int, classes: int, seed: int, *, wrong_share: float = 0.0, spread: float = 0.35) -> ClassRows:
    """Points around one centre per class (well apart), the model's answer the gold except ``wrong_share``."""
    rng = np.random.default_rng(seed)
    gold = np.arange(n) % classes
    centres = np.eye(classes, 16) * 4.0
    features = (centres[gold] + rng.normal(0, spread, (n, 16))).astype(np.float32)
    answer = gold.copy()
    flip = rng.random(n) < wrong_share
    answer[flip] = (gold[flip] + 1) % classes
    return ClassRows(tuple(f"r{seed}-{i}" for i in range(n)), features, gold.astype(np.int64), answer.astype(np.int64),
                     tuple(f"text {i}" for i in range(n)))


def test_class_index_keeps_booleans_apart_from_numbers():
    assert class_index(True, (True, False)) == 0
    assert class_index(False, (True, False)) == 1
    assert class_index(1, (True, False)) == NO_CLASS  # a JSON 1 is not the answer true
    assert class_index(None, ("a", "b")) == NO_CLASS
    assert class_index("b", ("a", "b")) == 1


def test_answer_view_counts_verified_and_wrong_by_hand():
    judged = AnswerJudgement(right=np.array([True, True, False, False, True]),
                             says_right=np.array([True, True, True, False, False]),
                             admitted=np.array([True, False, True, True, True]))
    assert judged.verified.tolist() == [True, False, True, False, False]
    assert judged.verified_wrong.tolist() == [False, False, True, False, False]
    row = judged.row("x")
    # ŷ=1 (says right) admitted: rows 0 and 2, one right → 0.5; ŷ=0 admitted: rows 3 (right: wrong answer) and 4
    assert row.by_prediction[1].accuracy == pytest.approx(0.5)
    assert row.by_prediction[0].accuracy == pytest.approx(0.5)
    assert not judged.holds(0.95)


def test_halves_put_every_class_in_both():
    data = rows(30, 3, 0)
    a, b = halves(data, 0)
    assert len(a) + len(b) == 30
    assert set(a.gold.tolist()) == set(b.gold.tolist()) == {0, 1, 2}
    assert not set(a.ids) & set(b.ids)


def test_fold_index_is_even_and_seeded():
    fold = fold_index(23, 5, 3)
    assert np.bincount(fold).tolist() in ([5, 5, 5, 4, 4], sorted([5, 5, 5, 4, 4], reverse=True))
    assert (fold == fold_index(23, 5, 3)).all()


def test_aps_threshold_is_the_conformal_quantile_by_hand():
    """Two classes, a probe that is sure of class 0 everywhere: the score of a gold-0 row is p0, of a gold-1 row
    p0 + p1 = 1; with 19 rows the (⌈20·0.95⌉ = 19)-th smallest score is the largest."""
    train = rows(40, 2, 1)
    cal = rows(19, 2, 2)
    probe = fit_probe_baselines(train, cal, 2)
    p = probe.softmax(cal.features)
    gold_p = p[np.arange(19), cal.gold]
    scores = np.sum(np.where(p >= gold_p[:, None], p, 0.0), axis=1)
    assert probe.aps_threshold == pytest.approx(np.sort(scores)[18])
    # too few calibration rows for the level: every set holds every class, nothing is verified
    tiny = fit_probe_baselines(train, rows(10, 2, 3), 2)
    assert tiny.aps_threshold > 1.0
    assert not tiny.conformal(rows(20, 2, 4)).verified.any()


def test_label_estimator_verifies_right_answers_and_holds_the_promise():
    """Separable classes, a model right on 90 % of rows: the label estimator admits most rows, verifies only
    answers that agree with its prediction, and every admitted stratum of both views is at least α′."""
    config = FitConfig(seed=0, iterations=2, epochs=20)
    estimator = fit_on_rows(rows(600, 3, 5, wrong_share=0.1, spread=1.0), 3, config)
    test = rows(150, 3, 6, wrong_share=0.1, spread=1.0)
    judged = judge_labels(estimator, test)
    assert judged.verified.sum() >= 0.25 * test.right.sum()
    assert judged.verified_wrong.sum() == 0  # a wrong answer disagrees with a sure prediction
    assert judged.holds(0.95)
    # an admitted prediction that differs from the answer says the answer is wrong, and it is
    said_wrong = judged.admitted & ~judged.says_right
    assert said_wrong.any() and not test.right[said_wrong].any()
    # the label view's classes are the task's answer values
    assert judged.label_row("label") is not None and len(judged.label_row("label").by_class) == 3


def test_cross_fitting_judges_every_row_once_in_order():
    pool = rows(60, 2, 7)
    judged = cross_fitted(pool, 2, FitConfig(seed=0, iterations=1, epochs=5), 3, seed=0)
    assert len(judged.right) == 60
    assert (judged.right == pool.right).all()
    assert (judged.labels[0] == pool.gold).all()


# ----------------------------------------------------------------------------------------- the label member
def label_verifier(tmp_path):
    """A label member over 16-wide features (a fingerprint of hidden size 8), saved and loaded back."""
    from mlx_sdm.network.label_member import LabelAnswers
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe

    estimator = fit_on_rows(rows(400, 2, 5, spread=1.0), 2, FitConfig(seed=0, iterations=2, epochs=20))
    fingerprint = {"architecture": "tiny", "hidden_size": 8, "vocab_size": 10, "num_layers": 1, "head_sha256": "x"}
    verifier = DocumentVerifier(estimator, fingerprint, FeatureRecipe(), labels=LabelAnswers("spam", (True, False)))
    verifier.save(tmp_path / "v")
    return DocumentVerifier.load(tmp_path / "v")


def test_a_label_member_judges_the_answer_it_is_given(tmp_path):
    verifier = label_verifier(tmp_path)
    assert verifier.labels is not None and verifier.labels.answers == (True, False)
    test = rows(60, 2, 8, spread=1.0)
    admitted = [i for i in range(60) if verifier.estimator.predict(test.features[i:i + 1])[0].admitted]
    assert admitted, "the fixture's estimator admits some rows"
    i = admitted[0]
    gold = (True, False)[test.gold[i]]
    right = verifier.verify_features(test.features[i], answer=f'{{"spam": {str(gold).lower()}}}')
    wrong = verifier.verify_features(test.features[i], answer=f'{{"spam": {str(not gold).lower()}}}')
    none = verifier.verify_features(test.features[i], answer="I think it is spam.")
    assert (right.prediction, right.admitted) == (1, True)  # verified
    assert (wrong.prediction, wrong.admitted) == (0, True)  # confidently wrong
    assert (none.prediction, none.admitted) == (0, False)  # not in the task's JSON: nothing to say
    assert right.p_lower == wrong.p_lower  # the same estimate, read against two answers


def test_a_review_joins_a_label_member_as_the_answers_value(tmp_path):
    verifier = label_verifier(tmp_path)
    assert verifier.support_label(None, 1, '{"spam": false}') == 1  # accepted: its own value (index of false)
    assert verifier.support_label(None, 0, '{"spam": false}') == 0  # rejected yes/no: the other value
    assert verifier.support_label(None, 1, "no JSON here") is None
    from mlx_sdm.network.label_member import LabelAnswers

    topics = LabelAnswers("topic", ("sports", "tech", "business"))
    assert topics.support_class(0, '{"topic": "tech"}') is None  # rejected: not which of the others is right
    assert topics.support_class(1, '{"topic": "tech"}') == 1


# ----------------------------------------------------------------------------------------- the choice in a run
def answered_rows(task, n: int, seed: int, *, wrong_share: float = 0.05, offset: int = 0):
    """``AnsweredItem``s of a two-value task whose features separate the gold values (no LM)."""
    from mlx_sdm.network.tasks import AnswerLabel, TaskItem
    from mlx_sdm.network.tasks.answers import AnsweredItem

    data = rows(n, 2, seed, wrong_share=wrong_share, spread=1.0)
    values = task.answer_format.answers
    out = []
    for i in range(n):
        gold, said = values[data.gold[i]], values[data.answer[i]]
        item = TaskItem(f"{seed}-{offset + i}", task.name, f"Is it junk? TEXT: row {offset + i}", gold, "row", "pool")
        out.append(AnsweredItem(item, task.answer_format.completion(said), data.features[i], "stop",
                                AnswerLabel(said, True, said == gold), None))
    return out


def test_the_label_formulation_is_chosen_and_its_held_out_figures_come_from_folds(tmp_path):
    """Where the answer formulation cannot be fitted (the model is almost never wrong), the label member judges
    the task; every unseen row calibrates it, and the held-out rows are judged by folds that did not see them."""
    import json
    from types import SimpleNamespace

    from mlx_sdm.network.tasks.registry import load_task
    from mlx_sdm.usecases.build_verifier import TaskOutcome
    from mlx_sdm.usecases.verifier_choice import LABEL, with_label_members

    path = tmp_path / "junk.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Is it junk? TEXT: row {i}", "answer": {"junk": i % 2 == 0}})
                              for i in range(20)) + "\n")
    task = load_task(str(path))
    trained, pool, held = answered_rows(task, 200, 11), answered_rows(task, 300, 12, offset=1000), \
        answered_rows(task, 100, 13, offset=2000)
    outcome = TaskOutcome(task, pool, held, [])
    lm = SimpleNamespace(fingerprint={"architecture": "tiny", "hidden_size": 8, "vocab_size": 10, "num_layers": 1,
                                      "head_sha256": "x"}, name="tiny")
    args = SimpleNamespace(seed=0, progress=False)
    judges = with_label_members(lm, None, [outcome], [(task, trained, pool)], lambda firsts: None, args,
                                held_out_calibrates=True, config=FitConfig(seed=0, iterations=2, epochs=20))
    choice = judges.choices[task.name]
    assert choice.chosen == LABEL and choice.answer is None and choice.label.verified_right > 0
    assert judges.verifier.labels is not None  # one task: the member is the verifier
    assert judges.verifier.estimator.manifest["training"]["support_size"] + \
        judges.verifier.estimator.manifest["training"]["calibration_size"] == 600  # LoRA rows, D_ca and held-out
    folds = judges.held_out[task.name]
    assert len(folds.right) == 100 and folds.verified.sum() > 0 and folds.holds()


def test_an_epoch_is_kept_whatever_the_selection_metric(monkeypatch):
    """v2's selection metric is the negative balanced sdm loss, below −1 whenever that loss is above 1 (seen on the
    tuned SmolLM2's BBC states): Alg. 1 keeps the best epoch all the same (ties: the later), never none."""
    from dataclasses import replace

    from mlx_sdm.calibration import training

    real = training.reestimate
    monkeypatch.setattr(training, "reestimate", lambda *a, **k: replace(real(*a, **k), metric=-5.0))
    estimator = fit_on_rows(rows(120, 2, 3, spread=1.0), 2, FitConfig(seed=0, iterations=1, epochs=3, estimator="v2"))
    assert estimator.manifest["training"]["epochs_chosen"] == [3]


def test_a_label_member_s_exemplars_read_as_this_answer_to_known_questions():
    """Each nearest known row (its question and gold value) is shown with this answer, right there or not."""
    from mlx_sdm.calibration.row_verdict import Exemplar, Verdict
    from mlx_sdm.network.label_member import LabelAnswers

    labels = LabelAnswers("topic", ("business", "sports"))
    verdict = Verdict(prediction=1, p_lower=0.97, admitted=True, q=5, d=0.8, q_bin=1, reason=None,
                      exemplars=[Exemplar("a", 1, 1, 0.5, "Striker scores late"), Exemplar("b", 0, 0, 0.9, "Profits rise")])
    view = labels.answer_view(verdict, '{"topic": "sports"}')
    assert [(e.text, e.label) for e in view.exemplars] == [('Striker scores late => {"topic": "sports"}', 1),
                                                           ('Profits rise => {"topic": "sports"}', 0)]
    other = labels.answer_view(verdict, '{"topic": "business"}')
    assert [(e.text, e.label) for e in other.exemplars] == [('Striker scores late => {"topic": "business"}', 0),
                                                            ('Profits rise => {"topic": "business"}', 1)]
    assert [e.text for e in labels.answer_view(verdict, "no JSON").exemplars] == ["Striker scores late", "Profits rise"]
