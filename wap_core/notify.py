"""Notifications (minimal stand-in: the Event enum and emit's signature; replaced by helper notify at merge)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse


class Event(str, Enum):
    AUDIT_FAILED = "audit_failed"
    AWAITING_APPROVAL = "awaiting_approval"
    CHANGES_REQUESTED = "changes_requested"
    PUBLISHED = "published"
    DISCARDED = "discarded"
    REFUSED = "refused"
    ROLLED_BACK = "rolled_back"
    EXPIRED = "expired"
    TEST = "test"


def emit(lh: Lakehouse, event: Event, *, table: str, branch: str | None, user: str, status: str | None = None,
         failed_checks: Sequence[str] = (), summary: str = "", snapshot_id: int | None = None) -> None:
    """Queue a notification for every matching target. Never raises, never blocks on the network."""
    pass  # replaced by helper notify at merge
