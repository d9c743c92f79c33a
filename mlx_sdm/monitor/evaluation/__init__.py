"""Offline evaluation of logged sessions (``mlx-sdm eval-monitor``): per-monitor scores
(:mod:`.evaluate`), the cross-fitted held-out report (:mod:`.heldout`) and its plots (:mod:`.plots`),
the choice of the chat's pause threshold (:mod:`.policy_choice`, which also rebuilds the shipped
``fused_monitor.json``) and the tau2-bench importer (:mod:`.tau2`)."""
