"""The outbox: :func:`emit` renders one body per matching target and INSERTs it into ``wap_outbox``.

Emitting never raises and never touches the network; the deliverer (:mod:`.deliverer`) sends the rows.
Also :func:`notify_test`, the ``notify-test`` command.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

from sqlalchemy import insert

from wap_core.exceptions import NotifyFileError
from wap_core.notify.config import (
    EVENT_TITLES,
    DeliveryState,
    Event,
    NotifyConfig,
    Webhook,
    WebhookFormat,
    config_for,
    link_for,
    slack_escape,
)
from wap_core.notify.deliverer import TestOutcome, deliverer_for, outbox_table, send_now
from wap_core.states import Action, Outcome
from wap_core.store.journal import Journal, JournalEntry, mask_values, process_owner, utcnow
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from wap_core.config import Settings


log = logging.getLogger(__name__)

_MAX_SUMMARY = 1500  # characters of summary in a Slack block (a section holds at most 3000)
_MAX_CHECKS_SHOWN = 20


@dataclass(frozen=True)
class Notification:
    """One event, rendered the same for every target (``at`` is when it happened)."""

    event: Event
    table: str | None
    branch: str | None
    user: str
    at: str
    status: str | None
    failed_checks: tuple[str, ...]
    summary: str
    link: str
    snapshot_id: int | None = None
    # ``quarantined`` only: what was kept (``checks`` {check: rows}, ``quarantined``, ``quarantine_table``)
    quarantine: JsonObject | None = None

    def payload(self) -> JsonObject:
        """The ``json`` format: exactly :data:`PAYLOAD_KEYS` (plus ``quarantine`` on a ``quarantined`` event),
        secrets masked."""
        body: JsonObject = {
            "event": self.event.value,
            "table": self.table,
            "branch": self.branch,
            "user": self.user,
            "at": self.at,
            "status": self.status,
            "failed_checks": list(self.failed_checks),
            "summary": self.summary,
            "link": self.link,
        }
        if self.quarantine is not None:
            body["quarantine"] = self.quarantine
        masked: JsonObject = mask_values(body)
        return masked

    def slack(self) -> JsonObject:
        """A Slack incoming-webhook body: fallback ``text`` plus ``blocks`` (mrkdwn facts, link button)."""
        p = self.payload()
        title, emoji = EVENT_TITLES[self.event]
        e = slack_escape
        where = " · ".join(e(x) for x in (p["table"], p["branch"]) if x)
        head = f"{emoji} *{title}*" + (f": {where}" if where else "")
        summary = (
            p["summary"] if len(p["summary"]) <= _MAX_SUMMARY else p["summary"][: _MAX_SUMMARY - 1] + "…"
        )
        page = self.link.split("?", 1)[0]
        label = (
            "Open history"
            if "/history" in page
            else "Open quarantine"
            if "/quarantine" in page
            else ("Open review" if p["branch"] else "Open console")
        )
        facts = [f"*By:* {e(p['user'])}", f"*At:* {e(p['at'])}"]
        if p["status"]:
            facts.append(f"*Status:* {e(p['status'])}")
        if self.snapshot_id is not None:
            facts.append(f"*Snapshot:* {self.snapshot_id}")
        checks = p["failed_checks"]
        if checks:
            more = f" and {len(checks) - _MAX_CHECKS_SHOWN} more" if len(checks) > _MAX_CHECKS_SHOWN else ""
            facts.append(f"*Failed checks:* {e(', '.join(checks[:_MAX_CHECKS_SHOWN]))}{more}")
        lines = [head] + ([e(summary)] if summary else []) + [f"<{p['link']}|{label}>"]
        text = (
            f"{title}: {where}"
            + (f" by {e(p['user'])}" if p["user"] else "")
            + (f": {e(summary[:300])}" if summary else "")
        )
        return {
            "text": text,
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
                {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in facts]},
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": label}, "url": p["link"]}
                    ],
                },
            ],
        }

    def body(self, fmt: WebhookFormat) -> bytes:
        """The HTTP body for this format (UTF-8 JSON)."""
        return json.dumps(
            self.slack() if fmt is WebhookFormat.SLACK else self.payload(), ensure_ascii=False
        ).encode("utf-8")


class NoticeFields(TypedDict, total=False):
    """What a notification tells beside its event: where (``table``, ``branch``; ``""`` or None for none),
    who, and optionally the status, the failed checks, a summary, the snapshot and (``quarantined``) what
    was kept."""

    table: Required[str | None]
    branch: Required[str | None]
    user: Required[str]
    status: str | None
    failed_checks: Sequence[str]
    summary: str
    snapshot_id: int | None
    quarantine: JsonObject


def build(
    cfg: NotifyConfig, event: Event, *, at: datetime | None = None, **fields: Unpack[NoticeFields]
) -> Notification:
    """The notification of ``event``, its link into the console at ``cfg.console_url``."""
    # "" (no table, e.g. a refused read of the whole catalog) is null
    table, branch = fields["table"] or None, fields["branch"] or None
    return Notification(
        event=event,
        table=table,
        branch=branch,
        user=fields["user"],
        at=(at or utcnow()).isoformat(timespec="seconds"),
        status=fields.get("status"),
        failed_checks=tuple(fields.get("failed_checks", ())),
        summary=fields.get("summary", ""),
        link=link_for(cfg.console_url, event, table, branch),
        snapshot_id=fields.get("snapshot_id"),
        quarantine=fields.get("quarantine"),
    )


# --------------------------------------------------------------------------- emit: one INSERT, no network
def emit(journal: Journal, settings: Settings, event: Event, **fields: Unpack[NoticeFields]) -> None:
    """Queue a notification for every matching target in ``journal``'s outbox (targets from ``settings``'
    notify file). Never raises, never blocks on the network."""
    name = getattr(event, "value", event)
    table, branch = fields["table"], fields["branch"]
    try:
        event = Event(event)
        cfg = config_for(settings)
        targets = cfg.targets_for(event, table)
        if not targets:
            return
        enqueue(journal, build(cfg, event, **fields), targets)
        deliverer_for(journal, settings.notify_file).wake()
    except NotifyFileError as exc:
        log.error("%s notification of %s %s not queued: %s", name, table, branch, exc)
        _journal_unqueued(journal, name, table, branch, fields["user"], str(exc))
    except Exception:
        log.exception("%s notification of %s %s could not be queued", name, table, branch)


def emit_outcome(journal: Journal, settings: Settings, entry: JournalEntry | None) -> None:
    """Notify an outcome recorded on another path (reconciliation, an action settled after an exception)."""
    if entry is None or entry.table is None:
        return
    event = {
        Outcome.PUBLISHED: Event.PUBLISHED,
        Outcome.FORCED: Event.PUBLISHED,
        Outcome.DISCARDED: Event.DISCARDED,
        Outcome.REFUSED: Event.REFUSED,
    }.get(entry.outcome)
    if event is None:
        return
    status = str(entry.details.get("code") or "refused") if event is Event.REFUSED else entry.outcome
    how = (
        " (recorded by reconciliation: the acting process stopped before it could)"
        if entry.reconciled
        else ""
    )
    summary = f"{entry.action} of {entry.table} {entry.branch}: {entry.outcome}{how}" + (
        f"; {entry.reason}" if entry.reason else ""
    )
    emit(
        journal,
        settings,
        event,
        table=entry.table,
        branch=entry.branch,
        user=entry.user,
        status=status,
        summary=summary,
        snapshot_id=entry.snapshot_after,
    )


def _journal_unqueued(
    journal: Journal, event: str, table: str | None, branch: str | None, user: str, error: str
) -> None:
    try:
        journal.record(
            user=user,
            action=Action.NOTIFY,
            outcome=Outcome.FAILED,
            table=table or None,
            branch=branch,
            reason=f"{event} notification not queued: {error}",
            details={"event": event, "error": error},
        )
    except Exception:
        log.exception("could not journal the unqueued %s notification", event)


def enqueue(journal: Journal, note: Notification, targets: Sequence[Webhook]) -> None:
    """One INSERT (one row per target) in one transaction."""
    now = utcnow()
    origin = process_owner()
    rows = [
        {
            "created_at": now,
            "event": note.event.value,
            "table_name": note.table,
            "branch": note.branch,
            "user_name": note.user,
            "target": t.key,
            "target_label": t.masked_url,
            "format": t.format.value,
            "body": note.body(t.format).decode("utf-8"),
            "status": DeliveryState.PENDING.value,
            "attempts": 0,
            "next_attempt_at": now,
            "origin": origin,
        }
        for t in targets
    ]
    with journal.engine.begin() as conn:
        conn.execute(insert(outbox_table), rows)


# --------------------------------------------------------------------------- HTTP


def notify_test(settings: Settings, *, user: str) -> tuple[NotifyConfig, list[TestOutcome]]:
    """Send one ``test`` event, sent by ``user``, to every target (filters do not apply), in parallel; raises
    NotifyFileError."""
    cfg = config_for(settings)
    who = user
    note = build(
        cfg,
        Event.TEST,
        table=None,
        branch=None,
        user=who,
        status="test",
        summary=f"Test notification sent by {who} with notify-test: this webhook receives WAP Console events.",
    )
    if not cfg.webhooks:
        return cfg, []
    with ThreadPoolExecutor(
        max_workers=min(8, len(cfg.webhooks)), thread_name_prefix="wap-notify-test"
    ) as pool:
        outcomes = list(pool.map(lambda w: send_now(w, note.body(w.format), cfg.delivery), cfg.webhooks))
    return cfg, outcomes
