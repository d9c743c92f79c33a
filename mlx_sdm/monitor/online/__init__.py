"""The monitors the chat runs after every answer: AUQ (:mod:`.auq` and its parts), TRACER
(:mod:`.tracer`, :mod:`.embedders`), the local model's signals (:mod:`.p_true`, :mod:`.sampling`),
OpenTelemetry spans (:mod:`.spans`), the degenerate-answer rule (:mod:`.degenerate`) and what the
monitor says about one answer (:mod:`.reading`)."""
