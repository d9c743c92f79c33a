"""Session monitoring: AUQ confidence and escalation (:mod:`.auq`), TRACER trajectory risk
(:mod:`.tracer`), trajectory proper scoring (:mod:`.scoring`), tracing spans (:mod:`.spans`),
sentence embedders (:mod:`.embedders`), P(True) and System 2 sampling from a local model
(:mod:`.p_true`, :mod:`.sampling`), tau2-bench import (:mod:`.tau2`) and offline evaluation
(:mod:`.evaluate`). See docs/monitoring.md for the formulas."""
