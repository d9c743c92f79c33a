"""The SDM calibration estimator (arXiv 2502.20167 § 2–13) on any fixed-width embeddings.

Public entry points: :class:`~mlx_sdm.calibration.estimator.SDMEstimator`,
:class:`~mlx_sdm.calibration.estimator.FitConfig`, :class:`~mlx_sdm.calibration.data.LabelledSet`
and :func:`~mlx_sdm.calibration.data.read_embedding_jsonl`. Submodules are named for what they hold
(``ecdf``, ``knn``, ``similarity``, ``activation``, ``adaptor``, ``training``, ``rescaler``, ``dkw``,
``threshold``, ``offsets``, ``estimator``, ``data``).
"""
