"""The targets file (``WAP_NOTIFY``, default ``$WAP_HOME/notify.yml``): events, webhooks, delivery policy, links.

Parsed with line numbers; a broken file is a :class:`~wap_core.exceptions.NotifyFileError`, never
"no targets". Webhook URLs are secrets: registered with ``mask_secrets`` and shown only masked.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import yaml

from wap_core import actions, yamlnodes
from wap_core.config import register_secret
from wap_core.exceptions import NotifyFileError
from wap_core.values import JsonObject
from wap_core.yamlnodes import line as _line

if TYPE_CHECKING:
    from wap_core.config import Settings


log = logging.getLogger(__name__)

PAYLOAD_KEYS = ("event", "table", "branch", "user", "at", "status", "failed_checks", "summary", "link")
DEFAULT_CONSOLE_URL = "http://localhost:8501"
_MIN_SECRET_PATH = 16
MAX_BACKOFF_SECONDS = 300.0
LEASE_EXTRA_SECONDS = 30.0  # a claimed row is reclaimable this long after its request would have timed out


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
    QUARANTINED = "quarantined"  # an ingest's on_fail: quarantine checks moved its failing rows
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
        return self.timeout_seconds + LEASE_EXTRA_SECONDS


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
    root = yamlnodes.compose(text, source, NotifyFileError)
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


def _mapping(
    node: yaml.Node, source: str, what: str, allowed: Sequence[str]
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """{key: (key node, value node)} of a mapping node whose keys are all in ``allowed``, each at most once."""
    return yamlnodes.keyed(node, source, allowed, NotifyFileError, what)


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
    values: JsonObject = {}
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
# each event's title and Slack emoji, declared with the action sending it (wap_core.actions)
EVENT_TITLES = {Event(e.word): (e.title, e.emoji) for e in actions.EVENTS}


def review_link(console_url: str, table: str, branch: str) -> str:
    """The Review page's deep link of a branch (query URL-encoded)."""
    return f"{console_url}/review?{urlencode({'table': table, 'branch': branch}, quote_via=quote)}"


def history_link(console_url: str, table: str | None) -> str:
    """The console's History page, of ``table`` if given."""
    return f"{console_url}/history" + (f"?{urlencode({'table': table}, quote_via=quote)}" if table else "")


def quarantine_link(console_url: str, table: str, batch: str) -> str:
    """The Quarantine page's deep link of a table's rows kept from a batch (query URL-encoded)."""
    return f"{console_url}/quarantine?{urlencode({'table': table, 'batch': batch}, quote_via=quote)}"


def link_for(console_url: str, event: Event, table: str | None, branch: str | None) -> str:
    """Review of the branch; the Quarantine page of the table's rows kept from the branch's batch for
    ``quarantined``; History of the table for a rollback (or when there is no branch)."""
    if event is Event.QUARANTINED and table and branch:
        return quarantine_link(console_url, table, branch)
    if event is Event.ROLLED_BACK or not table or not branch:
        return history_link(console_url, table) if table or event is not Event.TEST else f"{console_url}/"
    return review_link(console_url, table, branch)


def slack_escape(text: str) -> str:
    """Slack's control characters in user text: ``&`` ``<`` ``>`` as entities (no link, mention or markup can form)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
