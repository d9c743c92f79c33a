"""SDM network layer: verification encoding (docs/method.md § 14), the document-level verifier over LM
features (§ 15.3), the negative/positive vocabulary heads and their fine-tuning (§ 15.1–15.6)."""
