"""The forecast ``p_t`` of session success: proper scores and Platt maps (:mod:`.scoring`), the
verifier as a monitor (:mod:`.verdict`), per-step signals of a session (:mod:`.signals`), the fitted
monitors and their fusion (:mod:`.fusion`), the shipped fused monitor run online (:mod:`.fused`)
and the chat's pause policy (:mod:`.policy`)."""
