"""The Python API for pipelines: Write-Audit-Publish steps an orchestrator calls, with a person as the gate.

Each step is a thin call of the core (:mod:`wap_core.workflow`): no logic of its own beyond the decision
a waiting pipeline reads. The orchestrator adapters (``wap_core.integrations.airflow`` / ``.prefect`` /
``.dbos``, each an extra: ``pip install wap-console[airflow]``) are built on these functions; any other
orchestrator can call them, or the CLI (same exit codes).

* :func:`ingest` writes a batch into a fresh audit branch (and audits it): a :class:`Branch`.
* :func:`open_branch` opens a branch for the pipeline's OWN Spark job (MERGE, UPDATE, DELETE, INSERT
  OVERWRITE, appends): an :class:`~wap_core.api.OpenedBranch` saying how the job writes there; the
  pipeline's identity is journaled as its author. Then :func:`audit` and the steps below, as for an ingest.
* :func:`audit` re-audits a branch: an :class:`Audit` (``require_pass=True`` raises :class:`AuditFailedError`).
* :func:`wait_for_decision` waits until the branch is publishable or a person decided in the console:
  a :class:`Decision`. It reads the journal, the reviews and the catalog's metadata (PyIceberg), never
  Spark, once per ``poll`` seconds. Each look (:func:`decision_now`) first settles the branch's pending
  intents (:func:`wap_core.workflow.reconcile.reconcile`): an explicit recovery entry point like the CLI's
  start, so a publish killed after its commit is seen as published, not waited on until the timeout.
* :func:`publish_if_passed` publishes the branch when the audit and the review policy allow it (a branch a
  person already published, e.g. forced over a failed audit, is ``already_published``).
* :func:`discard` removes the branch (a pipeline's rollback).

A batch that spans tables (a day of flights with the airports they reference) is several
``(table, sources)`` pairs: :func:`ingest_batch` writes each into a branch named like the batch (one
:func:`ingest` with ``batch=NAME`` per pair, in the order given), then the batch's own steps take its name:
:func:`audit_batch`, :func:`wait_for_batch_decision` (:func:`batch_decision_now`),
:func:`publish_batch_if_passed` (every table's main moves, or none; each gets the tag ``batch-<name>``)
and :func:`discard_batch`. A single
pair is the one-table steps above, unchanged.

Errors are :class:`wap_core.exceptions.WapError` with ``exit_code`` as the CLI's: 1 a refusal (failed audit,
a batch rejected by a person, a publish the guard refused), 2 bad input or an error.

Identity: every step acts as the pipeline's service identity, as the CLI does: the service token in
``WAP_TOKEN`` (``wap token create``), else ``WAP_USER`` (see :func:`lakehouse`); the access file gives
that user its role.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from urllib.parse import quote, urlencode

from wap_core import api
from wap_core.api import (
    BatchPublishResult,
    Lakehouse,
    OpenedBranch,
    PublishResult,
    ReviewState,
    Session,
    SourcePolicy,
)
from wap_core.config import mask_secrets
from wap_core.exceptions import (
    AuditFailedError,
    BatchRejectedError,
    NotFoundError,
    ValidationError,
    WapError,
    first_line,
    one_line,
    printable,
)
from wap_core.identifiers import TableId
from wap_core.states import Action, CheckStatus, Outcome, overall_status
from wap_core.values import JsonObject

log = logging.getLogger(__name__)

DEFAULT_POLL = 30.0  # seconds between two looks at the journal while waiting for a person
# the shortest poll: each look is a few queries of the journal and the catalog, never a busy loop
MIN_POLL = 0.1


class Decision(str, Enum):
    """Where a waiting pipeline's branch stands once :func:`wait_for_decision` returns."""

    APPROVED = "approved"  # publishable now: the audit passed and the table's review policy is satisfied
    PUBLISHED = "published"  # a person published it (e.g. an admin forced it over a failed audit)
    DISCARDED = "discarded"  # a person (or gc) removed the branch
    CHANGES_REQUESTED = "changes_requested"  # a reviewer asked for changes on the head
    TIMED_OUT = "timed_out"  # nobody decided within the timeout

    def __str__(self) -> str:
        return str(self.value)

    @property
    def go(self) -> bool:
        """The pipeline may go on to publish (publish of an already published branch is a no-op)."""
        return self in (Decision.APPROVED, Decision.PUBLISHED)


@dataclass(frozen=True)
class Branch:
    """A batch written by :func:`ingest`: where it is, and how its audit went."""

    table: str
    branch: str
    snapshot_id: int
    fork_snapshot_id: int | None
    rows_written: int
    status: CheckStatus  # the audit's status: passed | warned | failed
    failed_checks: tuple[str, ...] = ()
    batch: str | None = None  # the batch the table joined (``batch=``); None: a one-table batch
    # rows the checks with ``on_fail: quarantine`` moved to ``quarantine_table`` (then ``snapshot_id`` and
    # ``status`` are the repaired branch's, and the one-table steps act on the branch with its quarantine table)
    quarantined: int = 0
    quarantine_table: str | None = None

    @property
    def passed(self) -> bool:
        """The audit passed (possibly with warnings)."""
        return self.status.ok

    @classmethod
    def from_dict(cls, d: JsonObject) -> Branch:
        """Back from its JSON form (:func:`~wap_core.values.to_jsonable`: what XComs and task results carry)."""
        return cls(
            table=str(d["table"]),
            branch=str(d["branch"]),
            snapshot_id=int(d["snapshot_id"]),
            fork_snapshot_id=None if d.get("fork_snapshot_id") is None else int(d["fork_snapshot_id"]),
            rows_written=int(d.get("rows_written", 0)),
            status=CheckStatus(d["status"]),
            failed_checks=tuple(d.get("failed_checks", ())),
            batch=None if d.get("batch") is None else str(d["batch"]),
            quarantined=int(d.get("quarantined") or 0),
            quarantine_table=None if d.get("quarantine_table") is None else str(d["quarantine_table"]),
        )


@dataclass(frozen=True)
class BatchBranches:
    """A batch that spans tables, written by :func:`ingest_batch`: its name and each table's branch."""

    batch: str
    branches: tuple[Branch, ...]  # one per (table, sources) pair, in the order they were written

    @property
    def tables(self) -> tuple[str, ...]:
        """The batch's tables, in the order they were written."""
        return tuple(b.table for b in self.branches)

    @property
    def status(self) -> CheckStatus:
        """The worst of the tables' audits (at their ingest)."""
        return overall_status(b.status for b in self.branches)

    @property
    def passed(self) -> bool:
        """Every table's audit passed (possibly with warnings)."""
        return self.status.ok

    @classmethod
    def from_dict(cls, d: JsonObject) -> BatchBranches:
        """Back from its JSON form (what XComs and task results carry)."""
        return cls(str(d["batch"]), tuple(Branch.from_dict(b) for b in d["branches"]))


@dataclass(frozen=True)
class Audit:
    """The outcome of :func:`audit`."""

    table: str
    branch: str
    snapshot_id: int
    status: CheckStatus
    failed_checks: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """The audit passed (possibly with warnings)."""
        return self.status.ok


@dataclass(frozen=True)
class BatchAudit:
    """The outcome of :func:`audit_batch`: the batch's verdict (the worst of its tables') and each table's."""

    batch: str
    status: CheckStatus
    tables: tuple[Audit, ...]  # each table's latest audit, sorted by table
    reaudited: tuple[str, ...] = ()  # the tables whose audit ran now

    @property
    def passed(self) -> bool:
        """Every table's audit passed (possibly with warnings)."""
        return self.status.ok

    @property
    def failed_checks(self) -> tuple[str, ...]:
        """``table: check`` of every failed check, tables in order."""
        return tuple(f"{a.table}: {c}" for a in self.tables for c in a.failed_checks)


def lakehouse(lh: Session | Lakehouse | None = None) -> Lakehouse:
    """``lh``, or the lakehouse of the environment acting as the pipeline's service identity (:func:`context`)."""
    return context(lh).lakehouse


def context(lh: Session | Lakehouse | None = None) -> Session:
    """The session the pipeline acts in: ``lh`` itself when it is a session, a lakehouse acting as its own
    user, else the start-up every face shares
    (:func:`wap_core.api.start`) with the CLI's identity (:func:`wap_core.api.open_context`, ``service``):
    the service token in ``WAP_TOKEN`` (its user with exactly its role; an unknown, expired or revoked token
    is refused, exit 1), else ``WAP_USER`` unless the access file says ``cli_identity: token``.
    """
    if isinstance(lh, Session):
        return lh
    if lh is not None:
        return api.open_context(lh)
    return api.open_context(api.start(), service=True)


session = context  # the name the session helper gave it: one function


def _tid(table: TableId | str) -> TableId:
    return table if isinstance(table, TableId) else TableId.parse(table)


def ingest(
    table: TableId | str,
    sources: Sequence[str],
    *,
    branch: str | None = None,
    fmt: str | None = None,
    create: bool = False,
    lh: Session | Lakehouse | None = None,
    batch: str | None = None,
    replay_of: str | None = None,
) -> Branch:
    """Write ``sources`` into a new audit branch of ``table`` and audit it (as the service user).

    Sources are read as the CLI reads them (any path the process can read). A failed audit is not an
    error here: the batch waits in its branch for a person (see :func:`wait_for_decision`). ``batch``:
    the table joins the open batch of that name (created on first use), its branch named like it.
    ``replay_of``: the batch whose quarantined rows the sources replace (``wap ingest --replay-of``).

    Checks with ``on_fail: quarantine`` that failed had their failing rows moved to the table's quarantine
    table (``quarantined`` rows, ``quarantine_table``): the branch returned is the repaired one, and the
    steps below (wait, publish, discard) act on it together with its quarantine table's branch.
    """
    r = api.ingest(
        context(lh),
        _tid(table),
        list(sources),
        branch=branch,
        batch=batch,
        fmt=fmt,
        create=create,
        source_policy=SourcePolicy.ANY,
        replay_of=replay_of,
    )
    kept = r.quarantine if r.quarantine is not None and r.quarantine.quarantined else None
    return Branch(
        table=r.table,
        branch=r.branch,
        snapshot_id=r.snapshot_id,
        fork_snapshot_id=r.fork_snapshot_id,
        rows_written=r.rows_written,
        status=r.audit.status,
        failed_checks=tuple(r.audit.failed_checks),
        batch=r.batch,
        quarantined=kept.quarantined if kept is not None else 0,
        quarantine_table=kept.quarantine_table if kept is not None else None,
    )


Pairs = Sequence[tuple[TableId | str, Sequence[str]]]  # (table, sources) of each table of a batch


def new_batch_name() -> str:
    """A new batch name ``batch_<UTC time>_<6 hex>`` (unique: pipelines may run at the same second)."""
    return f"batch_{datetime.now(UTC):%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:6]}"


def check_pairs(pairs: Pairs) -> list[tuple[str, list[str]]]:
    """``pairs`` as ``(table, sources)`` lists; :class:`ValidationError` (exit 2) when empty, a table is
    given twice, or a table has no source."""
    out = [(str(_tid(t)), [str(x) for x in ([srcs] if isinstance(srcs, str) else srcs)]) for t, srcs in pairs]
    if not out:
        raise ValidationError("a batch needs at least one (table, sources) pair")
    tables = [t for t, _ in out]
    twice = sorted({t for t in tables if tables.count(t) > 1})
    if twice:
        raise ValidationError(f"a table may appear once in a batch: {', '.join(twice)} appears twice")
    empty = [t for t, srcs in out if not srcs]
    if empty:
        raise ValidationError(f"no source given for {', '.join(empty)}")
    return out


def ingest_batch(
    pairs: Pairs,
    *,
    batch: str | None = None,
    fmt: str | None = None,
    create: bool = False,
    lh: Session | Lakehouse | None = None,
) -> BatchBranches:
    """Write several tables into one batch: each ``(table, sources)`` pair by :func:`ingest` with
    ``batch=NAME``, in the order given (a table the others reference first: each table is audited at its
    ingest; :func:`audit_batch` audits the whole batch once all are written).

    ``batch`` is the batch's name (default: :func:`new_batch_name`). When one ingest fails, the tables
    written before it stay in the open batch (:func:`discard_batch` rolls them back) and the error is
    raised.
    """
    checked = check_pairs(pairs)
    name = batch or new_batch_name()
    ctx = context(lh)
    out = tuple(ingest(t, srcs, fmt=fmt, create=create, batch=name, lh=ctx) for t, srcs in checked)
    log.info("batch %s: %s written", name, ", ".join(b.table for b in out))
    return BatchBranches(name, out)


def open_branch(
    table: TableId | str,
    *,
    branch: str | None = None,
    batch: str | None = None,
    lh: Session | Lakehouse | None = None,
) -> OpenedBranch:
    """Open a branch of ``table`` for the pipeline's own Spark job (created at main's head, or an existing
    branch taken over), the pipeline's identity its author; ``batch``: join that batch. The result says how the
    job writes there: ``spark_conf`` (``spark.wap.branch``, with ``table_properties`` the table still needs)
    or the ``identifier`` ``t.branch_<name>``."""
    opened = api.open_branch(context(lh), _tid(table), branch=branch, batch=batch)
    log.info("%s %s %s for %s", opened.outcome, opened.table, opened.branch, opened.user)
    return opened


def audit(
    table: TableId | str, branch: str, *, require_pass: bool = False, lh: Session | Lakehouse | None = None
) -> Audit:
    """(Re-)audit ``branch``; with ``require_pass`` a failed audit raises :class:`AuditFailedError` (exit 1)."""
    r = api.run_audit(context(lh), _tid(table), branch)
    out = Audit(r.table, r.branch, r.snapshot_id, r.status, tuple(r.failed_checks))
    if require_pass and not out.passed:
        raise AuditFailedError(
            f"audit of {out.table} {out.branch} failed: {', '.join(out.failed_checks)}",
            list(out.failed_checks),
        )
    return out


def audit_batch(
    batch: str, *, require_pass: bool = False, lh: Session | Lakehouse | None = None
) -> BatchAudit:
    """(Re-)audit the open batch ``batch`` (:func:`wap_core.api.audit_batch`: only the tables whose audit is
    stale run again; a check that reads another table of the batch reads it at the batch's head);
    ``require_pass``: a failed table raises :class:`AuditFailedError` (exit 1)."""
    r = api.audit_batch(context(lh), batch)
    audits = tuple(
        Audit(a.table, a.branch, a.snapshot_id, a.status, tuple(a.failed_checks)) for a in r.tables
    )
    out = BatchAudit(r.batch, r.status, audits, tuple(r.reaudited))
    if require_pass and not out.passed:
        raise AuditFailedError(
            f"audit of batch {batch} failed: {', '.join(out.failed_checks)}", list(out.failed_checks)
        )
    return out


def decision_now(
    table: TableId | str, branch: str, *, lh: Session | Lakehouse | None = None, alone: bool = True
) -> Decision | None:
    """One look: the decision on ``branch`` if there is one yet, else None (metadata and journal only).

    ``alone=False``: the branch is judged as a table of its batch (a table of a batch of several tables is
    never published alone: :func:`batch_decision_now`).

    The look first settles the pending intents of the branch (:func:`~wap_core.workflow.reconcile.reconcile`
    of this table and branch only; one indexed query when none is pending). Reads never repair, but this is
    an explicit entry point, like the CLI's start: a pipeline often runs with no console (whose tick would
    reconcile) and no other command after it, so a publish killed between its commit and its outcome row
    would otherwise look undecided until the timeout (and a rejection) while main holds the batch.

    An open branch is APPROVED once it is publishable (audit passed on the head, review policy
    satisfied), CHANGES_REQUESTED while a reviewer's request is open on the head. A branch that is gone
    was PUBLISHED or DISCARDED, as the journal says; gone without either raises :class:`NotFoundError`.
    A branch only its own quarantine table joined (``on_fail: quarantine``) is judged with it, as that
    batch (:func:`batch_decision_now`).
    """
    ctx = context(lh)
    tid = _tid(table)
    api.recover(
        ctx, tid, branch=branch
    )  # a crashed publish/discard of this branch is recorded before deciding
    if alone and api.with_its_quarantine(ctx, tid, branch):
        return batch_decision_now(branch, lh=ctx)
    tbl = api.table(ctx, tid)
    if api.ref_snapshot_id(tbl, branch) is None:
        # A publish or discard commits its ref move, then journals its outcome and releases its intent in
        # one transaction: an intent still pending after the reconcile above belongs to a process that is
        # still running, so its outcome is on its way (look again next poll).
        if api.pending_intent_on(ctx, tid, branch):
            return None
        for e in api.history(ctx, str(tid), branch=branch, limit=50):  # newest first
            if e.action is Action.PUBLISH and e.outcome in (Outcome.PUBLISHED, Outcome.FORCED):
                return Decision.PUBLISHED
            if e.outcome in (Outcome.DISCARDED, Outcome.EXPIRED):
                return Decision.DISCARDED
        api.require_branch(tbl, tid, branch)  # raises NotFoundError naming the open branches
        raise NotFoundError(f"branch {branch} of {tid} is gone")  # pragma: no cover - require_branch raised
    ready = api.publish_readiness(ctx, tid, branch, tbl, alone=alone)
    if ready.allowed:
        return Decision.APPROVED
    if ready.review is not None and ready.review.state is ReviewState.CHANGES_REQUESTED:
        return Decision.CHANGES_REQUESTED
    return None


def batch_tables(batch: str, *, lh: Session | Lakehouse | None = None) -> tuple[str, ...]:
    """The tables of batch ``batch``: its open members, else (all gone: published or discarded) every table
    the journal has an entry of on a branch of that name; :class:`NotFoundError` (exit 2) when none."""
    ctx = context(lh)
    b = api.find_batch(ctx, batch)
    if b is not None:
        return tuple(str(t) for t in b.table_ids)
    tables = sorted({e.table for e in api.history(ctx, branch=batch, limit=500) if e.table})
    if not tables:
        raise NotFoundError(f"no batch {batch}: no table has a branch of that name")
    return tuple(tables)


def batch_decision_now(batch: str, *, lh: Session | Lakehouse | None = None) -> Decision | None:
    """One look at a batch that spans tables: :func:`decision_now` of each of its tables, combined.

    DISCARDED when a table's branch was discarded, CHANGES_REQUESTED when a reviewer asked for changes on
    one, None while any is undecided, PUBLISHED when every table was published, else APPROVED (every
    table publishable now, or published already: the batch's publish moves the rest).
    """
    ctx = context(lh)
    looks = [decision_now(t, batch, lh=ctx, alone=False) for t in batch_tables(batch, lh=ctx)]
    for d in (Decision.DISCARDED, Decision.CHANGES_REQUESTED):
        if d in looks:
            return d
    if None in looks:
        return None
    return Decision.PUBLISHED if all(d is Decision.PUBLISHED for d in looks) else Decision.APPROVED


def _wait(
    look: Callable[[], Decision | None],
    what: str,
    timeout: float,
    poll: float,
    sleep: Callable[[float], None],
) -> Decision:
    """Look once per ``poll`` seconds until ``look`` decides or ``timeout`` passed (checked by the caller)."""
    deadline = time.monotonic() + timeout
    while True:
        d = look()
        if d is not None:
            log.info("decision on %s: %s", what, d)
            return d
        left = deadline - time.monotonic()
        if left <= 0:
            return Decision.TIMED_OUT
        sleep(min(poll, left))


def wait_for_batch_decision(
    batch: str,
    timeout: float,
    poll: float = DEFAULT_POLL,
    *,
    lh: Session | Lakehouse | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Decision:
    """:func:`wait_for_decision` for a batch that spans tables (:func:`batch_decision_now`, once per poll)."""
    check_wait(timeout, poll)
    s = session(lh)
    return _wait(lambda: batch_decision_now(batch, lh=s), f"batch {batch}", timeout, poll, sleep)


def wait_for_decision(
    table: TableId | str,
    branch: str,
    timeout: float,
    poll: float = DEFAULT_POLL,
    *,
    lh: Session | Lakehouse | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Decision:
    """Wait (at most ``timeout`` seconds, one look per ``poll`` seconds) for a decision on ``branch``.

    Returns at once when the branch is publishable already; else when a person published, discarded or
    requested changes (:func:`decision_now`); TIMED_OUT when ``timeout`` passed first. ``timeout`` is finite
    and >= 0 (0: one look); ``poll`` finite and >= :data:`MIN_POLL`; else :class:`ValidationError` (exit 2).
    """
    check_wait(timeout, poll)
    s = session(lh)
    return _wait(lambda: decision_now(table, branch, lh=s), f"{table} {branch}", timeout, poll, sleep)


def check_wait(timeout: float, poll: float) -> None:
    """Refuse (:class:`ValidationError`, exit 2) a wait that could never end or would busy-loop: a timeout
    that is not a finite number >= 0 (``nan`` compares false with everything: it would wait forever), a poll
    that is not a finite number >= :data:`MIN_POLL` (0 busy-loops, a negative one cannot be slept)."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise ValidationError(f"the timeout must be a finite number of seconds >= 0, got {timeout!r}")
    if not (isinstance(poll, (int, float)) and math.isfinite(poll) and poll >= MIN_POLL):
        raise ValidationError(f"the poll must be a finite number of seconds >= {MIN_POLL:g}, got {poll!r}")


def require_go(decision: Decision, table: TableId | str, branch: str) -> Decision:
    """``decision`` when the pipeline may publish; else :class:`BatchRejectedError` (exit 1) naming it."""
    if decision.go:
        return decision
    raise BatchRejectedError(f"{table} {branch}: {decision.value.replace('_', ' ')}", decision.value)


def publish_if_passed(
    table: TableId | str, branch: str, *, lh: Session | Lakehouse | None = None
) -> PublishResult:
    """Publish ``branch`` when its audit and the table's review policy allow it (never forced).

    A refusal raises :class:`wap_core.exceptions.RefusedError` (exit 1) and is journaled; a branch a
    person already published returns ``outcome == "already_published"``. A branch only its own quarantine
    table joined (``on_fail: quarantine``) is published with it, both mains or neither
    (:func:`publish_batch_if_passed`); the table's own result is returned.
    """
    ctx = context(lh)
    tid = _tid(table)
    if api.with_its_quarantine(ctx, tid, branch):
        both = api.publish_batch(ctx, branch)
        return next(r for r in both.tables if r.table == str(tid))
    return api.publish(ctx, tid, branch)


def discard(
    table: TableId | str, branch: str, *, reason: str | None = None, lh: Session | Lakehouse | None = None
) -> bool:
    """Discard ``branch`` (a pipeline's rollback); False when it is gone already (published or discarded).
    A branch only its own quarantine table joined is discarded with it (the kept rows go too)."""
    ctx = context(lh)
    tid = _tid(table)
    if api.ref_snapshot_id(api.table(ctx, tid), branch) is None:
        return False
    if api.with_its_quarantine(ctx, tid, branch):
        api.discard_batch(ctx, branch, reason=reason)
        return True
    api.discard(ctx, tid, branch, reason=reason)
    return True


def publish_batch_if_passed(batch: str, *, lh: Session | Lakehouse | None = None) -> BatchPublishResult:
    """Publish every table of batch ``batch`` when every audit and review policy allow it (never forced):
    every table's main moves in one multi-table commit, or none does (:func:`wap_core.api.publish_batch`).

    A refusal raises :class:`wap_core.exceptions.RefusedError` (exit 1) and is journaled for every table; a
    batch a person already published returns ``outcome == "already_published"``.
    """
    return api.publish_batch(context(lh), batch)


def discard_batch(batch: str, *, reason: str | None = None, lh: Session | Lakehouse | None = None) -> bool:
    """Discard every open branch of batch ``batch`` (a pipeline's rollback); False when none is left."""
    ctx = context(lh)
    if api.find_batch(ctx, batch) is None:
        return False
    api.discard_batch(ctx, batch, reason=reason)
    return True


def review_url(table: TableId | str, branch: str, *, lh: Session | Lakehouse | None = None) -> str:
    """The console's Review page of the branch (``console_url`` of the notifications file)."""
    return api.review_url(context(lh), table, branch)


def batch_review_url(batch: str, *, lh: Session | Lakehouse | None = None) -> str:
    """The console's Review page of a batch that spans tables: ``<console_url>/review?batch=NAME``."""
    console = api.review_url(context(lh), "-", "-").split("/review?", 1)[0]
    return f"{console}/review?{urlencode({'batch': batch}, quote_via=quote)}"


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line and exit 2 (never argparse's usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(printable(one_line(f"error: {message}")), file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wap_core.pipeline wait TABLE BRANCH`` (or ``wait --batch NAME``): the wait for any other
    orchestrator (a shell step).

    Prints the decision (``--json``: ``{"table", "branch", "decision"}``, or ``{"batch", "decision"}``); exit 0 when the pipeline may
    publish (approved, published), 1 when not (discarded, changes requested, timed out), 2 on an error:
    bad arguments, a refused identity (an unknown, expired or revoked ``WAP_TOKEN``) or any other failure,
    always one line. Exit 1 is only ever a decision, so an orchestrator never takes an error for a rejection.
    """
    p = _Parser(prog="python -m wap_core.pipeline", description=main.__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wait", help="wait for a decision on a branch (or a batch) in the console")
    w.add_argument("table", nargs="?")
    w.add_argument("branch", nargs="?")
    w.add_argument("--batch", help="wait for the batch of that name (all its tables) instead of one branch")
    w.add_argument("--timeout", type=float, default=86400.0, help="seconds, finite, >= 0 (default one day)")
    w.add_argument(
        "--poll",
        type=float,
        default=DEFAULT_POLL,
        help=f"seconds between looks, >= {MIN_POLL:g} (default {DEFAULT_POLL:g})",
    )
    w.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if (args.batch is None) == (args.table is None or args.branch is None) or (args.batch and args.table):
        p.error("give TABLE BRANCH or --batch NAME")
    try:
        if args.batch is not None:
            d = wait_for_batch_decision(args.batch, args.timeout, args.poll)
        else:
            d = wait_for_decision(args.table, args.branch, args.timeout, args.poll)
    except WapError as exc:  # a refusal here (the identity) is an error too: exit 1 is a decision
        # one line, no control byte (a table or branch name is user text)
        print(printable(one_line(mask_secrets(f"error: {exc}"))), file=sys.stderr)
        return 2
    except Exception as exc:  # an uncaught error would exit 1, which a shell step reads as "rejected"
        log.debug("wait failed", exc_info=True)
        print(
            printable(one_line(mask_secrets(f"error: {type(exc).__name__}: {first_line(exc)}"))),
            file=sys.stderr,
        )
        return 2
    if args.json:
        where = (
            {"batch": args.batch} if args.batch is not None else {"table": args.table, "branch": args.branch}
        )
        print(json.dumps({**where, "decision": d.value}))
    else:
        print(d.value)
    return 0 if d.go else 1


if __name__ == "__main__":
    raise SystemExit(main())
