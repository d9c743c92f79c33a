"""The SDM calibration estimator (arXiv 2502.20167; docs/method.md § 2–13) on any fixed-width embeddings.

Public entry points: :class:`~mlx_sdm.calibration.estimator.SDMEstimator`,
:class:`~mlx_sdm.calibration.fit_config.FitConfig`, :class:`~mlx_sdm.calibration.data.LabelledSet`
and :func:`~mlx_sdm.calibration.data.read_embedding_jsonl`. Submodules are named for what they hold
(``ecdf``, ``knn``, ``similarity``, ``activation``, ``adaptor``, ``training``, ``rescaler``, ``dkw``,
``threshold``, ``offsets``, ``canonical``, ``data``; the estimator is ``estimator`` with what it is made of:
``fit_config``, ``fitting`` (Alg. 1–3, Eqs. 26–27 in order), ``prediction`` (§ 13, Eq. 28), ``verdict``,
``state`` and ``persistence``).
"""
