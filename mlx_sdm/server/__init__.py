"""The server (interfaces layer, like the CLI and the TUI): an OpenAI-compatible HTTP app in
front of one worker thread that owns the model, the verifier and the chat store."""
