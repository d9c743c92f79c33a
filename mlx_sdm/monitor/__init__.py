"""Session monitoring, in four rooms by job (each imports only from the rooms listed before it):

- :mod:`.session_file`: the session JSONL format (records, reader, writer) and the provenance of a
  logged session;
- :mod:`.online`: the per-step monitors the chat runs live: AUQ confidence and escalation, TRACER
  trajectory risk, sentence embedders, P(True) and System 2 sampling from the local model, tracing
  spans, the degenerate-answer rule and the typed :class:`~.online.reading.MonitorReading`;
- :mod:`.forecast`: the session-success forecast ``p_t``: proper scores and Platt maps, the verdict
  monitor, per-step signals, the fitted fusion, the shipped fused monitor and the pause policy;
- :mod:`.evaluation`: offline evaluation of logged sessions (``mlx-sdm eval-monitor``): the
  per-monitor table, the held-out report, plots, the choice of the pause threshold and the
  tau2-bench importer.

See docs/monitoring.md for the formulas."""
