"""The nested estimator kind: the α ladder, the region fit (against a direct reading of the rule),
region α by centroid and DKW-lower, and `mlx-sdm train --estimator nested` / `verify` / `report`."""

import json

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.calibration.nested import NestedSettings, Region, fit_regions, ladder, region_alphas
from tests.test_estimator_commands import _write


def test_ladder():
    assert ladder(0.05) == (0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55)
    assert ladder(0.1) == (0.9, 0.8, 0.7, 0.6)
    with pytest.raises(ValueError, match="alpha resolution"):
        ladder(0.5)


def test_regions_of_a_known_calibration_set():
    """Per class: q′ 1..20; the ten with q′ ≥ 11 are right with SDM 0.99, the rest at 0.6. At 0.95
    the first passing cutoff is 11 (one 0.6 row among 11 is more than ⌊0.05·11⌋ = 0); those rows
    leave, nothing passes at 0.9 … 0.65, and at 0.6 every remaining row does (cutoff 1)."""
    q = np.tile(np.arange(1, 21, dtype=np.float32), 2)
    y = np.repeat([0, 1], 20)
    p_true = np.where(q >= 11, 0.99, 0.6).astype(np.float32)
    probs = np.where(y[:, None] == np.arange(2), p_true[:, None], 1 - p_true[:, None]).astype(np.float32)
    regions = fit_regions(probs, q, y, y, 2)
    assert [(r.alpha, r.min_q_prime) for r in regions] == [(0.95, 11.0), (0.6, 1.0)]
    assert regions[0].thresholds == pytest.approx((0.99, 0.99)) and regions[1].thresholds == pytest.approx((0.6, 0.6))


def _rule(probs, q, y, yhat, c, resolution=0.05):
    """The region rule read literally: for each α, try every cutoff in ascending order."""
    residual, out = np.ones(len(y), bool), []
    for alpha in ladder(resolution):
        cand = residual & (np.floor(q) > 0)
        if not cand.any():
            break
        tail = round(1 - alpha, 10)
        for cut in np.unique(q[cand]):
            keep = cand & (q >= cut)
            n = [int(np.sum(keep & (y == k))) for k in range(c)]
            bad = [int(np.sum(keep & (y == k) & (probs[:, k] < np.float32(alpha)))) for k in range(c)]
            if all(n[k] > 0 and bad[k] <= int(tail * n[k]) for k in range(c)):
                th = tuple(max(float(np.sort(probs[keep & (y == k), k])[min(int(tail * n[k]), n[k] - 1)]), 0.0)
                           for k in range(c))
                out.append((alpha, float(cut), th))
                above = probs >= np.array(th, np.float32)
                residual &= ~((q >= cut) & (above.sum(1) == 1) & above[np.arange(len(y)), yhat] & (np.floor(q) > 0))
                break
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_region_fit_agrees_with_the_rule_read_literally(seed):
    rng = np.random.default_rng(seed)
    n, c = 300, 3
    y = rng.integers(0, c, n)
    q = np.round(rng.uniform(0, 30, n), 1).astype(np.float32)
    logits = rng.normal(0, 1, (n, c)) + (q[:, None] / 6) * (np.arange(c) == y[:, None])
    probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    yhat = probs.argmax(1)
    got = [(r.alpha, r.min_q_prime, r.thresholds) for r in fit_regions(probs, q, y, yhat, c)]
    assert got == _rule(probs, q, y, yhat, c) and got


def test_region_alpha_centroid_and_lower():
    """Two rows with the same z′ and q: the one with many calibration q′ below it (small DKW error)
    keeps the 0.95 region under the lower estimate; the one with few drops to 0.6."""
    settings = NestedSettings((Region(0.95, 5.0, (0.9, 0.9)), Region(0.6, 1.0, (0.6, 0.6))))
    z = np.array([[3.0, 0.0], [3.0, 0.0], [0.1, 0.0]], np.float32)
    q, d = np.array([10, 10, 10]), np.array([1.0, 1.0, 1.0], np.float32)
    many = [np.full(5000, 0.5, np.float32), np.full(5000, 0.5, np.float32)]
    r = region_alphas(z, q, d, many, settings)
    assert list(r["region_alpha"]) == [0.95, 0.95, 0.0] and list(r["region_alpha_lower"]) == [0.95, 0.95, 0.0]
    few = [np.array([0.5, 50.0], np.float32), np.array([0.5, 50.0], np.float32)]
    r = region_alphas(z[:1], q[:1], d[:1], few, settings)
    assert r["region_alpha"][0] == 0.95 and r["region_alpha_lower"][0] < 0.95
    assert r["sdm_lower"][0, 0] < r["sdm"][0, 0]


def test_train_nested_verify_report(tmp_path, capsys):
    rng = np.random.default_rng(4)
    t, c = _write(tmp_path / "t.jsonl", rng, 150, "t"), _write(tmp_path / "c.jsonl", rng, 150, "c")
    test = _write(tmp_path / "x.jsonl", rng, 60, "x")
    out = tmp_path / "nested"
    assert cli(["train", "--train", t, "--calibration", c, "--out", str(out), "--estimator", "nested",
                           "--iterations", "1", "--epochs", "20", "--exemplar-dim", "16", "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["estimator"] == "nested" and manifest["nested"]["regions"]
    assert "regions (alpha: q' >=): " in capsys.readouterr().out
    verdicts = tmp_path / "v.jsonl"
    assert cli(["verify", "--estimator", str(out), test, "--out", str(verdicts)]) == 0
    rows = [json.loads(line) for line in verdicts.read_text().splitlines()]
    ladder_alphas = {0.0, *ladder(0.05)}
    for r in rows:
        assert r["region_alpha"] in ladder_alphas and r["region_alpha_lower"] in ladder_alphas
        assert r["region_alpha_lower"] <= r["region_alpha"] or r["region_alpha"] == 0.0
        assert r["admitted"] == (r["region_alpha_lower"] >= 0.95)
    assert any(r["region_alpha_lower"] > 0 for r in rows)
    capsys.readouterr()
    plot = tmp_path / "r.png"
    assert cli(["report", "--estimator", str(out), test, "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "sdm nested region" in text and "admission at every alpha of the ladder" in text
    ladder_lines = [line for line in text.splitlines() if line[:4] in ("0.95", "0.9 ", "0.55")]
    assert len(ladder_lines) == 3
    admitted = [int(line.split()[1]) for line in ladder_lines]
    assert admitted == sorted(admitted)  # nested: admitted at a lower α includes everything above it
    assert (tmp_path / "r-ladder-0.png").read_bytes()[:4] == b"\x89PNG"


def test_sdmkit_out_implies_nested_and_refuses_other_kinds(tmp_path, capsys):
    rng = np.random.default_rng(6)
    t, c = _write(tmp_path / "t.jsonl", rng, 100, "t"), _write(tmp_path / "c.jsonl", rng, 100, "c")
    common = ["--train", t, "--calibration", c, "--iterations", "1", "--epochs", "3", "--exemplar-dim", "8", "--quiet"]
    assert cli(["train", *common + ["--out", str(tmp_path / "a.sdmkitmodel"), "--estimator", "v2"]]) == 1
    assert "holds the nested kind only" in capsys.readouterr().err and not (tmp_path / "a.sdmkitmodel").exists()
    assert cli(["train", *common + ["--out", str(tmp_path / "a.sdmkitmodel")]]) == 0
    manifest = json.loads((tmp_path / "a.sdmkitmodel" / "manifest.json").read_text())
    assert manifest["schemaVersion"] == 1 and manifest["metadata"]["mlxSdm"]["config"]["estimator"] == "nested"


def test_verdict_dict_carries_region_alpha_only_for_the_nested_kind():
    from mlx_sdm.calibration.row_verdict import Verdict

    plain = Verdict(0, None, False, 0, 0.0, 0, "below_threshold").to_dict()
    assert "region_alpha" not in plain and "region_alpha_lower" not in plain
    nested = Verdict(0, 0.9, False, 3, 0.5, 2, "below_threshold", region_alpha=0.9, region_alpha_lower=0.85).to_dict()
    assert nested["region_alpha"] == 0.9 and nested["region_alpha_lower"] == 0.85
