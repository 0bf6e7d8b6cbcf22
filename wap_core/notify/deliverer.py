"""Delivery off the action's path: a daemon thread claims due outbox rows, POSTs them, retries with backoff.

A claim is a conditional ``UPDATE`` (so two processes never deliver one row twice); a row that ends
``failed`` journals ``notify``/``failed`` in the same transaction.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Connection,
    Index,
    Integer,
    String,
    Table,
    Text,
    and_,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from wap_core.config import mask_secrets
from wap_core.exceptions import NotifyFileError
from wap_core.notify.config import (
    MAX_BACKOFF_SECONDS,
    DeliveryPolicy,
    DeliveryState,
    Event,
    NotifyConfig,
    Webhook,
    config_for,
    load_config,
)
from wap_core.registry import Registry
from wap_core.states import Action, Outcome
from wap_core.store.journal import Journal, process_owner, utcnow, write_entry
from wap_core.store.schema import (
    at_column,
    branch_column,
    from_row,
    id_column,
    metadata,
    table_name_column,
    user_column,
)
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from wap_core.config import Settings


log = logging.getLogger(__name__)

_POLL_SECONDS = 15.0  # the console's deliverer looks at the outbox at least this often
_CLAIM_BATCH = 10
_MAX_ERRORS = (
    3  # consecutive outbox errors after which a CLI's deliverer gives up (the rows stay for a later process)
)

outbox_table = Table(
    "wap_outbox",  # notifications waiting for delivery (migration 0004)
    metadata,
    id_column(),
    at_column("created_at"),
    Column("event", String(32), nullable=False),
    table_name_column(nullable=True),
    branch_column(nullable=True),
    user_column(),
    Column(
        "target", String(64), nullable=False
    ),  # sha256 of format + URL: the URL itself (a secret) is never stored
    Column("target_label", String(512), nullable=False),  # the masked URL, for the journal and the console
    Column("format", String(16), nullable=False),
    Column("body", Text, nullable=False),  # the exact request body, rendered when the event happened
    Column("status", String(16), nullable=False),  # pending | delivering | delivered | failed
    Column("attempts", Integer, nullable=False, server_default="0"),
    at_column("next_attempt_at"),
    Column("origin", String(255), nullable=False),  # process_owner() of the emitting process
    Column("claimed_by", String(255), nullable=True),  # process_owner() of the deliverer holding the row
    at_column("claimed_until", nullable=True),  # its lease: reclaimable after that
    at_column("delivered_at", nullable=True),
    Column("last_status", Integer, nullable=True),  # the last HTTP status code (None: no answer)
    Column("last_error", Text, nullable=True),
    Index("ix_wap_outbox_due", "status", "next_attempt_at"),
)


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
    event: Event
    table: str | None
    branch: str | None
    user: str
    target: str
    target_label: str
    format: str
    body: str
    status: DeliveryState
    attempts: int
    last_status: int | None
    last_error: str | None


def _row(r: Any) -> OutboxRow:
    return from_row(OutboxRow, r, event=Event(r["event"]), status=DeliveryState(r["status"]))


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


def _journal_failure(conn: Connection, row: OutboxRow, answer: Answer, at: datetime) -> None:
    """Journal ``notify``/``failed`` for a row given up, in the transaction that ends the row."""
    what = f"HTTP {answer.status}" if answer.status is not None else (answer.error or "no answer")
    write_entry(
        conn,
        at=at,
        user=row.user,
        action=Action.NOTIFY,
        outcome=Outcome.FAILED,
        table=row.table,
        branch=row.branch,
        reason=f"{row.event.value} notification to {row.target_label} failed after {row.attempts} attempt(s): {what}",
        details={
            "event": row.event.value,
            "target": row.target_label,
            "format": row.format,
            "status_code": answer.status,
            "attempts": row.attempts,
            "error": answer.error,
            "outbox_id": row.id,
        },
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
        values: JsonObject = {
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
                _journal_failure(conn, row, answer, now)
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


_deliverers: Registry[tuple[str, str], Deliverer] = Registry()


def deliverer_for(journal: Journal, notify_file: Path, *, persistent: bool = False) -> Deliverer:
    """This process's deliverer of ``journal``'s outbox (one per database and notify file)."""
    key = (journal.key, str(notify_file.absolute()))
    d = _deliverers.get(key, lambda: Deliverer(journal, notify_file))
    if persistent:
        d.persistent = True
    return d


def start_deliverer(journal: Journal, settings: Settings) -> Deliverer | None:
    """For a long-running process (the console): deliver the outbox now and keep polling it.

    Nothing is started when the notify file names no target; a broken file is logged (every
    event it prevents is journaled by :func:`emit`). Never raises.
    """
    try:
        cfg = config_for(settings)
        if not cfg.webhooks:
            return None
        d = deliverer_for(journal, settings.notify_file, persistent=True)
        d.wake()
        return d
    except NotifyFileError as exc:
        log.error("notifications disabled until the file is fixed: %s", exc)
    except Exception:
        log.exception("could not start the notification deliverer")
    return None


def stop_all() -> None:
    """Stop every deliverer of this process (tests; a process that exits needs not call it)."""
    for d in _deliverers.take_all():
        d.stop()


def drain(timeout: float | None = None) -> int:
    """At a CLI command's exit: wait (at most ``timeout``, default the smallest ``exit_grace_seconds``) for
    the notifications this process queued. Returns how many are left in the outbox for a later process."""
    deliverers = _deliverers.all()
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
