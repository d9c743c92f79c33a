"""The session JSONL format: :mod:`.records` (the typed records and allowed values), :mod:`.reader`
(reading and validating), :mod:`.writer` (atomic writing; the format's description) and
:mod:`.provenance` (which product made a session)."""
