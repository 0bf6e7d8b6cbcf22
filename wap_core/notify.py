"""Notifications: webhooks hear about failed audits, publishes, discards and refusals, with a deep link.

The targets file (``WAP_NOTIFY``, default ``$WAP_HOME/notify.yml``)::

    console_url: http://localhost:8501
    webhooks:
      - url: http://127.0.0.1:9999/hook
        format: json                # json | slack
        events: [audit_failed, awaiting_approval, changes_requested, published, discarded, refused, rolled_back]
        tables: ["demo.*"]          # fnmatch patterns on namespace.table
    delivery:                       # optional; these are the defaults
      attempts: 5
      backoff_seconds: 1            # 1, 2, 4, 8 s between attempts (doubling, at most 300 s)
      timeout_seconds: 5
      exit_grace_seconds: 5         # how long a CLI command waits for its notifications at exit

No file: no targets. A broken file is a :class:`NotifyFileError` naming file and line, never
"no targets": ``notify-test`` exits 2 on it and every event it prevents from being queued is
journaled (action ``notify``, outcome ``failed``). Webhook URLs are secrets (a Slack incoming-
webhook URL is its own credential): they are registered with :func:`wap_core.config.mask_secrets`,
shown only masked (``https://hooks.slack.com/***``) and never stored in the database.

Delivery (off the action's path)
--------------------------------
:func:`emit` never raises and never touches the network: it renders one request body per
matching target and INSERTs the rows into the outbox table ``wap_outbox`` of the catalog's
database (one statement, one transaction), then wakes this process's deliverer, a daemon thread
started lazily. The deliverer claims a due row with a conditional ``UPDATE`` (``pending`` and due,
or ``delivering`` whose lease expired), so two processes never deliver the same row twice, POSTs
it (standard library ``urllib``, no redirects followed) and records the answer: 2xx ``delivered``;
a 5xx, a 429 or no answer (refused connection, timeout) is retried with exponential backoff up
to ``attempts`` times; any other status fails at once. A row that ends ``failed`` writes, in the
same transaction, a journal row (action ``notify``, outcome ``failed``, the masked URL, the HTTP
status, the attempts). A CLI command waits at most ``exit_grace_seconds`` at exit for its own
rows; what is left stays in the outbox and is delivered by the next process that emits or by
the console's deliverer (started with the console, it polls the outbox).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import yaml
from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from wap_core.config import mask_secrets, register_secret
from wap_core.exceptions import NotifyFileError
from wap_core.states import Action, Outcome
from wap_core.store.journal import (
    Journal,
    JournalEntry,
    journal_table,
    mask_values,
    outbox_table,
    process_owner,
    utcnow,
)

if TYPE_CHECKING:
    from wap_core.config import Settings
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


class Event(str, Enum):
    """What happened: the events a webhook can subscribe to."""

    AUDIT_FAILED = "audit_failed"
    AWAITING_APPROVAL = "awaiting_approval"
    CHANGES_REQUESTED = "changes_requested"
    PUBLISHED = "published"
    DISCARDED = "discarded"
    REFUSED = "refused"
    ROLLED_BACK = "rolled_back"
    EXPIRED = "expired"
    TEST = "test"


NOTIFIABLE: tuple[Event, ...] = tuple(
    e for e in Event if e is not Event.TEST
)  # a webhook's events when it lists none


class WebhookFormat(str, Enum):
    """The body a webhook gets: the JSON payload or a Slack message."""

    JSON = "json"
    SLACK = "slack"


class DeliveryState(str, Enum):
    """The state of one notification in the outbox."""

    PENDING = "pending"  # waiting for its (next) attempt
    DELIVERING = "delivering"  # claimed by a deliverer until claimed_until
    DELIVERED = "delivered"  # a 2xx answer
    FAILED = "failed"  # given up (journaled)


PAYLOAD_KEYS = ("event", "table", "branch", "user", "at", "status", "failed_checks", "summary", "link")
DEFAULT_CONSOLE_URL = "http://localhost:8501"
MAX_BACKOFF_SECONDS = 300.0
_LEASE_EXTRA_SECONDS = 30.0  # a claimed row is reclaimable this long after its request would have timed out
_POLL_SECONDS = 15.0  # the console's deliverer looks at the outbox at least this often
_CLAIM_BATCH = 10
_MAX_ERRORS = (
    3  # consecutive outbox errors after which a CLI's deliverer gives up (the rows stay for a later process)
)
_MAX_SUMMARY = 1500  # characters of summary in a Slack block (a section holds at most 3000)
_MAX_CHECKS_SHOWN = 20
_MIN_SECRET_PATH = 16


# --------------------------------------------------------------------------- the targets file
@dataclass(frozen=True)
class DeliveryPolicy:
    """How deliveries are retried: attempts, backoff, timeout and the grace at process exit."""

    attempts: int = 5
    backoff_seconds: float = 1.0
    timeout_seconds: float = 5.0
    exit_grace_seconds: float = 5.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): doubling, at most 300 s."""
        return float(min(MAX_BACKOFF_SECONDS, self.backoff_seconds * 2 ** max(0, attempt - 1)))

    @property
    def lease_seconds(self) -> float:
        """How long a deliverer holds a claimed row: the timeout plus a margin."""
        return self.timeout_seconds + _LEASE_EXTRA_SECONDS


@dataclass(frozen=True)
class Webhook:
    """One target. ``url`` is a secret: it is left out of ``repr`` and shown only as :attr:`masked_url`."""

    url: str = field(repr=False)
    format: WebhookFormat
    events: frozenset[Event]
    tables: tuple[str, ...]
    source: str = ""  # file:line of its entry

    @property
    def key(self) -> str:
        """Identifies the target in the outbox (the URL itself is never stored)."""
        return hashlib.sha256(f"{self.format.value}\n{self.url}".encode()).hexdigest()[:40]

    @property
    def masked_url(self) -> str:
        """The URL with its secrets masked."""
        return mask_url(self.url)

    def matches(self, event: Event, table: str | None) -> bool:
        """True if this webhook wants ``event`` on ``table`` (every webhook gets the test event)."""
        if event is Event.TEST:
            return True
        return event in self.events and any(fnmatchcase(table or "", p) for p in self.tables)


@dataclass(frozen=True)
class NotifyConfig:
    """The parsed notifications file."""

    path: Path
    exists: bool
    console_url: str = DEFAULT_CONSOLE_URL
    webhooks: tuple[Webhook, ...] = ()
    delivery: DeliveryPolicy = DeliveryPolicy()

    def targets_for(self, event: Event, table: str | None) -> list[Webhook]:
        """The webhooks to tell about ``event`` on ``table``, each target once."""
        seen: set[str] = set()
        out = []
        for w in self.webhooks:
            if w.matches(event, table) and w.key not in seen:
                seen.add(w.key)
                out.append(w)
        return out

    def target(self, key: str) -> Webhook | None:
        """The webhook with this key, or None."""
        return next((w for w in self.webhooks if w.key == key), None)


def mask_url(url: str) -> str:
    """``scheme://host[:port]/***``: userinfo, path, query and fragment are hidden (they may be the credential)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    rest = parts.path.strip("/") or parts.query or parts.fragment
    return f"{parts.scheme}://{host}" + ("/***" if rest else "")


_cache: dict[Path, tuple[tuple[int, int, int], NotifyConfig]] = {}
_cache_lock = threading.Lock()


def load_config(path: Path) -> NotifyConfig:
    """The parsed targets file (cached until the file changes); no file: no targets."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return NotifyConfig(path=path, exists=False)
    except OSError as exc:
        raise NotifyFileError(str(path), None, f"cannot read: {exc.strerror}") from exc
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _cache_lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NotifyFileError(
            str(path), None, f"cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    cfg = parse_notify_text(text, str(path), path)
    with _cache_lock:
        _cache[path] = (stamp, cfg)
    return cfg


def config_for(settings: Settings) -> NotifyConfig:
    """The notifications configuration of these settings (``settings.notify_file``)."""
    return load_config(settings.notify_file)


def parse_notify_text(text: str, source: str = "notify.yml", path: Path | None = None) -> NotifyConfig:
    """Parse the targets file's text; every error names ``source`` and the line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise NotifyFileError(
            source,
            mark.line + 1 if mark is not None else None,
            f"invalid YAML: {getattr(exc, 'problem', None) or type(exc).__name__}",
        ) from exc
    cfg_path = path if path is not None else Path(source)
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        return NotifyConfig(path=cfg_path, exists=True)
    top = _mapping(
        root,
        source,
        "the file must be a mapping with console_url, webhooks and delivery",
        ("console_url", "webhooks", "delivery"),
    )
    console_url = DEFAULT_CONSOLE_URL
    if "console_url" in top:
        node = top["console_url"][1]
        console_url = _url(node, source, "console_url", console=True).rstrip("/")
    webhooks: list[Webhook] = []
    if "webhooks" in top:
        node = top["webhooks"][1]
        if not isinstance(node, yaml.SequenceNode):
            raise NotifyFileError(
                source, _line(node), "webhooks must be a list of {url, format, events, tables}"
            )
        webhooks = [_webhook(item, source) for item in node.value]
    delivery = DeliveryPolicy()
    if "delivery" in top:
        delivery = _delivery(top["delivery"][1], source)
    return NotifyConfig(
        path=cfg_path, exists=True, console_url=console_url, webhooks=tuple(webhooks), delivery=delivery
    )


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _mapping(
    node: yaml.Node, source: str, what: str, allowed: Sequence[str]
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """{key: (key node, value node)} of a mapping node whose keys are all in ``allowed``, each at most once."""
    if not isinstance(node, yaml.MappingNode):
        raise NotifyFileError(source, _line(node), what)
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, val_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str) or key not in allowed:
            shown = key if isinstance(key, str) else "(not a name)"
            raise NotifyFileError(
                source, _line(key_node), f"unknown key {shown!r}; expected one of: {', '.join(allowed)}"
            )
        if key in out:
            raise NotifyFileError(source, _line(key_node), f"key {key!r} is given twice")
        out[key] = (key_node, val_node)
    return out


def _scalar(node: yaml.Node, source: str, what: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise NotifyFileError(source, _line(node), f"{what} must be a single value")
    return yaml.safe_load(yaml.serialize(node))


def _url(node: yaml.Node, source: str, what: str, *, console: bool = False) -> str:
    value = _scalar(node, source, what)
    if not isinstance(value, str) or not value.strip():
        raise NotifyFileError(source, _line(node), f"{what} must be an http(s) URL")
    if not console:
        register_secret(
            value
        )  # a webhook URL may be its own credential: masked wherever it could surface from now on
    shown = mask_url(value)
    if any(c.isspace() or ord(c) < 32 or c in '<>|"\\' for c in value):
        raise NotifyFileError(source, _line(node), f'{what} {shown} holds white space or one of < > | " \\')
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise NotifyFileError(
            source, _line(node), f"{what} must be an http(s) URL, not {parts.scheme or 'a bare path'}:"
        )
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise NotifyFileError(source, _line(node), f"{what} {shown} has an invalid port") from exc
    if not parts.hostname:
        raise NotifyFileError(source, _line(node), f"{what} {shown} has no host")
    if console and (parts.query or parts.fragment or "@" in parts.netloc):
        raise NotifyFileError(
            source, _line(node), f"{what} must be the console's base URL (no user, query or fragment)"
        )
    if not console:
        rest = parts.path + ("?" + parts.query if parts.query else "")
        register_secret(parts.password)
        if (
            len(rest) >= _MIN_SECRET_PATH
        ):  # a Slack-like path is the token; a short "/hook" is not worth masking everywhere
            register_secret(rest)
    return str(value)


def _webhook(node: yaml.Node, source: str) -> Webhook:
    where = f"{source}:{_line(node)}"
    m = _mapping(
        node,
        source,
        "each webhook must be a mapping with url, format, events, tables",
        ("url", "format", "events", "tables"),
    )
    if "url" not in m:
        raise NotifyFileError(source, _line(node), "a webhook needs a url")
    url = _url(m["url"][1], source, "url")
    fmt = WebhookFormat.JSON
    if "format" in m:
        raw = _scalar(m["format"][1], source, "format")
        try:
            fmt = WebhookFormat(raw)
        except ValueError:
            raise NotifyFileError(
                source, _line(m["format"][1]), f"format must be json or slack, not {raw!r}"
            ) from None
    events = frozenset(NOTIFIABLE)
    if "events" in m:
        values = _list(m["events"][1], source, "events")
        parsed = set()
        for value_node, value in values:
            try:
                parsed.add(Event(value))
            except ValueError:
                raise NotifyFileError(
                    source,
                    _line(value_node),
                    f"unknown event {value!r}; expected: {', '.join(e.value for e in Event)}",
                ) from None
        events = frozenset(parsed)
    tables: tuple[str, ...] = ("*",)
    if "tables" in m:
        tables = tuple(str(v) for _, v in _list(m["tables"][1], source, "tables"))
    return Webhook(url=url, format=fmt, events=events, tables=tables, source=where)


def _list(node: yaml.Node, source: str, what: str) -> list[tuple[yaml.Node, Any]]:
    if not isinstance(node, yaml.SequenceNode):
        raise NotifyFileError(source, _line(node), f"{what} must be a list")
    if not node.value:
        raise NotifyFileError(source, _line(node), f"{what} must not be empty (leave it out for all)")
    out = []
    for item in node.value:
        value = _scalar(item, source, f"each of {what}")
        if not isinstance(value, str) or not value.strip():
            raise NotifyFileError(source, _line(item), f"each of {what} must be a non-empty name")
        out.append((item, value))
    return out


_DELIVERY_LIMITS: dict[str, tuple[type, float, float]] = {
    "attempts": (int, 1, 20),
    "backoff_seconds": (float, 0.001, 3600),
    "timeout_seconds": (float, 0.1, 120),
    "exit_grace_seconds": (float, 0, 60),
}


def _delivery(node: yaml.Node, source: str) -> DeliveryPolicy:
    m = _mapping(node, source, "delivery must be a mapping", tuple(_DELIVERY_LIMITS))
    values: dict[str, Any] = {}
    for key, (_, val_node) in m.items():
        kind, lo, hi = _DELIVERY_LIMITS[key]
        value = _scalar(val_node, source, key)
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (kind is float or isinstance(value, int))
        )
        if not ok or not lo <= value <= hi:
            raise NotifyFileError(
                source,
                _line(val_node),
                f"{key} must be {'an integer' if kind is int else 'a number'} between {lo:g} and {hi:g}",
            )
        values[key] = kind(value)
    return DeliveryPolicy(**values)


# --------------------------------------------------------------------------- what is sent
_TITLES = {
    Event.AUDIT_FAILED: ("Audit failed", ":x:"),
    Event.AWAITING_APPROVAL: ("Awaiting approval", ":hourglass_flowing_sand:"),
    Event.CHANGES_REQUESTED: ("Changes requested", ":memo:"),
    Event.PUBLISHED: ("Published", ":white_check_mark:"),
    Event.DISCARDED: ("Discarded", ":wastebasket:"),
    Event.REFUSED: ("Refused", ":no_entry:"),
    Event.ROLLED_BACK: ("Rolled back", ":rewind:"),
    Event.EXPIRED: ("Expired", ":alarm_clock:"),
    Event.TEST: ("Test notification", ":wave:"),
}


def review_link(console_url: str, table: str, branch: str) -> str:
    """The Review page's deep link of a branch (query URL-encoded)."""
    return f"{console_url}/review?{urlencode({'table': table, 'branch': branch}, quote_via=quote)}"


def history_link(console_url: str, table: str | None) -> str:
    """The console's History page, of ``table`` if given."""
    return f"{console_url}/history" + (f"?{urlencode({'table': table}, quote_via=quote)}" if table else "")


def link_for(console_url: str, event: Event, table: str | None, branch: str | None) -> str:
    """Review of the branch; History of the table for a rollback (or when there is no branch)."""
    if event is Event.ROLLED_BACK or not table or not branch:
        return history_link(console_url, table) if table or event is not Event.TEST else f"{console_url}/"
    return review_link(console_url, table, branch)


def slack_escape(text: str) -> str:
    """Slack's control characters in user text: ``&`` ``<`` ``>`` as entities (no link, mention or markup can form)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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

    def payload(self) -> dict[str, Any]:
        """The ``json`` format: exactly :data:`PAYLOAD_KEYS`, secrets masked."""
        body = {
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
        masked: dict[str, Any] = mask_values(body)
        return masked

    def slack(self) -> dict[str, Any]:
        """A Slack incoming-webhook body: fallback ``text`` plus ``blocks`` (mrkdwn facts, link button)."""
        p = self.payload()
        title, emoji = _TITLES[self.event]
        e = slack_escape
        where = " · ".join(e(x) for x in (p["table"], p["branch"]) if x)
        head = f"{emoji} *{title}*" + (f": {where}" if where else "")
        summary = (
            p["summary"] if len(p["summary"]) <= _MAX_SUMMARY else p["summary"][: _MAX_SUMMARY - 1] + "…"
        )
        label = (
            "Open history"
            if "/history" in self.link.split("?", 1)[0]
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


def build(
    cfg: NotifyConfig,
    event: Event,
    *,
    table: str | None,
    branch: str | None,
    user: str,
    status: str | None = None,
    failed_checks: Sequence[str] = (),
    summary: str = "",
    snapshot_id: int | None = None,
    at: datetime | None = None,
) -> Notification:
    """The notification of ``event``, its link into the console at ``cfg.console_url``."""
    table, branch = (
        table or None,
        branch or None,
    )  # "" (no table, e.g. a refused read of the whole catalog) is null
    return Notification(
        event=event,
        table=table,
        branch=branch,
        user=user,
        at=(at or utcnow()).isoformat(timespec="seconds"),
        status=status,
        failed_checks=tuple(failed_checks),
        summary=summary,
        link=link_for(cfg.console_url, event, table, branch),
        snapshot_id=snapshot_id,
    )


# --------------------------------------------------------------------------- emit: one INSERT, no network
def emit(
    lh: Lakehouse,
    event: Event,
    *,
    table: str,
    branch: str | None,
    user: str,
    status: str | None = None,
    failed_checks: Sequence[str] = (),
    summary: str = "",
    snapshot_id: int | None = None,
) -> None:
    """Queue a notification for every matching target. Never raises, never blocks on the network."""
    name = getattr(event, "value", event)
    try:
        event = Event(event)
        cfg = config_for(lh.settings)
        targets = cfg.targets_for(event, table)
        if not targets:
            return
        note = build(
            cfg,
            event,
            table=table,
            branch=branch,
            user=user,
            status=status,
            failed_checks=failed_checks,
            summary=summary,
            snapshot_id=snapshot_id,
        )
        enqueue(lh.journal, note, targets)
        deliverer_for(lh).wake()
    except NotifyFileError as exc:
        log.error("%s notification of %s %s not queued: %s", name, table, branch, exc)
        _journal_unqueued(lh, name, table, branch, user, str(exc))
    except Exception:
        log.exception("%s notification of %s %s could not be queued", name, table, branch)


def emit_outcome(lh: Lakehouse, entry: JournalEntry | None) -> None:
    """Notify an outcome recorded on another path (reconciliation, an action settled after an exception)."""
    if entry is None or entry.table is None:
        return
    event = {
        "published": Event.PUBLISHED,
        "forced": Event.PUBLISHED,
        "discarded": Event.DISCARDED,
        "refused": Event.REFUSED,
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
        lh,
        event,
        table=entry.table,
        branch=entry.branch,
        user=entry.user,
        status=status,
        summary=summary,
        snapshot_id=entry.snapshot_after,
    )


def _journal_unqueued(
    lh: Lakehouse, event: str, table: str | None, branch: str | None, user: str, error: str
) -> None:
    try:
        lh.journal.record(
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
@dataclass(frozen=True)
class Answer:
    """What one POST got: an HTTP status, or None with the error (refused, timed out...)."""

    status: int | None
    error: str | None = None
    retry_after: float | None = None

    @property
    def delivered(self) -> bool:
        """True for a 2xx answer."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        """No answer, a 5xx or 429 Too Many Requests; any other 4xx (and a 3xx: redirects are not followed) is final."""
        return self.status is None or self.status == 429 or 500 <= self.status < 600


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, *args: Any, **kwargs: Any
    ) -> None:  # a 3xx is an answer: never re-sent elsewhere
        return None


_opener = urllib.request.build_opener(_NoRedirects)
_READ_LIMIT = 64 * 1024


def post(url: str, body: bytes, timeout: float) -> Answer:
    """POST ``body`` as JSON to ``url``; never raises for network or HTTP errors."""
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json; charset=utf-8", "User-Agent": "wap-console-notify/1"},
    )
    try:
        with _opener.open(req, timeout=timeout) as resp:
            resp.read(_READ_LIMIT)
            return Answer(int(resp.status))
    except urllib.error.HTTPError as exc:
        retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers is not None else None)
        exc.close()
        return Answer(exc.code, mask_secrets(f"HTTP {exc.code} {exc.reason}"), retry_after)
    except urllib.error.URLError as exc:
        reason = exc.reason
        return Answer(
            None,
            mask_secrets(
                f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
            ),
        )
    except (OSError, http.client.HTTPException, ValueError) as exc:  # timeouts, resets, a malformed answer
        return Answer(None, mask_secrets(f"{type(exc).__name__}: {exc}"))


def _retry_after(value: str | None) -> float | None:
    if value and value.strip().isdigit():
        return min(float(value.strip()), MAX_BACKOFF_SECONDS)
    return None


def _next_delay(policy: DeliveryPolicy, attempts: int, answer: Answer) -> float:
    jitter = 1.0 + random.random() * 0.1
    return max(policy.delay(attempts) * jitter, answer.retry_after or 0.0)


# --------------------------------------------------------------------------- the deliverer
@dataclass(frozen=True)
class OutboxRow:
    """One notification for one target in the outbox, with its delivery state."""

    id: int
    event: str
    table: str | None
    branch: str | None
    user: str
    target: str
    target_label: str
    format: str
    body: str
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)


def _row(r: Any) -> OutboxRow:
    return OutboxRow(
        id=r["id"],
        event=r["event"],
        table=r["table_name"],
        branch=r["branch"],
        user=r["user_name"],
        target=r["target"],
        target_label=r["target_label"],
        format=r["format"],
        body=r["body"],
        status=r["status"],
        attempts=r["attempts"],
        last_status=r["last_status"],
        last_error=r["last_error"],
    )


def outbox(journal: Journal, *, limit: int = 500) -> list[OutboxRow]:
    """The outbox, newest first (for tests and the console)."""
    with journal.engine.connect() as conn:
        rows = (
            conn.execute(select(outbox_table).order_by(outbox_table.c.id.desc()).limit(limit))
            .mappings()
            .all()
        )
    return [_row(r) for r in rows]


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _due(now: datetime) -> Any:
    c = outbox_table.c
    return or_(
        and_(c.status == DeliveryState.PENDING.value, c.next_attempt_at <= now),
        and_(c.status == DeliveryState.DELIVERING.value, c.claimed_until < now),
    )


class Deliverer:
    """Delivers the outbox of one catalog database, in a daemon thread started on demand.

    Not persistent (a CLI command): the thread ends when no row is pending. Persistent (the
    console): it keeps polling the outbox for rows left by processes that have exited.
    """

    def __init__(self, journal: Journal, notify_file: Path) -> None:
        self.journal = journal
        self.notify_file = notify_file
        self.persistent = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._token = uuid.uuid4().hex[:8]

    @property
    def claimer(self) -> str:
        """This deliverer's identity in the outbox: the process owner and a token."""
        return f"{process_owner()}#{self._token}"

    def wake(self) -> None:
        """Deliver what is due now (starts the thread if it is not running)."""
        with self._lock:
            self._stopped = False
            self._wake.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wap-notify-deliverer", daemon=True)
                self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread after the row it is delivering (rows left stay in the outbox)."""
        with self._lock:
            self._stopped = True
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        errors = 0
        while not self._stopped:
            self._wake.clear()
            wait: float | None
            try:
                cfg = load_config(self.notify_file)
                if self.deliver_due(cfg):
                    errors = 0
                    continue
                wait = self._seconds_to_next()
                errors = 0
            except NotifyFileError as exc:  # rows stay pending: delivered once the file is fixed
                log.error("notifications not delivered: %s", exc)
                wait = None
            except SQLAlchemyError as exc:
                errors += 1
                log.warning("notification outbox unavailable (%d): %s", errors, exc)
                wait = None if errors >= _MAX_ERRORS and not self.persistent else 5.0
            except Exception:
                errors += 1
                log.exception("notification deliverer failed (%d)", errors)
                wait = None if errors >= _MAX_ERRORS and not self.persistent else 5.0
            if wait is None and not self.persistent:
                with self._lock:
                    if not self._wake.is_set() or self._stopped:
                        self._thread = None
                        return
                continue
            self._wake.wait(
                _POLL_SECONDS if wait is None else (min(wait, _POLL_SECONDS) if self.persistent else wait)
            )
        with self._lock:
            self._thread = None

    def _seconds_to_next(self) -> float | None:
        """Seconds until the next row is due (a pending retry or an expiring lease); None when nothing is open."""
        c = outbox_table.c
        with self.journal.engine.connect() as conn:
            nxt = conn.execute(
                select(func.min(c.next_attempt_at)).where(c.status == DeliveryState.PENDING.value)
            ).scalar()
            lease = conn.execute(
                select(func.min(c.claimed_until)).where(c.status == DeliveryState.DELIVERING.value)
            ).scalar()
        times = [_aware(t) for t in (nxt, lease) if t is not None]
        if not times:
            return None
        return max(0.05, (min(times) - utcnow()).total_seconds())

    def deliver_due(self, cfg: NotifyConfig) -> int:
        """Claim the due rows (up to a batch) and deliver them; returns how many were claimed."""
        rows = self._claim(cfg.delivery)
        if len(rows) == 1:
            self._deliver(row=rows[0], cfg=cfg)
        elif rows:  # in parallel: a target that never answers does not hold up the others (daemon threads: never delay exit)
            workers = [
                threading.Thread(
                    target=self._deliver_logged, args=(row, cfg), name=f"wap-notify-{row.id}", daemon=True
                )
                for row in rows
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        return len(rows)

    def _deliver_logged(self, row: OutboxRow, cfg: NotifyConfig) -> None:
        try:
            self._deliver(row, cfg)
        except Exception:
            log.exception("notification %d: delivery failed", row.id)

    def _claim(self, policy: DeliveryPolicy) -> list[OutboxRow]:
        c = outbox_table.c
        now = utcnow()
        engine = self.journal.engine
        with engine.connect() as conn:
            ids = [
                r[0] for r in conn.execute(select(c.id).where(_due(now)).order_by(c.id).limit(_CLAIM_BATCH))
            ]
        claimed: list[int] = []
        for row_id in ids:
            # the conditional UPDATE is the claim: of two deliverers exactly one sees rowcount 1
            with engine.begin() as conn:
                res = conn.execute(
                    update(outbox_table)
                    .where(and_(c.id == row_id, _due(now)))
                    .values(
                        status=DeliveryState.DELIVERING.value,
                        claimed_by=self.claimer,
                        claimed_until=now + timedelta(seconds=policy.lease_seconds),
                        attempts=c.attempts + 1,
                    )
                )
            if res.rowcount == 1:
                claimed.append(row_id)
        if not claimed:
            return []
        with engine.connect() as conn:
            rows = conn.execute(select(outbox_table).where(c.id.in_(claimed)).order_by(c.id)).mappings().all()
        return [_row(r) for r in rows]

    def _deliver(self, row: OutboxRow, cfg: NotifyConfig) -> None:
        policy = cfg.delivery
        target = cfg.target(row.target)
        if row.attempts > policy.attempts:  # reclaimed after a deliverer died during the last allowed attempt
            self._finish(
                row,
                DeliveryState.FAILED,
                Answer(row.last_status, row.last_error or "the deliverer stopped during the last attempt"),
            )
            return
        if target is None:
            self._finish(
                row, DeliveryState.FAILED, Answer(None, "the target is no longer in the notify file")
            )
            return
        answer = post(target.url, row.body.encode("utf-8"), policy.timeout_seconds)
        if answer.delivered:
            self._finish(row, DeliveryState.DELIVERED, answer)
        elif answer.retryable and row.attempts < policy.attempts:
            self._finish(
                row, DeliveryState.PENDING, answer, retry_in=_next_delay(policy, row.attempts, answer)
            )
        else:
            self._finish(row, DeliveryState.FAILED, answer)

    def _finish(self, row: OutboxRow, state: DeliveryState, answer: Answer, retry_in: float = 0.0) -> None:
        c = outbox_table.c
        now = utcnow()
        values: dict[str, Any] = {
            "status": state.value,
            "claimed_by": None,
            "claimed_until": None,
            "last_status": answer.status,
            "last_error": answer.error,
        }
        if state is DeliveryState.DELIVERED:
            values["delivered_at"] = now
        if state is DeliveryState.PENDING:
            values["next_attempt_at"] = now + timedelta(seconds=retry_in)
            log.info(
                "notification %d to %s: %s; attempt %d of the allowed, retrying in %.1f s",
                row.id,
                row.target_label,
                answer.error or answer.status,
                row.attempts,
                retry_in,
            )
        with self.journal.engine.begin() as conn:
            res = conn.execute(
                update(outbox_table)
                .where(
                    and_(
                        c.id == row.id,
                        c.claimed_by == self.claimer,
                        c.status == DeliveryState.DELIVERING.value,
                    )
                )
                .values(**values)
            )
            if res.rowcount != 1:
                log.warning("notification %d: the claim expired before its answer was recorded", row.id)
                return
            if state is DeliveryState.FAILED:  # journaled with the row's end, once
                what = f"HTTP {answer.status}" if answer.status is not None else (answer.error or "no answer")
                reason = f"{row.event} notification to {row.target_label} failed after {row.attempts} attempt(s): {what}"
                details = {
                    "event": row.event,
                    "target": row.target_label,
                    "format": row.format,
                    "status_code": answer.status,
                    "attempts": row.attempts,
                    "error": answer.error,
                    "outbox_id": row.id,
                }
                conn.execute(
                    insert(journal_table).values(
                        at=now,
                        user_name=row.user,
                        action=Action.NOTIFY.value,
                        table_name=row.table,
                        branch=row.branch,
                        outcome=Outcome.FAILED.value,
                        reason=mask_secrets(reason),
                        details=json.dumps(mask_values(details), default=str),
                    )
                )
        if state is DeliveryState.FAILED:
            log.warning(
                "notification %d to %s failed after %d attempt(s): %s",
                row.id,
                row.target_label,
                row.attempts,
                answer.error or answer.status,
            )

    def wait_own(self, deadline: float) -> int:
        """Wait until this process's rows are delivered or given up, or ``deadline`` (monotonic); returns those left."""
        c = outbox_table.c
        origin = process_owner()
        open_states = (DeliveryState.PENDING.value, DeliveryState.DELIVERING.value)
        while True:
            with self.journal.engine.connect() as conn:
                counts = conn.execute(
                    select(func.count(), func.min(c.next_attempt_at)).where(
                        and_(c.origin == origin, c.status.in_(open_states))
                    )
                ).one()
                claimed = int(
                    conn.execute(
                        select(func.count()).where(
                            and_(c.origin == origin, c.status == DeliveryState.DELIVERING.value)
                        )
                    ).scalar_one()
                )
            left: int = int(counts[0] or 0)
            first_due: datetime | None = counts[1]
            remaining = deadline - time.monotonic()
            if not left or remaining <= 0:
                return left
            if (
                not claimed
                and first_due is not None
                and (_aware(first_due) - utcnow()).total_seconds() > remaining
            ):
                return left  # every retry is due after the grace period: no point in waiting
            self.wake()
            time.sleep(min(0.05, remaining))


_registry_lock = threading.Lock()
_deliverers: dict[tuple[str, str], Deliverer] = {}


def deliverer_for(lh: Lakehouse, *, persistent: bool = False) -> Deliverer:
    """This process's deliverer of ``lh``'s outbox (one per database and notify file)."""
    key = (lh.journal.key, str(lh.settings.notify_file.absolute()))
    with _registry_lock:
        d = _deliverers.get(key)
        if d is None:
            d = _deliverers[key] = Deliverer(lh.journal, lh.settings.notify_file)
        if persistent:
            d.persistent = True
    return d


def start_deliverer(lh: Lakehouse) -> Deliverer | None:
    """For a long-running process (the console): deliver the outbox now and keep polling it.

    Nothing is started when the notify file names no target; a broken file is logged (every
    event it prevents is journaled by :func:`emit`). Never raises.
    """
    try:
        cfg = config_for(lh.settings)
        if not cfg.webhooks:
            return None
        d = deliverer_for(lh, persistent=True)
        d.wake()
        return d
    except NotifyFileError as exc:
        log.error("notifications disabled until the file is fixed: %s", exc)
    except Exception:
        log.exception("could not start the notification deliverer")
    return None


def stop_all() -> None:
    """Stop every deliverer of this process (tests; a process that exits needs not call it)."""
    with _registry_lock:
        deliverers = list(_deliverers.values())
        _deliverers.clear()
    for d in deliverers:
        d.stop()


def drain(timeout: float | None = None) -> int:
    """At a CLI command's exit: wait (at most ``timeout``, default the smallest ``exit_grace_seconds``) for
    the notifications this process queued. Returns how many are left in the outbox for a later process."""
    with _registry_lock:
        deliverers = list(_deliverers.values())
    if not deliverers:
        return 0
    if timeout is None:
        graces = []
        for d in deliverers:
            try:
                graces.append(load_config(d.notify_file).delivery.exit_grace_seconds)
            except NotifyFileError:
                graces.append(DeliveryPolicy().exit_grace_seconds)
        timeout = min(graces)
    deadline = time.monotonic() + max(0.0, timeout)
    left = 0
    for d in deliverers:
        try:
            left += d.wait_own(deadline)
        except SQLAlchemyError as exc:
            log.warning("could not wait for queued notifications: %s", exc)
    if left:
        log.info("%d notification(s) left in the outbox for a later process to deliver", left)
    return left


# --------------------------------------------------------------------------- notify-test
@dataclass(frozen=True)
class TestOutcome:
    """What ``notify-test`` got from one target."""

    __test__ = False  # not a pytest class

    target: str  # the masked URL
    format: str
    source: str  # file:line of the webhook
    delivered: bool
    status: int | None  # the last HTTP status (None: no answer)
    error: str | None
    attempts: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the CLI's ``notify-test --json``)."""
        return {
            "target": self.target,
            "format": self.format,
            "source": self.source,
            "delivered": self.delivered,
            "status": self.status,
            "error": self.error,
            "attempts": self.attempts,
        }


def send_now(target: Webhook, body: bytes, policy: DeliveryPolicy) -> TestOutcome:
    """Deliver synchronously with the same retries and backoff as the deliverer."""
    attempts = 0
    while True:
        attempts += 1
        answer = post(target.url, body, policy.timeout_seconds)
        if answer.delivered or not answer.retryable or attempts >= policy.attempts:
            return TestOutcome(
                target.masked_url,
                target.format.value,
                target.source,
                answer.delivered,
                answer.status,
                answer.error,
                attempts,
            )
        time.sleep(_next_delay(policy, attempts, answer))


def notify_test(lh: Lakehouse, *, user: str | None = None) -> tuple[NotifyConfig, list[TestOutcome]]:
    """Send one ``test`` event to every target (filters do not apply), in parallel; raises NotifyFileError."""
    cfg = config_for(lh.settings)
    who = user or lh.user
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
