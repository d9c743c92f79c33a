"""Use cases: the application wiring between the domain layers and the interfaces.

Loading a verifier or head from a user's spec, building artifacts with progress bars, reading a
command's YAML: everything a command, the chat, the server or a script does *with* the domain
layers lives here, so `calibration/`, `lm/`, `network/`, `monitor/` and `session/` stay free of it.
"""
