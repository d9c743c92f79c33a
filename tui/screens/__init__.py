"""Screens of the UI: chat, review queue, sessions, evidence, help and small modal prompts."""
