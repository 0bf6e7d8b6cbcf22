"""Replay: a fixed file ingested with ``--replay-of BATCH`` replaces the rows BATCH quarantined.

``wap ingest TABLE SOURCE... --replay-of BATCH`` (``api.ingest(..., replay_of=)``) is an ingest as usual
(a new branch, audited), linked to the quarantined rows of ``BATCH`` in ``TABLE``'s quarantine table:

1. before anything is written (:func:`prepare`), refused in one journaled line (action ``ingest``) when
   ``BATCH`` is unknown to ``TABLE``, when nothing of it is quarantined on the quarantine table's main (a
   batch whose quarantine is not published yet, or was discarded, has nothing to replay), or when its rows
   are already replayed (on main, or by an open batch's branch). A quarantine table that lacks only the
   later extra columns is upgraded; any other misfit is refused naming the columns.
2. after the ingest (:func:`mark`), the quarantine table joins the NEW batch and its rows of ``BATCH`` are
   marked (``_wap_replayed_by`` = the new batch, ``_wap_replayed_at``) by one commit on the new batch's
   branch of the quarantine table: the mark publishes with the replay, or is discarded with it. The commit
   is an intent of its own (journal: action ``ingest`` on the quarantine table, details ``replay_of``,
   ``replayed``; judged by reconcile as an ingest: the branch, then one commit stamped with the intent).
   Its own fault points (declared with ingest's, :mod:`wap_core.actions.ingest`): ``after_replay_mark_branch``
   (the intent journaled, the quarantine table's branch there, nothing marked) and ``after_replay_mark_write``
   (the mark committed, its outcome not recorded); the ingest's own points are reached first.
   The mark is written with PyIceberg (an overwrite of the batch's rows on the branch): Spark's row-level
   ``UPDATE`` cannot stamp its snapshot with the intent that reconcile judges by.
3. where the table has ``unique`` checks, the replay's keys are compared with the quarantined rows' keys
   (per check: ``unmatched`` replay rows' keys that no quarantined row had, ``missing`` quarantined keys the
   replay lacks, a sample): a mismatch is FLAGGED (the result's ``replay.flagged``, the journal), not
   refused. Why: the replay is an ordinary batch that is audited and reviewed before it publishes (a key
   that clashes with main fails its ``unique`` check there); a fix may rightly drop a row (a duplicate) or
   correct a key, which a refusal would forbid; and the check can only run once the rows are read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from wap_core.checks import suite_for
from wap_core.checks.unique import Unique
from wap_core.exceptions import ConflictError, RefusedError, WapError, first_line
from wap_core.faults import fault_point
from wap_core.identifiers import MAIN, TableId, quote_column, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.batch import batch_frame
from wap_core.lake.refs import commit_conflicts
from wap_core.session import Session
from wap_core.states import Action, Outcome
from wap_core.store.journal import Intent
from wap_core.values import Record, jsonable
from wap_core.workflow.audit import audit_branch
from wap_core.workflow.batch import join
from wap_core.workflow.quarantine import fit_quarantine_table, quarantine_table_id
from wap_core.workflow.reconcile import INTENT_PROPERTY
from wap_core.workflow.refmove import Moved, RefMove

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

SAMPLE = 5
BY, AT = "_wap_replayed_by", "_wap_replayed_at"


@dataclass(frozen=True)
class KeyMatch:
    """How the replay's keys of one ``unique`` check match the quarantined rows' keys."""

    check: str
    columns: list[str]
    unmatched: int  # distinct keys of the replay that no quarantined row of the batch had
    missing: int  # distinct keys of the quarantined rows the replay does not have
    sample: list[Record] = field(default_factory=list)  # up to 5 unmatched keys

    @property
    def flagged(self) -> bool:
        """True when the keys do not match."""
        return bool(self.unmatched or self.missing)

    def describe(self) -> str:
        """One line for people: e.g. ``unique(id): 2 keys no kept row had (e.g. id=50), 1 kept key missing``."""
        eg = ", ".join(",".join(f"{k}={v}" for k, v in r.items()) for r in self.sample[:3])
        return (
            f"{self.check}: {self.unmatched:,} key(s) no kept row had"
            + (f" (e.g. {eg})" if eg else "")
            + f", {self.missing:,} kept key(s) missing"
        )


@dataclass(frozen=True)
class ReplayResult:
    """What a replay marked (the ingest JSON's ``replay`` key)."""

    replay_of: str  # the batch whose quarantined rows the new batch replaces
    replayed_by: str  # the new batch
    quarantine_table: str
    replayed: int  # quarantined rows of ``replay_of`` marked replayed
    snapshot_id: int  # the mark's commit on the quarantine table's branch ``replayed_by``
    keys: list[KeyMatch] = field(default_factory=list)  # one per ``unique`` check of the table
    flagged: bool = False  # a key check does not match (a warning: see the module's doc)


@dataclass(frozen=True)
class ReplayPlan:
    """A replay found acceptable before the ingest writes (see :func:`prepare`)."""

    table: TableId
    quarantine_table: TableId
    replay_of: str
    rows: int  # quarantined rows of ``replay_of`` on the quarantine table's main


def _refuse(s: Session, table: TableId, branch: str | None, batch: str, why: str, code: str) -> RefusedError:
    exc = s.refuse(
        Action.INGEST,
        RefusedError(f"replay of {batch} into {table} refused: {why}", code),
        table=table,
        branch=branch,
        details={"replay_of": batch},
    )
    exc.journaled = True  # the refusal is its journal row (the ingest records no error besides)
    return exc


def _count(lh: Lakehouse, qid: TableId, ref: str, where: str) -> int:
    row = lh.spark.sql(f"SELECT count(*) FROM {lh.sql_name(qid, ref)} WHERE {where}").first()
    return int(row[0]) if row is not None else 0


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def prepare(s: Session, table: TableId, batch: str, branch: str | None) -> ReplayPlan:
    """Check, before the ingest writes, that ``batch``'s quarantined rows of ``table`` can be replayed."""
    lh = s.lakehouse
    validate_branch(batch)
    if branch == batch:
        raise _refuse(s, table, branch, batch, "a batch cannot replay itself", "replay_self")
    qid = quarantine_table_id(table)
    if not cat.table_exists(lh.catalog, qid):
        known = bool(lh.journal.history(str(table), branch=batch))
        why = f"nothing of batch {batch} is quarantined ({qid} does not exist)"
        raise _refuse(
            s,
            table,
            branch,
            batch,
            why if known else f"no batch {batch} of {table} is known",
            "replay_unknown",
        )
    bad = fit_quarantine_table(lh, table, qid)
    if bad:
        why = f"{qid} exists with an incompatible schema: " + ", ".join(bad)
        raise _refuse(s, table, branch, batch, why, "quarantine_schema")
    mine = f"_wap_batch = {_lit(batch)}"
    qtbl = lh.table(qid)
    rows = _count(lh, qid, MAIN, mine) if cat.ref_snapshot_id(qtbl, MAIN) is not None else 0
    if rows == 0:
        if batch in cat.branch_names(qtbl) and _count(lh, qid, batch, mine):
            why = f"the rows batch {batch} quarantined are not published yet: publish the batch first"
            raise _refuse(s, table, branch, batch, why, "replay_unpublished")
        if lh.journal.history(str(table), branch=batch) or lh.journal.history(str(qid), branch=batch):
            why = f"nothing of batch {batch} is quarantined in {qid}"
            raise _refuse(s, table, branch, batch, why, "replay_nothing")
        raise _refuse(s, table, branch, batch, f"no batch {batch} of {table} is known", "replay_unknown")
    for ref in [MAIN, *cat.branch_names(qtbl)]:
        done = lh.spark.sql(
            f"SELECT {BY}, count(*) AS n FROM {lh.sql_name(qid, ref)} WHERE {mine} AND {BY} IS NOT NULL "
            f"GROUP BY {BY} LIMIT 1"
        ).collect()
        if done:
            where = "" if ref == MAIN else f" (open batch {ref}, not published yet)"
            why = f"batch {batch}'s quarantined rows are already replayed by {done[0][BY]}{where}"
            raise _refuse(s, table, branch, batch, why, "replay_done")
    return ReplayPlan(table, qid, batch, rows)


def _keys(lh: Lakehouse, plan: ReplayPlan, replay: DataFrame) -> list[KeyMatch]:
    """Per ``unique`` check of the table: the replay's keys against the quarantined rows' keys."""
    from pyspark.sql import functions as F

    kept = lh.spark.table(lh.spark_name(plan.quarantine_table)).where(F.col("_wap_batch") == plan.replay_of)
    out = []
    for spec in suite_for(lh.settings.checks_file, plan.table).checks:
        if not isinstance(spec, Unique):
            continue
        cols = [F.col(quote_column(c)) for c in spec.columns]
        theirs, ours = kept.select(*cols).distinct(), replay.select(*cols).distinct()
        unmatched = ours.join(theirs, on=list(spec.columns), how="left_anti")
        missing = theirs.join(ours, on=list(spec.columns), how="left_anti").count()
        sample = [{k: jsonable(v) for k, v in r.asDict().items()} for r in unmatched.limit(SAMPLE).collect()]
        out.append(KeyMatch(spec.name, list(spec.columns), unmatched.count(), missing, sample))
    return out


def mark(s: Session, plan: ReplayPlan, branch: str) -> ReplayResult:
    """After the ingest wrote ``branch``: the quarantine table joins that batch and the rows of the replayed
    batch are marked replayed on its branch (one journaled commit); the keys are matched (flagged, not refused).

    A failure says, in one line, that the new branch stays written and audited but unmarked."""
    try:
        return _mark(s, plan, branch)
    except WapError as exc:
        out = WapError(
            f"replay of {plan.replay_of}: branch {branch} of {plan.table} is written and audited, but the "
            f"quarantined rows were not marked replayed ({first_line(exc)}); discard it or replay again"
        )
        out.exit_code = exc.exit_code
        out.journaled = True  # the mark's intent (or its refusal) is its journal row
        raise out from exc


def _mark(s: Session, plan: ReplayPlan, branch: str) -> ReplayResult:
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    lh, user, qid, batch = s.lakehouse, s.user, plan.quarantine_table, plan.replay_of
    lin = cat.lineage(lh.table(plan.table), branch)
    keys = _keys(lh, plan, batch_frame(lh.spark, lh.spark_name(plan.table), lin))
    flagged = any(k.flagged for k in keys)
    if flagged:
        log.warning(
            "replay of %s by %s: the keys do not match the quarantined rows': %s",
            batch,
            branch,
            "; ".join(k.describe() for k in keys if k.flagged),
        )
    join(lh, branch, qid, user)
    qtbl = lh.table(qid)
    main_head = cat.ref_snapshot_id(qtbl, MAIN)
    base = branch if branch in qtbl.metadata.refs else MAIN
    before = cat.ref_snapshot_id(qtbl, branch)
    details = {
        "replay_of": batch,
        "replayed_by": branch,
        "replayed": plan.rows,
        "table": str(plan.table),
        "keys": [
            {"check": k.check, "unmatched": k.unmatched, "missing": k.missing, "sample": k.sample}
            for k in keys
        ],
        "flagged": flagged,
    }
    move = RefMove(s, Action.INGEST, qid, branch, before, details=details)

    def commit(intent: Intent) -> Moved:
        tbl = lh.table(qid)
        if base == MAIN:
            assert main_head is not None  # prepare found the rows on main
            with commit_conflicts():
                tbl.manage_snapshots().create_branch(main_head, branch).commit()
            tbl = lh.table(qid)
        fault_point("after_replay_mark_branch")  # the quarantine table's branch is there, nothing marked
        mine = EqualTo("_wap_batch", batch)  # type: ignore[call-arg,misc,arg-type]  # PyIceberg's documented positional form; its pydantic signature confuses mypy
        rows = tbl.scan(row_filter=mine, snapshot_id=cat.ref_snapshot_id(tbl, branch)).to_arrow()
        if rows.num_rows != plan.rows or rows.column(BY).null_count != rows.num_rows:
            raise ConflictError(
                f"replay of {batch}: its quarantined rows changed meanwhile on {qid}; nothing was marked"
            )
        at_type = rows.schema.field(AT).type
        now = datetime.now(UTC) if getattr(at_type, "tz", None) else datetime.now(UTC).replace(tzinfo=None)
        n = rows.num_rows
        rows = rows.set_column(rows.schema.get_field_index(BY), rows.schema.field(BY), pa.array([branch] * n))
        rows = rows.set_column(
            rows.schema.get_field_index(AT), rows.schema.field(AT), pa.array([now] * n, at_type)
        )
        props = {
            INTENT_PROPERTY: str(intent.id),
            "wap.replay-of": batch,
            "wap.branch": branch,
            "wap.user": user,
        }
        with commit_conflicts():
            tbl.overwrite(rows, overwrite_filter=mine, snapshot_properties=props, branch=branch)
        fault_point("after_replay_mark_write")  # marked (stamped with the intent), its outcome not recorded
        head = cat.ref_snapshot_id(lh.table(qid), branch)
        assert head is not None
        return Moved(Outcome.WRITTEN, head, details={"replay_of": batch, "replayed": n, "flagged": flagged})

    head = move.run(commit).snapshot_after
    assert head is not None
    audit_branch(lh, qid, branch, user=user)  # publish asks for an audit of every table of the batch
    return ReplayResult(batch, branch, str(qid), plan.rows, head, keys, flagged)
