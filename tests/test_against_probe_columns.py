"""The adaptor-against-probe columns of `mlx-sdm report` and of build-verifier's
Table 1, on hand-built rows where b, c, the exact McNemar p and the verdict are counted by hand."""

from __future__ import annotations

import numpy as np

from mlx_sdm.usecases.build_verifier import ACCURACY_HEAD, accuracy_lines, against_probe_record
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.evaluation import NO_REFERENCE, add_estimator_row, evaluate, format_table


class _Fixed:
    """An estimator whose adaptor predicts embedding column 0 and whose logistic reference predicts
    column 1 (two classes, nothing admitted)."""

    num_classes, alpha, kind = 2, 0.95, "v1"

    def __init__(self, has_reference: bool = True):
        self.has_logistic_reference = has_reference

    def predict_arrays(self, x):
        yhat = x[:, 0].astype(int)
        n = len(yhat)
        return {"prediction": yhat, "softmax": np.eye(2)[yhat] * 0.8 + 0.1, "admitted": np.zeros(n, bool),
                "p_lower": np.zeros(n), "q_bin": np.zeros(n, int)}

    def logistic_regression_predict(self, x):
        return x[:, 1].astype(int)


def _rows(adaptor, probe, labels) -> LabelledSet:
    x = np.stack([adaptor, probe], axis=1).astype(np.float32)
    return LabelledSet([f"r{i}" for i in range(len(labels))], x, np.array(labels))


# 10 rows, all y = 1: the adaptor is right on 0-5 and 9 (7), the probe on 0-8 (9); b = 1 (row 9),
# c = 3 (rows 6-8); k = 4, C(4, i) <= C(4, 1) = 4 for i in {0, 1, 3, 4}: p = (1 + 4 + 4 + 1) / 16 = 0.625.
NOISE = _rows([1, 1, 1, 1, 1, 1, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1] * 10)
# 8 rows: the adaptor right on 0-1, the probe on all; b = 0, c = 6: p = 2 / 2**6 = 0.03125.
GAP = _rows([1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 1, 1, 1, 1])


def _record(name, data, estimator=None):
    ev = evaluate(estimator or _Fixed(), data, name)
    return dict(name=name, size=len(data.labels), adaptor_accuracy=ev.adaptor_accuracy,
                logistic_accuracy=ev.logistic_regression_accuracy, **against_probe_record(ev.against_probe[0].comparison))


def test_build_verifier_columns_on_hand_counted_rows():
    noise, gap = _record("t held-out", NOISE), _record("t shifted", GAP)
    assert {k: noise[k] for k in ("adaptor_only_correct", "logistic_only_correct", "mcnemar_p", "verdict")} == {
        "adaptor_only_correct": 1, "logistic_only_correct": 3, "mcnemar_p": 0.625,
        "verdict": "behind by 2 rows, within sampling noise (p = 0.625)"}
    assert accuracy_lines([noise, gap]) == ACCURACY_HEAD + [
        "| t held-out (10) | 0.700 | 0.900 | 1 | 3 | 0.625 | behind by 2 rows, within sampling noise (p = 0.625) |",
        "| t shifted (8) | 0.250 | 1.000 | 0 | 6 | 0.0312 | behind by 6 rows (p = 0.0312): a real gap |"]
    assert ACCURACY_HEAD[-2] == "| dataset | adaptor accuracy | logistic-regression reference | b | c | McNemar p | verdict |"
    ahead = _record("t swapped", _rows([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0, 1], [1] * 10))
    assert accuracy_lines([ahead])[-1] == "| t swapped (10) | 0.900 | 0.700 | 3 | 1 | 0.625 | adaptor ≥ probe |"


def test_a_row_without_a_reference_says_why():
    record = _record("pkg", NOISE, _Fixed(has_reference=False))
    assert record["mcnemar_p"] is None and record["verdict"] == NO_REFERENCE
    assert accuracy_lines([record])[-1] == f"| pkg (10) | 0.700 | - | - | - | - | {NO_REFERENCE} |"


def test_report_prints_one_line_per_estimator_with_b_c_p_and_verdict():
    ev = add_estimator_row(evaluate(_Fixed(), NOISE, "x.jsonl"), evaluate(_Fixed(has_reference=False), NOISE, "x.jsonl"))
    lines = format_table(ev).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("adaptor against its logistic-regression reference")))
    head, first, second = (line.split() for line in lines[at + 1:at + 4])
    assert head == ["estimator", "adaptor", "logistic-regression", "reference", "b", "c", "McNemar", "p", "verdict"]
    assert first == ["sdm", "p_lower", "0.700", "0.900", "1", "3", "0.625"] + \
        "behind by 2 rows, within sampling noise (p = 0.625)".split()
    assert second == ["sdm", "p_lower", "0.700", "-", "-", "-", "-"] + NO_REFERENCE.split()
    assert len(lines) == at + 4
