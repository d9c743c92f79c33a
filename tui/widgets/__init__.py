"""Widgets of the chat and review screens."""

from tui.widgets.evidence_panel import EvidencePanel
from tui.widgets.message import MessageBubble
from tui.widgets.monitor import MonitorPanel
from tui.widgets.review_list import ReviewList
from tui.widgets.verdict_badge import VerdictBadge

__all__ = ["EvidencePanel", "MessageBubble", "MonitorPanel", "ReviewList", "VerdictBadge"]
