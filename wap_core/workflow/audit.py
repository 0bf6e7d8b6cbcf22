"""Audit a branch: evaluate its table's suite on what the branch changed since its fork.

The batch is read from the files the branch's snapshots added (and, for updates, deletes and
overwrites, removed: :mod:`wap_core.lake.batch`), so the cost follows the change, not the table.
A branch that rewrites rows is judged on what main becomes: row checks judge its inserted and
updated rows, ``unique`` their keys at the head, and the audit records what a publish would insert,
update and delete (``changes``), limited by ``removed_rows`` / ``changed_rows``. The result is
stored in the journal with the audited snapshot id; re-running is always allowed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict, Unpack

from wap_core import notify
from wap_core.analysis.batch_reads import batch_reads, suite_reads
from wap_core.analysis.diff import cached_main_profile
from wap_core.checks import (
    CheckResult,
    CheckSpec,
    Evaluation,
    MainContext,
    OtherRead,
    Suite,
    batch_builtins,
    evaluate,
    suite_for,
    summarize,
)
from wap_core.checks.store import ResultCache, StoredHistory, save_batch_metrics
from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.lake import jobs
from wap_core.lake.batch import (
    ChangeCounts,
    batch_files,
    batch_frame,
    change_counts,
    materialized_changes,
    read_method,
    single_split,
)
from wap_core.notify import Event, emit
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, BatchRead, CheckStatus, Outcome
from wap_core.store.journal import StoredAudit, utcnow
from wap_core.values import JSON, JsonObject, seconds_view, to_jsonable
from wap_core.workflow.reconcile import reconciled_table
from wap_core.workflow.review import ReviewState, review_state

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame

    from wap_core.lake.profile import TableProfile
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

BATCH_READS = "batch_reads"  # the stored result's key: {other table of the batch: the head its checks read}


@dataclass
class AuditResult:
    """The outcome of one audit of a branch head: the overall status and every check's result."""

    table: str
    branch: str
    snapshot_id: int
    fork_snapshot_id: int | None
    status: CheckStatus
    rows_checked: int
    checks: list[CheckResult]
    user: str
    at: str
    seconds: float = field(metadata={JSON: seconds_view})
    checks_file: str | None = None
    changes: ChangeCounts | None = None  # what a publish would insert, update and delete on main
    extra: JsonObject = field(default_factory=dict, metadata={JSON: False})

    @property
    def passed(self) -> bool:
        """True when the audit passed or only warned (it does not block a publish)."""
        return self.status.ok

    @property
    def failed_checks(self) -> list[str]:
        """The checks that failed or errored (they fail the audit)."""
        return [c.name for c in self.checks if c.status.blocks_publish]

    @classmethod
    def from_dict(cls, d: JsonObject) -> AuditResult:
        """The result back from its JSON form (missing optional keys take defaults)."""
        return cls(
            table=d["table"],
            branch=d["branch"],
            snapshot_id=d["snapshot_id"],
            fork_snapshot_id=d.get("fork_snapshot_id"),
            status=CheckStatus(d["status"]),
            rows_checked=d.get("rows_checked", 0),
            checks=[CheckResult.from_dict(c) for c in d.get("checks", [])],
            user=d.get("user", ""),
            at=d.get("at", ""),
            seconds=d.get("seconds", 0.0),
            checks_file=d.get("checks_file"),
            changes=_changes_from(d.get("changes")),
            extra={BATCH_READS: d[BATCH_READS]} if isinstance(d.get(BATCH_READS), dict) else {},
        )

    @property
    def batch_reads(self) -> dict[str, int]:
        """The other tables of the branch's batch its checks read, at which head (``{}``: none, or a plain branch)."""
        got = self.extra.get(BATCH_READS)
        return {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else {}

    @classmethod
    def from_stored(cls, stored: StoredAudit) -> AuditResult:
        """The result of an audit stored in the journal."""
        return cls.from_dict(stored.result)


def _changes_from(d: object) -> ChangeCounts | None:
    """An audit's stored ``changes`` back as :class:`ChangeCounts` (None for audits stored before them)."""
    if not isinstance(d, dict):
        return None
    return ChangeCounts(
        method=BatchRead(d["method"]),
        inserted=int(d.get("inserted") or 0),
        updated=int(d.get("updated") or 0),
        deleted=int(d.get("deleted") or 0),
        main_rows=None if d.get("main_rows") is None else int(d["main_rows"]),
        key=tuple(d.get("key") or ()),
        note=str(d.get("note") or ""),
    )


def table_key(suite: Suite) -> tuple[str, ...]:
    """The table's declared key: the columns of its suite's first key-defining check (``unique``), else ()."""
    return suite.key


def builtin_checks(lin: cat.Lineage) -> list[CheckSpec]:
    """Checks every batch gets regardless of the suite (registered built-ins): malformed source rows."""
    return batch_builtins(_summaries(lin))


def _summaries(lin: cat.Lineage) -> tuple[dict[str, str], ...]:
    return tuple(
        dict(s.summary.additional_properties) if s.summary is not None else {} for s in lin.new_snapshots
    )


def batch_metrics(suite: Suite, evaluation: Evaluation) -> dict[str, float]:
    """The batch's row count and every metric its anomaly checks measured (the next batches' history)."""
    metrics: dict[str, float] = {"row_count": float(evaluation.rows)}
    for spec in suite.checks:
        m = evaluation.measurements.get(spec.name)
        kept = spec.history_metric(m) if m is not None else None
        if kept is not None:
            metrics[kept[0]] = kept[1]
    return metrics


class AuditOptions(TypedDict, total=False):
    """What :func:`run_audit` and :func:`audit_branch` take beyond the branch.

    ``user`` (default: the lakehouse's), ``suite`` (default: the table's suite in the checks file),
    ``observed`` (``(snapshot_id, metrics)`` collected by ingest while it wrote that snapshot) and
    ``use_cache`` (default true: reuse the measurements of checks that did not change) and ``announce``
    (default true: notify a failed audit, or a passed one awaiting approval; false: the caller does it later
    with :func:`announce_audit`, as an ingest whose checks may quarantine does).
    """

    user: str | None
    suite: Suite | None
    observed: tuple[int, JsonObject] | None
    use_cache: bool
    announce: bool


def run_audit(
    session: Session | Lakehouse, table: TableId, branch: str, **options: Unpack[AuditOptions]
) -> AuditResult:
    """(Re-)audit ``branch`` of ``table`` as ``user`` (the AUDIT permission) and record the result.

    Its Spark jobs run in their own job group in ``user``'s FAIR pool (:mod:`wap_core.lake.jobs`; no time
    limit: the result must be recorded, and the work is bounded by the batch, not by user text).
    """
    s = session_of(session, options.get("user"))
    lh, user = s.lakehouse, s.user
    options["user"] = user
    s.authorize(Permission.AUDIT, table=table, branch=branch)
    with jobs.user_jobs(lh.spark, user, f"the audit of {table} {branch}"):
        return audit_branch(lh, table, branch, **options)


def audit_branch(lh: Lakehouse, table: TableId, branch: str, **options: Unpack[AuditOptions]) -> AuditResult:
    """Audit ``branch`` of ``table`` and record the result. Never changes any ref.

    Not guarded: callers authorize first (:func:`run_audit` as AUDIT; ingest's own audit is
    part of the ingest). ``observed`` is ``(snapshot_id, metrics)`` collected by ingest while it
    wrote that snapshot; it replaces the aggregate pass only when that snapshot is the branch's
    whole batch. Measurements are cached per (batch head, check fingerprint): a re-audit measures
    only checks that changed (``use_cache=False`` measures everything again).
    """
    t0 = time.perf_counter()
    user = options.get("user") or lh.user
    suite, observed = options.get("suite"), options.get("observed")
    tbl = reconciled_table(lh, table)
    cat.require_branch(tbl, table, branch)
    lin = cat.lineage(tbl, branch)
    suite = suite if suite is not None else suite_for(lh.settings.checks_file, table)
    files = batch_files(lin)  # what the batch read covers, from the snapshot summaries
    precomputed = None
    if observed is not None and observed[0] == lin.head and len(lin.new_snapshots) == 1:
        precomputed = observed[1]
    engine = lh.journal.engine
    # the other tables of the branch's batch that the checks read, at their heads there ({} for a plain branch)
    inside = batch_reads(lh, table, branch, suite_reads(suite.checks))
    name = lh.spark_name(table)
    # what a publish would do to main: no Spark job for an append; a rewriting branch's change is read from the
    # changed files ONCE (materialized), then counted, checked and sampled from there
    net = materialized_changes(lh.spark, name, lin)
    changes = change_counts(lh.spark, name, lin, table_key(suite), cat.snapshot_rows(tbl, lin.fork), net)
    evaluation = evaluate(
        batch_frame(lh.spark, name, lin, net),
        Suite(suite.table, (*builtin_checks(lin), *suite.checks), suite.source),
        _main_context(lh, table, tbl, lin, inside, changes),
        lh.settings.sample_rows,
        precomputed,
        cache=ResultCache(engine, str(table), lin.head) if options.get("use_cache", True) else None,
        single_split=single_split(tbl.properties, files),
        rows_hint=files.rows if files is not None else None,
    )
    save_batch_metrics(engine, str(table), lin.head, lin.fork, batch_metrics(suite, evaluation))
    at = utcnow()
    result = AuditResult(
        table=str(table),
        branch=branch,
        snapshot_id=lin.head,
        fork_snapshot_id=lin.fork,
        status=summarize(evaluation.results),
        rows_checked=evaluation.rows,
        checks=evaluation.results,
        user=user,
        at=at.isoformat(),
        seconds=time.perf_counter() - t0,
        checks_file=str(lh.settings.checks_file),
        changes=changes,
        extra={BATCH_READS: {t: r.snapshot_id for t, r in inside.items()}} if inside else {},
    )
    _record(lh, result, at)
    if options.get("announce", True):
        announce_audit(lh, result, tbl)
    return result


def announce_audit(lh: Lakehouse, result: AuditResult, tbl: Table | None = None) -> None:
    """Notify an audit's result: its failure, or a pass awaiting approvals (what :func:`audit_branch` sends
    unless told ``announce=False``)."""
    if result.status is CheckStatus.FAILED:
        _announce_failure(lh, result)
    elif result.passed:
        table = TableId.parse(result.table)
        tbl = tbl if tbl is not None else lh.table(table)
        _announce_awaiting(lh, table, result.branch, result.user, result.snapshot_id, tbl)


def _main_context(
    lh: Lakehouse,
    table: TableId,
    tbl: Table,
    lin: cat.Lineage,
    inside: Mapping[str, OtherRead],
    changes: ChangeCounts | None = None,
) -> MainContext:
    """What checks compare the batch with: main at the batch's fork (where it would be published); another
    table at its main, or at its head in the batch when it is in ``inside`` (the branch's batch)."""
    fork = lin.fork

    def read_main(t: TableId) -> DataFrame | None:
        if t == table:
            return lh.read_snapshot(table, fork) if fork is not None else None
        if str(t) in inside:
            return lh.read_snapshot(t, inside[str(t)].snapshot_id)
        return lh.read_main(t)

    def snapshot_of(t: TableId) -> int | None:
        return cat.ref_snapshot_id(lh.table(t), MAIN) if cat.table_exists(lh.catalog, t) else None

    def stored_main_profile() -> TableProfile | None:
        return cached_main_profile(lh, table, fork)

    return MainContext(
        lh.spark,
        read_main,
        table,
        snapshot_of=snapshot_of,
        fork_snapshot_id=fork,
        head_snapshot_id=lin.head,
        new_snapshot_summaries=_summaries(lin),
        stored=StoredHistory(lh.journal.engine, str(table), tbl, fork, stored_main_profile),
        batch_reads=dict(inside),
        method=read_method(lin)[0],
        changes=changes,
        read_head=lambda: lh.read_snapshot(table, lin.head),
    )


def _record(lh: Lakehouse, result: AuditResult, at: datetime) -> None:
    """The audit stored (the branch's latest) and journaled."""
    table, branch, status, failed = result.table, result.branch, result.status, result.failed_checks
    lh.journal.save_audit(
        user=result.user,
        table=table,
        branch=branch,
        snapshot_id=result.snapshot_id,
        fork_snapshot_id=result.fork_snapshot_id,
        status=status,
        result={**to_jsonable(result), **result.extra},  # + the batch heads it read (audit_batch's staleness)
        at=at,
    )
    lh.journal.record(
        user=result.user,
        action=Action.AUDIT,
        table=table,
        branch=branch,
        snapshot_before=result.fork_snapshot_id,
        snapshot_after=result.snapshot_id,
        outcome=Outcome(status.value),
        details={"failed_checks": failed, "checks": len(result.checks), "rows": result.rows_checked},
    )


def _announce_failure(lh: Lakehouse, result: AuditResult) -> None:
    """The audit failed: notify it, with the failed checks."""
    table, branch, failed = result.table, result.branch, result.failed_checks
    notify.emit(
        lh.journal,
        lh.settings,
        notify.Event.AUDIT_FAILED,
        table=table,
        branch=branch,
        user=result.user,
        status=result.status.value,
        failed_checks=failed,
        summary=f"audit of {table} {branch} failed: {len(failed)} of {len(result.checks)} checks failed on "
        f"{result.rows_checked} new rows ({', '.join(failed)})",
        snapshot_id=result.snapshot_id,
    )


def _announce_awaiting(lh: Lakehouse, table: TableId, branch: str, user: str, head: int, tbl: Table) -> None:
    """The audit passed: when the table's policy needs approvals the head does not have yet, notify the reviewers."""

    rs = review_state(lh, table, branch, tbl)
    if rs.state is ReviewState.AWAITING:
        emit(
            lh.journal,
            lh.settings,
            Event.AWAITING_APPROVAL,
            table=str(table),
            branch=branch,
            user=user,
            status=rs.state.value,
            summary=f"audit passed; {rs.message}",
            snapshot_id=head,
        )


def latest_audit(lh: Lakehouse, table: TableId, branch: str) -> AuditResult | None:
    """The latest stored audit of ``table``'s ``branch`` (any head), or None."""
    stored = lh.journal.latest_audit(str(table), branch)
    return AuditResult.from_stored(stored) if stored is not None else None
