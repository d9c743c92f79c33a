"""The Textual terminal UI of mlx-sdm: verified chat, session monitor, escalation and the review queue.

Entry point: :func:`tui.app.run` (called by ``mlx-sdm chat``). The UI talks to the executor only
(:mod:`tui.bridge`); it never imports MLX, so the UI thread never waits on the model.
"""
