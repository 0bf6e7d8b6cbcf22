"""Quarantine: repair a failed batch by moving its failing rows to the table's quarantine table.

``wap quarantine TABLE BRANCH [--check NAME]... --reason TEXT`` (steward). The rows of the branch's
**batch** (its rows since the fork, :func:`wap_core.lake.batch.batch_frame`) that fail the chosen row-level
checks of its latest audit (default: every failing one) leave the branch and are kept, with why, in
``<namespace>.<table>__quarantine`` (:func:`quarantine_table_id`), on a branch of the same name: that table
joins the batch (:func:`wap_core.workflow.batch.join`), so its rows publish with the batch or are discarded
with it.

How the rows leave, without touching main's files: the batch's kept rows are appended onto a temporary
branch at the fork, which then replaces the branch (one ref move, as a rebase swaps). Main's data files are
never rewritten nor referenced by a delete file (the new head is the fork plus one appended snapshot), so
main's own rows that also fail a check (a plain ``DELETE`` would remove them) stay. The cost follows the
batch: only the batch's rows are read and written again.

Crash safety (one intent, journaled; fault points in :mod:`wap_core.actions.quarantine`): the kept rows are
written first, stamped with the intent; then the branch swaps. A quarantine that did not land (killed,
lost a race) has its kept rows removed again by reconcile (:func:`wap_core.workflow.reconcile.undo_kept`):
never rows deleted without being kept, never kept twice.

``unique``: of the rows sharing a key within the batch, the FIRST by the order the batch is read (its data
files in commit order, rows in file order) stays; the others are quarantined, and so is every row whose key
main already holds (at the fork). Aggregate checks (``row_count``, ``freshness``, ``anomaly``, ``drift``,
``schema``) cannot be repaired by removing rows, and ``malformed_rows`` counts lines that never became rows:
both are refused when named, skipped by default.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wap_core.analysis.batch_reads import batch_reads
from wap_core.checks import CheckSpec, Level, MainContext, Suite, observed_metrics, suite_for
from wap_core.checks.references import References
from wap_core.checks.unique import Unique
from wap_core.exceptions import CommitConflictError, ConflictError, RefusedError, ValidationError
from wap_core.faults import fault_point
from wap_core.identifiers import MAIN, TableId, quote_column, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.batch import batch_files, batch_frame
from wap_core.lake.refs import commit_conflicts, remove_branch_quietly, with_commit_retry
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, CheckStatus, Outcome
from wap_core.store.journal import Intent
from wap_core.values import JsonObject
from wap_core.workflow.audit import AuditResult, audit_branch, latest_audit
from wap_core.workflow.batch import join
from wap_core.workflow.rebase import append_and_swap
from wap_core.workflow.reconcile import INTENT_PROPERTY, reconciled_table, temp_branch_name, undo_kept
from wap_core.workflow.refmove import Moved, RefMove
from wap_core.workflow.source_lines import LINE, provenance, with_ranks, with_source_lines

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation
    from pyspark.sql.types import StructType

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

SUFFIX = "__quarantine"
ROW = "__wap_row"  # the batch row's number while the rows are sorted out (never written)
# the columns a quarantine table adds to its table's, with their Spark SQL types
EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_wap_batch", "string"),
    ("_wap_checks", "array<string>"),
    ("_wap_reason", "string"),
    ("_wap_user", "string"),
    ("_wap_quarantined_at", "timestamp"),
    (
        "_wap_source_line",
        "bigint",
    ),  # the row's line in its source file (NULL: unknown; wap_core.workflow.source_lines)
    ("_wap_replayed_by", "string"),  # the batch that replayed the row (NULL until replayed; workflow.replay)
    ("_wap_replayed_at", "timestamp"),
)
# the extra columns added after quarantine tables existed: a table lacking only these is upgraded, not refused
LATER_COLUMNS = frozenset({"_wap_source_line", "_wap_replayed_by", "_wap_replayed_at"})
_NO_ROWS_IN_TABLE = frozenset({"malformed_rows"})  # its failing "rows" are source lines never written


@dataclass(frozen=True)
class QuarantineResult:
    """What a quarantine did (JSON keys: table, branch, quarantine_table, checks, quarantined, rows_before,
    rows_after, old_head, new_head, reason, audit)."""

    table: str
    branch: str
    quarantine_table: str
    checks: dict[str, int]  # check name -> rows quarantined failing it (a row failing two counts in both)
    quarantined: int  # rows quarantined (each once)
    rows_before: int  # the batch's rows before
    rows_after: int  # the batch's rows after: rows_before - quarantined
    old_head: int
    new_head: int
    reason: str
    audit: AuditResult | None = None  # the branch's re-audit, right after


def quarantine_table_id(table: TableId) -> TableId:
    """The quarantine table of ``table``: ``<namespace>.<table>__quarantine``."""
    return TableId(table.namespace, f"{table.name}{SUFFIX}")


def _ddl_type(spark_type: str) -> str:
    return spark_type.lower().replace(" ", "")


def schema_problems(table_schema: StructType, quarantine_schema: StructType) -> list[str]:
    """The columns of an existing quarantine table that do not fit ``table_schema`` plus the extra columns."""
    want = {f.name: _ddl_type(f.dataType.simpleString()) for f in table_schema.fields}
    want.update({n: _ddl_type(t) for n, t in EXTRA_COLUMNS})
    have = {f.name: _ddl_type(f.dataType.simpleString()) for f in quarantine_schema.fields}
    out = [f"{n} (missing)" for n in want if n not in have]
    out += [f"{n} ({have[n]}, not {want[n]})" for n in want if n in have and have[n] != want[n]]
    out += [f"{n} (not in the table)" for n in have if n not in want]
    return out


def upgradable(problems: Sequence[str]) -> list[str]:
    """The columns an existing quarantine table lacks that :func:`upgrade` may add (empty: none, or the
    table has other problems, which are refused)."""
    missing = [p.removesuffix(" (missing)") for p in problems if p.endswith(" (missing)")]
    if len(missing) != len(problems) or not set(missing) <= LATER_COLUMNS:
        return []
    return missing


def upgrade(lh: Lakehouse, qid: TableId, columns: Sequence[str]) -> None:
    """Add the later extra ``columns`` to the quarantine table ``qid`` (its schema only, every branch:
    old rows read them as NULL). Never applied to a table's own schema."""
    if not columns:
        return
    if not qid.name.endswith(SUFFIX):
        raise ValidationError(f"{qid} is not a quarantine table: its schema is never evolved here")
    types = dict(EXTRA_COLUMNS)
    added = ", ".join(f"{quote_column(c)} {types[c]}" for c in columns)
    with_commit_retry(lambda: lh.spark.sql(f"ALTER TABLE {lh.sql_name(qid)} ADD COLUMNS ({added})"))
    log.info("quarantine table %s upgraded: added %s", qid, ", ".join(columns))


def fit_quarantine_table(lh: Lakehouse, table: TableId, qid: TableId) -> list[str]:
    """The problems of the existing quarantine table ``qid`` of ``table`` once upgraded: empty when it fits
    (the later extra columns added if it lacked only those), else the columns that do not fit."""
    bad = schema_problems(
        lh.spark.table(lh.spark_name(table)).schema, lh.spark.table(lh.spark_name(qid)).schema
    )
    later = upgradable(bad)
    if later:
        upgrade(lh, qid, later)
        return []
    return bad


def _flag(spec: CheckSpec, frame: DataFrame, ctx: MainContext, flag: str) -> tuple[DataFrame, Column, bool]:
    """``frame`` (the batch with ``ROW``) with what ``spec`` needs to tell its failing rows, the condition TRUE
    for a row quarantined for ``spec``, and whether that condition reads a join or the row order (then the
    flagged batch is materialized once, so that the kept and the quarantined rows come from one reading).

    A row-level check is its own failing-row predicate (:meth:`CheckSpec.fail_sql`, as the audit's pass counts
    it): no join. ``unique``: a window over the key ordered by ``ROW`` (the first row of a key stays) and a
    left join with main's keys at the fork; ``references``: a left join with the referenced table's values
    (broadcast, as :meth:`References.failing_frame` reads them). Any other check that selects its rows
    through its own :meth:`CheckSpec.failing_frame`: its rows' numbers, joined back."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if isinstance(spec, Unique):
        keys = [F.col(quote_column(c)) for c in spec.columns]
        rank = f"{flag}_rank"
        out = frame.withColumn(rank, F.row_number().over(Window.partitionBy(*keys).orderBy(ROW)))
        cond = F.col(rank) > 1
        main = ctx.read_main(ctx.table) if spec.against_main else None
        if main is not None:
            found = main.select(*keys).distinct().withColumn(flag, F.lit(True))
            out = out.join(found, on=list(spec.columns), how="left")
            cond = cond | F.col(flag).isNotNull()
        return out, cond, True
    if isinstance(spec, References):
        c = F.col(quote_column(spec.columns[0]))
        ref = ctx.read_main(TableId.parse(spec.table))
        if ref is None:  # nothing to reference: every non-NULL value is missing
            return frame, c.isNotNull(), False
        known = ref.select(F.col(quote_column(spec.ref_column)).alias(flag)).distinct()
        out = frame.join(F.broadcast(known), c == F.col(flag), "left")
        return out, c.isNotNull() & F.col(flag).isNull(), True
    if type(spec).failing_frame is CheckSpec.failing_frame:
        sql = spec.fail_sql()
        if sql is None:  # refused before (selects_rows)
            raise ValidationError(f"check {spec.name!r} judges no rows")
        return frame, F.expr(f"coalesce(({sql}), false)"), False
    failing = spec.failing_frame(frame, ctx)
    if failing is None:  # refused before (selects_rows)
        raise ValidationError(f"check {spec.name!r} judges no rows")
    hits = failing.select(ROW).distinct().withColumn(flag, F.lit(True))
    return frame.join(hits, on=ROW, how="left"), F.col(flag).isNotNull(), True


@dataclass(frozen=True)
class _Plan:
    """The sorted-out batch: the rows to keep on the branch and the rows to quarantine."""

    kept: DataFrame  # lazy: read once, by the swap's append
    quarantined: DataFrame  # the table's columns plus _wap_checks and _wap_source_line
    counts: dict[str, int]
    total: int
    before: int


def _plan(lh: Lakehouse, table: TableId, branch: str, lin: cat.Lineage, specs: list[CheckSpec]) -> _Plan:
    """Sort the batch out in one pass: each row's ``_wap_checks`` (the chosen checks it fails) is built by one
    select over the batch; the quarantined rows (those with any) are materialized (a small part of the
    batch) by one job that also observes the counts and, when the source lines can be recomputed, groups them
    for it (:func:`with_ranks`); the kept rows stay lazy (read once, by the append). Joins only for ``unique`` and ``references``; the batch is materialized once only when a check
    reads a join or the row order (then the kept and the quarantined rows come from one reading of it)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    inside = batch_reads(lh, table, branch, [t for s in specs for t in s.other_tables()])

    def read_main(t: TableId) -> DataFrame | None:
        if t == table:
            return lh.read_snapshot(table, lin.fork) if lin.fork is not None else None
        if str(t) in inside:
            return lh.read_snapshot(t, inside[str(t)].snapshot_id)
        return lh.read_main(t)

    ctx = MainContext(
        lh.spark, read_main, table, fork_snapshot_id=lin.fork, head_snapshot_id=lin.head, batch_reads=inside
    )
    raw = batch_frame(lh.spark, lh.spark_name(table), lin)
    columns = raw.columns
    frame = raw.withColumn(ROW, F.monotonically_increasing_id())
    named: list[Column] = []
    joined = False
    # by name: _wap_checks lists a row's failing checks sorted, with no sort per row
    for i, spec in sorted(enumerate(specs), key=lambda x: x[1].name):
        frame, cond, needs = _flag(spec, frame, ctx, f"__wap_f{i}")
        named.append(F.when(cond, F.lit(spec.name)))
        joined = joined or needs
    checks = F.filter(F.array(*named), lambda x: x.isNotNull()).alias("_wap_checks")
    flagged = frame.select(ROW, *[F.col(quote_column(c)) for c in columns], checks)
    if joined:
        flagged = flagged.localCheckpoint(eager=True)
    failing = F.size("_wap_checks") > 0
    where = provenance(lin)
    picked = flagged.where(failing)
    if where is not None:  # grouped for the source lines in the same job (no job of their own)
        picked = with_ranks(picked, columns, ROW)
    # the counts are observed while the quarantined rows are materialized (no aggregation job of their own)
    tally = Observation(f"wap_{uuid.uuid4().hex}")
    rows = picked.observe(
        tally,
        F.count(F.lit(1)).alias("__total"),
        *[
            F.count(F.when(F.array_contains("_wap_checks", s.name), 1)).alias(f"__c{i}")
            for i, s in enumerate(specs)
        ],
    ).localCheckpoint(eager=True)
    got = tally.get
    counts = {s.name: int(got[f"__c{i}"]) for i, s in enumerate(specs)}
    found = batch_files(lin)
    before = found.rows if found is not None else raw.count()
    quarantined = with_source_lines(lh, where, rows, columns, ROW).select(*columns, "_wap_checks", LINE)
    kept = flagged.where(~failing).select(*columns)
    return _Plan(kept, quarantined, counts, int(got["__total"]), before)


def default_checks(suite_specs: Mapping[str, CheckSpec], audit: AuditResult) -> list[CheckSpec]:
    """The checks a quarantine applies when none is named: the failed, fail-level, row-level checks of a failed
    audit (never a passed check within its ``max_failing_rows``, never a warn-level one: those only when named)."""
    if audit.status.ok:
        return []
    return [
        s
        for c in audit.checks
        if c.status is CheckStatus.FAILED
        and c.level is Level.FAIL
        and (s := suite_specs.get(c.name)) is not None
        and s.selects_rows
        and s.type not in _NO_ROWS_IN_TABLE
    ]


def _choose(
    move: RefMove, suite_specs: dict[str, CheckSpec], audit: AuditResult, named: list[str]
) -> list[CheckSpec]:
    """The checks to apply (refusals journaled): the named ones, else :func:`default_checks` (a passed audit:
    refused)."""
    table, branch = move.table, move.branch
    if named:
        out = []
        builtins = {c.name for c in audit.checks if c.type in _NO_ROWS_IN_TABLE}
        for name in dict.fromkeys(named):
            spec = suite_specs.get(name)
            if spec is None and (name in builtins or name in _NO_ROWS_IN_TABLE):
                raise move.refuse(
                    RefusedError(
                        f"quarantine of {table} {branch} refused: {name} counts source lines ingest could not parse;"
                        " they never became rows of the batch, so there are no rows to remove (fix the source and"
                        " ingest it again)",
                        "no_rows",
                    )
                )
            if spec is None:
                raise move.refuse(
                    RefusedError(
                        f"quarantine of {table} {branch} refused: {table} has no check named {name!r}",
                        "unknown_check",
                    )
                )
            if spec.type in _NO_ROWS_IN_TABLE:
                raise move.refuse(
                    RefusedError(
                        f"quarantine of {table} {branch} refused: {name} counts source lines that never became "
                        "rows: there are no rows to remove",
                        "no_rows",
                    )
                )
            if not spec.selects_rows:
                raise move.refuse(
                    RefusedError(
                        f"quarantine of {table} {branch} refused: {name} ({spec.type}) judges the batch as a "
                        "whole: it cannot be repaired by removing rows",
                        "aggregate_check",
                    )
                )
            out.append(spec)
        return out
    if audit.status.ok:
        raise move.refuse(
            RefusedError(
                f"quarantine of {table} {branch} refused: its audit {audit.status}: nothing to quarantine (name a "
                "check with --check to quarantine its failing rows anyway)",
                "nothing_to_quarantine",
            )
        )
    out = default_checks(suite_specs, audit)
    if not out:
        raise move.refuse(
            RefusedError(
                f"quarantine of {table} {branch} refused: no row-level check of its audit fails "
                f"(audit {audit.status}): nothing to quarantine",
                "nothing_to_quarantine",
            )
        )
    return out


def _refuse_unrepairable(
    lh: Lakehouse, move: RefMove, lin: cat.Lineage, qid: TableId, target: StructType, qexists: bool
) -> None:
    """Refuse (journaled) a branch with non-append commits and an existing quarantine table that does not fit."""
    table, branch = move.table, move.branch
    ops = {cat.snapshot_operation(x) for x in lin.new_snapshots}
    if lin.fork is None or ops - {"append"}:
        raise move.refuse(
            RefusedError(
                f"quarantine of {table} {branch} refused: the branch holds non-append commits or no fork; "
                "only appended batches can be repaired",
                "not_append",
            )
        )
    if qexists:
        bad = schema_problems(target, lh.spark.table(lh.spark_name(qid)).schema)
        if bad and not upgradable(bad):
            raise move.refuse(
                RefusedError(
                    f"quarantine of {table} {branch} refused: {qid} exists with an incompatible schema: "
                    + ", ".join(bad),
                    "quarantine_schema",
                )
            )


def quarantine(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    *,
    checks: Sequence[str] = (),
    reason: str,
    user: str | None = None,
) -> QuarantineResult:
    """Move the batch's rows failing ``checks`` (default: every failing row-level check of the latest audit)
    to the quarantine table on a branch of the batch, in one journaled step, then re-audit the branch."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    if not reason or not reason.strip():
        raise ValidationError("quarantine needs a reason (--reason TEXT)")
    reason = reason.strip()
    s.authorize(Permission.QUARANTINE, table=table, branch=branch)
    if branch.lower() == MAIN:
        raise s.refuse(
            Action.QUARANTINE,
            RefusedError(
                f"quarantine of {table} main refused: only an audit branch's batch is quarantined", "main"
            ),
            table=table,
            branch=branch,
        )
    validate_branch(branch)
    tbl = reconciled_table(lh, table)
    head = cat.require_branch(tbl, table, branch)
    move = RefMove(s, Action.QUARANTINE, table, branch, head, reason=reason)
    audit = latest_audit(lh, table, branch)
    if audit is None or audit.snapshot_id != head:
        raise move.refuse(
            RefusedError(
                f"quarantine of {table} {branch} refused: the branch moved since its audit "
                f"(head {head}, audited {audit.snapshot_id if audit else 'never'}); audit it first",
                "stale_audit",
            )
        )
    suite = suite_for(lh.settings.checks_file, table)
    suite_specs = {c.name: c for c in suite.checks}
    specs = _choose(move, suite_specs, audit, list(checks))
    lin = cat.lineage(tbl, branch)
    qid = quarantine_table_id(table)
    qexists = cat.table_exists(lh.catalog, qid)
    target = lh.spark.table(lh.spark_name(table)).schema
    _refuse_unrepairable(lh, move, lin, qid, target, qexists)
    plan = _plan(lh, table, branch, lin, specs)
    if plan.total == 0:
        raise move.refuse(
            RefusedError(
                f"quarantine of {table} {branch} refused: no row of the batch fails "
                + ", ".join(s.name for s in specs)
                + ": nothing to quarantine",
                "nothing_to_quarantine",
            )
        )
    kept_before = _join_quarantine_table(lh, qid, branch, user, target, qexists)
    tmp = temp_branch_name(branch, uuid.uuid4().hex[:8])
    move = RefMove(
        s,
        Action.QUARANTINE,
        table,
        branch,
        head,
        reason=reason,
        details={
            "tmp": tmp,
            "quarantine_table": str(qid),
            "kept_before": kept_before,
            "checks": plan.counts,
            "quarantined": plan.total,
            "rows_before": plan.before,
        },
    )

    # the re-audit's aggregates are observed while the kept rows are written (as an ingest's are): its pass
    # is not run again over the rows just written
    kept, seen = _observing(plan.kept, _sound(suite, audit))
    written: list[tuple[int | None, Observation | None]] = []  # the quarantine table's append, observed

    def commit(intent: Intent) -> Moved:
        try:
            written.append(_keep(lh, qid, branch, plan, target, intent, reason, user, created=not qexists))
            fault_point("after_quarantine_keep")
            new_head = _swap(lh, table, branch, lin, tmp, kept, intent)
        except CommitConflictError as exc:
            remove_branch_quietly(lh.catalog, table, tmp)
            undo_kept(lh, intent)
            raise ConflictError(
                f"quarantine of {table} {branch} lost a race with another change; nothing was changed ({exc})"
            ) from exc
        except ConflictError:
            remove_branch_quietly(lh.catalog, table, tmp)
            undo_kept(lh, intent)
            raise
        return Moved(
            Outcome.QUARANTINED,
            new_head,
            details={"checks": plan.counts, "quarantined": plan.total, "quarantine_table": str(qid)},
        )

    new_head = move.run(commit).snapshot_after
    assert new_head is not None
    # the new head needs its audit (publish asks for one); the quarantine table's branch too (no checks of its own)
    reaudit = audit_branch(lh, table, branch, user=user, suite=suite, observed=_seen(new_head, seen))
    audit_branch(lh, qid, branch, user=user, observed=_seen(*written[-1]))
    return QuarantineResult(
        str(table),
        branch,
        str(qid),
        plan.counts,
        plan.total,
        plan.before,
        plan.before - plan.total,
        head,
        new_head,
        reason,
        reaudit,
    )


def _keep(
    lh: Lakehouse,
    qid: TableId,
    branch: str,
    plan: _Plan,
    target: StructType,
    intent: Intent,
    reason: str,
    user: str,
    *,
    created: bool,
) -> tuple[int | None, Observation | None]:
    """Append the quarantined rows (with why) to the quarantine table's branch ``branch``, stamped with the intent;
    the snapshot appended (None: not found as the branch's head) and the aggregates of the quarantine table's
    checks (usually none: its row count) observed while writing it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, _parse_datatype_string

    if created and not cat.table_exists(lh.catalog, qid):
        schema = target
        for name, typ in EXTRA_COLUMNS:
            schema = schema.add(StructField(name, _parse_datatype_string(typ), True))
        lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`{qid.namespace}`")
        lh.spark.createDataFrame([], schema).writeTo(lh.spark_name(qid)).using("iceberg").create()
        lh.journal.record(
            user=user,
            action=Action.CREATE,
            table=str(qid),
            outcome=Outcome.CREATED,
            details={"columns": [f.name for f in schema.fields], "quarantine_of": intent.table},
        )
    if branch not in lh.table(qid).metadata.refs:
        with_commit_retry(lambda: lh.spark.sql(f"ALTER TABLE {lh.sql_name(qid)} CREATE BRANCH `{branch}`"))
    rows = (
        plan.quarantined.withColumn("_wap_batch", F.lit(branch))
        .withColumn("_wap_reason", F.lit(reason))
        .withColumn("_wap_user", F.lit(user))
        .withColumn("_wap_quarantined_at", F.lit(time.time()).cast("timestamp"))
        .withColumn("_wap_replayed_by", F.lit(None).cast("string"))
        .withColumn("_wap_replayed_at", F.lit(None).cast("timestamp"))
    )
    qcols = lh.spark.table(lh.spark_name(qid)).columns
    out, seen = _observing(
        rows.select(*[F.col(quote_column(c)) for c in qcols]), suite_for(lh.settings.checks_file, qid)
    )
    writer = out.writeTo(lh.spark_name(qid, branch))
    for k, v in {INTENT_PROPERTY: str(intent.id), "wap.batch": branch, "wap.user": user}.items():
        writer = writer.option(f"snapshot-property.{k}", v)
    with_commit_retry(writer.append)
    tbl = lh.table(qid)
    head = cat.ref_snapshot_id(tbl, branch)
    snap = tbl.snapshot_by_id(head) if head is not None else None
    if snap is None or cat.summary_get(snap, INTENT_PROPERTY) != str(intent.id):
        return None, None
    return head, seen


def _sound(suite: Suite, audit: AuditResult) -> Suite:
    """``suite`` without the checks that errored in ``audit``: left to the re-audit's own pass, which isolates them
    (a check that measured the whole batch measures the kept rows, a part of it)."""
    errored = {c.name for c in audit.checks if c.status is CheckStatus.ERROR}
    return Suite(suite.table, tuple(c for c in suite.checks if c.name not in errored), suite.source)


def _join_quarantine_table(
    lh: Lakehouse, qid: TableId, branch: str, user: str, target: StructType, qexists: bool
) -> int | None:
    """The quarantine table upgraded if it lacks only the later extra columns (refused before otherwise) and
    joined to the batch (a plain branch becomes a batch of the table and its quarantine); its branch's head."""
    if qexists:
        upgrade(lh, qid, upgradable(schema_problems(target, lh.spark.table(lh.spark_name(qid)).schema)))
    join(lh, branch, qid, user)
    return cat.ref_snapshot_id(lh.table(qid), branch) if qexists else None


def _observing(rows: DataFrame, suite: Suite) -> tuple[DataFrame, Observation | None]:
    """``rows`` observing ``suite``'s aggregates while they are written (:func:`observed_metrics`, as an
    ingest's write does), so that the audit right after needs no pass of its own; unobserved (None) when a
    check cannot be built (the audit then runs its pass and isolates it)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import Observation

    seen = Observation(f"wap_{uuid.uuid4().hex}")
    try:
        return rows.observe(seen, *observed_metrics(suite)), seen
    except (AnalysisException, ValueError) as exc:
        log.warning(
            "quarantine: the checks cannot be observed while writing (%s); the re-audit runs its pass", exc
        )
        return rows, None


def _seen(snapshot_id: int | None, seen: Observation | None) -> tuple[int, JsonObject] | None:
    """The aggregates observed while ``snapshot_id`` was written, for :func:`audit_branch` (which uses them
    only when that snapshot is the branch's head and its whole batch)."""
    if seen is None or snapshot_id is None:
        return None
    return snapshot_id, dict(seen.get)


def _swap(
    lh: Lakehouse, table: TableId, branch: str, lin: cat.Lineage, tmp: str, kept: DataFrame, intent: Intent
) -> int:
    """The kept rows appended onto ``tmp`` (at the fork), then swapped in as ``branch``; the new head."""
    assert lin.fork is not None
    tbl = lh.table(table)
    with commit_conflicts():
        tbl.manage_snapshots().create_branch(lin.fork, tmp).commit()
    props = {INTENT_PROPERTY: str(intent.id), "wap.quarantined-from": str(lin.head), "wap.user": intent.user}
    for snap in lin.new_snapshots:  # the batch's provenance, carried over (as a rebase does)
        for key in (
            "wap.source",
            "wap.format",
            "wap.content-hash",  # the sources' sha256: their lines are found again (source_lines)
            "wap.batch-id",
            "wap.branch",
            "wap.batch",
            "wap.malformed-rows",
        ):
            if (val := cat.summary_get(snap, key)) is not None:
                props[key] = val
    return append_and_swap(lh, table, branch, lin.head, tmp, kept, props, "quarantine")
