"""Ingest: write a source batch into a fresh audit branch (never into main), then audit it.

The source must fit the table's schema (same columns, castable types); the
schema is never evolved implicitly, because the schema is shared by all branches
and evolving it would change main before any audit. Rows that cannot be parsed
are never turned into NULLs: they are kept out of the branch, counted, sampled
with their line numbers, and recorded on the snapshot so that the built-in
``malformed_rows`` check fails the audit. Every value is stored exactly or its row is malformed:
a cast that would change it (overflow, lost fraction, out of range, infinity from finite text, bytes
that are not UTF-8, a JSON object in a string column) counts like a value that does not parse
(see :func:`_exactness` and docs/workflow.md, "Exact or malformed").
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from wap_core.checks import Suite, observed_metrics, suite_for
from wap_core.exceptions import (
    BranchBusyError,
    CommitConflictError,
    NotFoundError,
    ValidationError,
    WapError,
    first_line,
)
from wap_core.faults import fault_point, pause_point
from wap_core.identifiers import TableId
from wap_core.lake import catalog as cat
from wap_core.lake.errors import spark_error_line, store_failure_or_probe
from wap_core.lake.refs import is_commit_state_unknown, remove_branch_quietly, with_commit_retry
from wap_core.samples import sample_json
from wap_core.security.access import Permission
from wap_core.security.paths import (
    SourcePolicy,
    allowed_roots,
    fetch_url_sources,
    hadoop_readable,
)
from wap_core.session import Session, session_of
from wap_core.states import Action, CheckStatus, Outcome
from wap_core.store.journal import Intent
from wap_core.values import JSON, JsonObject, JsonOrder, omit_none, seconds_view
from wap_core.workflow.audit import AuditResult, audit_branch
from wap_core.workflow.batch import branch_for, refuse_a_join_in_flight, refuse_a_published_name
from wap_core.workflow.batch import join as join_batch
from wap_core.workflow.batch_audit import reaudit_stale
from wap_core.workflow.quarantine_policy import PolicyQuarantine, announces_at_once, apply_policy
from wap_core.workflow.readers import Prepared, read_source, resolve_sources
from wap_core.workflow.reconcile import INTENT_PROPERTY, reconciled_table
from wap_core.workflow.refmove import Moved, RefMove
from wap_core.workflow.replay import ReplayResult, mark, prepare

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass
class IngestResult:
    """What one ingest wrote and how its audit went (its JSON adds the audit's ``status``)."""

    __json__: ClassVar[JsonOrder] = (
        "table",
        "branch",
        "batch",
        "created_table",
        "rows_written",
        "malformed_rows",
        "narrowing",
        "replay",
        "snapshot_id",
        "fork_snapshot_id",
        "sources",
        "status",
        "audit",
        "quarantine",
        "seconds",
    )

    table: str
    branch: str
    created_table: bool
    rows_written: int
    malformed_rows: int
    snapshot_id: int
    fork_snapshot_id: int | None
    sources: list[str]
    audit: AuditResult
    seconds: float = field(metadata={JSON: seconds_view})
    batch: str | None = None  # the batch the table joined (``--batch``); None: a one-table batch
    narrowing: list[str] = field(default_factory=list)
    """The schema check's notes: columns whose source type the table's type cannot hold for every value
    (e.g. ``bigint`` into ``int``); their values that do not fit exactly are malformed rows."""
    replay: ReplayResult | None = field(default=None, metadata={JSON: omit_none})
    """``--replay-of BATCH``: the quarantined rows of BATCH this batch replaces, marked (workflow.replay)."""
    quarantine: PolicyQuarantine | None = field(default=None, metadata={JSON: omit_none})
    """What the checks with ``on_fail: quarantine`` did (:mod:`wap_core.workflow.quarantine_policy`): then
    ``snapshot_id`` and ``audit`` are the repaired branch's; None (no key): no such check failed."""

    @property
    def status(self) -> CheckStatus:
        """The audit's overall status."""
        return self.audit.status


# --------------------------------------------------------------------------- ingest


def default_branch_name(existing: set[str]) -> str:
    """A new branch name ``audit_<UTC time>`` (with a suffix if taken)."""
    base = "audit_" + datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    name, n = base, 1
    while name in existing:
        n += 1
        name = f"{base}_{n}"
    return name


def _write(lh: Lakehouse, df: DataFrame, name: str, props: dict[str, str], suite: Suite) -> JsonObject | None:
    """Append ``df`` to the branch ``name``; returns the suite's aggregates observed during the write.

    The row-level checks are evaluated by ``DataFrame.observe`` in the same pass that writes the
    batch, so the audit right after ingest needs no pass of its own. If the suite cannot be observed
    (a broken check) or observing fails at run time, the batch is written plainly and the audit
    evaluates it itself, isolating the broken check.
    """
    from pyspark.sql import Observation

    def append(frame: DataFrame) -> None:
        writer = frame.writeTo(name)
        for k, v in props.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        with_commit_retry(writer.append)

    observation = Observation(f"wap_{uuid.uuid4().hex}")
    try:
        observed = df.observe(observation, *observed_metrics(suite))
    except Exception as exc:  # noqa: BLE001 - analysis error in a check: write without observing (documented)
        log.warning("the checks cannot be observed while writing (%s); the audit evaluates them", _first(exc))
        append(df)
        return None
    try:
        append(observed)
    except CommitConflictError:
        raise
    except Exception as exc:
        if is_commit_state_unknown(exc) or store_failure_or_probe(exc, lh.settings):
            raise  # the store down or refusing (its table "not found"): writing again would meet it again
        # nothing was committed; a check failed at run time: write without it (the audit isolates it)
        log.warning(
            "observing the checks failed while writing (%s); writing the batch without them", _first(exc)
        )
        append(df)
        return None
    return dict(observation.get)


def _first(exc: BaseException) -> str:

    return spark_error_line(exc)[:300]


CONTENT_HASH_PROPERTY = "wap.content-hash"
Progress = Callable[[str, "int | None"], None]
"""An ingest progress callback: ``(step, rows)`` with step ``reading``, ``writing``, ``auditing`` or ``done``;
``rows`` is the batch's row count once it is known (None before)."""


def content_hash(files: Sequence[str]) -> str:
    """sha256 over the bytes of the source files, in the given order (``wap.content-hash`` of the snapshot)."""
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Duplicate:
    """An earlier snapshot of the table that ingested the same content (same ``wap.content-hash``)."""

    table: str
    branch: str | None
    snapshot_id: int
    on_main: bool
    open_branch: bool
    at: str


def find_duplicate(lh: Lakehouse, table: TableId, digest: str) -> Duplicate | None:
    """The snapshot on main or an open branch whose summary carries ``digest``, or None (metadata only, no Spark)."""
    if not cat.table_exists(lh.catalog, table):
        return None
    tbl = lh.table(table)
    snaps = {s.snapshot_id: s for s in tbl.metadata.snapshots}
    refs = [("main", cat.ref_snapshot_id(tbl, "main"))] + [
        (b, cat.ref_snapshot_id(tbl, b)) for b in cat.branch_names(tbl)
    ]
    seen: set[int] = set()
    for ref, head in refs:
        sid = head
        while sid is not None and sid not in seen and sid in snaps:
            seen.add(sid)
            snap = snaps[sid]
            if cat.summary_get(snap, CONTENT_HASH_PROPERTY) == digest:
                at = datetime.fromtimestamp(snap.timestamp_ms / 1000, tz=UTC).isoformat()
                return Duplicate(
                    table=str(table),
                    branch=cat.summary_get(snap, "wap.branch") or (None if ref == "main" else ref),
                    snapshot_id=sid,
                    on_main=ref == "main",
                    open_branch=ref != "main",
                    at=at,
                )
            sid = snap.parent_snapshot_id
    return None


@dataclass(frozen=True)
class TargetColumn:
    """One column a batch of an existing table must carry: its name, Iceberg type and whether it may be NULL."""

    name: str
    type: str
    required: bool
    doc: str = ""


def target_columns(lh: Lakehouse, table: TableId) -> tuple[TargetColumn, ...]:
    """The columns of ``table``'s current schema, in order (PyIceberg metadata, no Spark): what a source
    must have (matched case-insensitively, castable types; a schema is never evolved by ingest)."""
    return tuple(
        TargetColumn(f.name, str(f.field_type), f.required, f.doc or "")
        for f in lh.table(table).schema().fields
    )


def template_csv(columns: Sequence[TargetColumn]) -> bytes:
    """A CSV template of those columns: the header row alone (UTF-8), to fill with the batch's rows."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([c.name for c in columns])
    return out.getvalue().encode("utf-8")


def ingest(
    session: Session | Lakehouse,
    table: TableId,
    sources: Sequence[str],
    *,
    branch: str | None = None,
    batch: str | None = None,
    fmt: str | None = None,
    create: bool = False,
    user: str | None = None,
    source_policy: SourcePolicy = SourcePolicy.CONFINED,
    progress: Progress | None = None,
    replay_of: str | None = None,
) -> IngestResult:
    """Write ``sources`` into a new audit branch of ``table`` and audit it.

    ``source_policy``: CONFINED (default, the console) reads only under the allowed ingest roots
    (``WAP_INGEST_ROOTS`` and the uploads root); the CLI passes ANY. ``progress`` is told each step
    (reading → writing → auditing → done) with the row count once known. The snapshot summary records
    the sources' sha256 as ``wap.content-hash`` (see :func:`find_duplicate`).

    ``batch``: add ``table`` to the open batch of that name (created on first use; see
    :mod:`wap_core.workflow.batch`): the branch is named like the batch. ``branch`` is a one-table batch.

    ``replay_of``: the batch whose quarantined rows of ``table`` these sources replace (checked before
    anything is written; the rows are marked replayed on this batch's branch of the quarantine table:
    :mod:`wap_core.workflow.replay`).
    """
    t0 = time.perf_counter()
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    branch = branch_for(branch, batch)
    s.authorize(Permission.INGEST, table=table, branch=branch)
    if batch is not None:
        refuse_a_published_name(s, Action.INGEST, table, batch)
    try:
        roots = allowed_roots(lh.settings) if source_policy is not SourcePolicy.ANY else ()
        # object-store URLs (s3a://, s3://): confined on their structure, copied into an upload folder;
        # ``origin`` maps each copy back to its URL, the batch's provenance
        local, origin = fetch_url_sources(lh.settings, sources, source_policy)
        files, fmt = resolve_sources(local, fmt, policy=source_policy, roots=roots)
        files, origin = hadoop_readable(lh.settings, files, origin)  # a ':' in a file's path: linked apart
        plan = prepare(s, table, replay_of, branch) if replay_of is not None else None
        res = _ingest(
            s, table, files, fmt, branch, create, t0, progress or _no_progress, origin, batch, replay_of
        )
        if plan is not None:
            res.replay = mark(s, plan, res.branch)
        return res
    except WapError as exc:
        if not exc.journaled:  # an error after the intent is already its outcome row
            s.record(
                Action.INGEST,
                Outcome.ERROR,
                table=str(table),
                branch=branch,
                reason=first_line(exc)[:1000],
                details={"sources": list(sources)},
            )
        raise


def _no_progress(step: str, rows: int | None) -> None:
    return None


def _reaudit_readers(lh: Lakehouse, batch: str, table: TableId, user: str) -> None:
    """The batch's other tables whose checks read ``table`` (``references``) judged it at its previous head
    (or at main, before it joined): their audits are re-run now, as part of the ingest (only those; each
    re-measures only the checks that read ``table``, the rest comes from the result cache). The rows are
    written and audited whatever happens here: a failure is logged, and ``wap audit --batch`` re-runs it."""
    try:
        done = reaudit_stale(lh, batch, user, reading=table)
    except Exception as exc:  # noqa: BLE001 - the ingest stands; the stale audits stay stale (visible)
        log.warning("batch %s: re-auditing the tables that read %s failed: %s", batch, table, _first(exc))
        return
    if done:
        log.info("batch %s: re-audited %s (their checks read %s)", batch, ", ".join(done), table)


def _ingest(
    s: Session,
    table: TableId,
    files: list[str],
    fmt: str,
    branch: str | None,
    create: bool,
    t0: float,
    progress: Progress,
    origin: dict[str, str] | None = None,
    batch: str | None = None,
    replay_of: str | None = None,
) -> IngestResult:
    lh, user = s.lakehouse, s.user
    progress("reading", None)
    shown = [(origin or {}).get(f, f) for f in files]  # provenance: an object's URL, not its local copy
    digest = content_hash(files)
    spark = lh.spark
    exists = cat.table_exists(lh.catalog, table)
    if not exists and not create:
        raise NotFoundError(
            f"table {table} does not exist; pass --create to create it from the source's schema"
        )
    suite = suite_for(lh.settings.checks_file, table)  # a broken checks file stops us before any write
    target = spark.table(lh.spark_name(table)).schema if exists else None
    prepared, target = read_source(lh, str(table), files, fmt, target)
    for note in prepared.narrowing:  # the schema check's notes, before anything is written
        log.warning("ingest into %s: %s", table, note)
    progress("writing", prepared.rows)
    tbl = reconciled_table(lh, table) if exists else None
    main_before = cat.ref_snapshot_id(tbl, "main") if tbl is not None else None
    batch_id = uuid.uuid4().hex
    intent_details = {
        "sources": shown,
        "format": fmt,
        "batch_id": batch_id,
        "rows": prepared.rows,
        "malformed_rows": prepared.malformed,
        "create_table": not exists,
        **({"narrowing": prepared.narrowing} if prepared.narrowing else {}),
        **({"batch": batch} if batch is not None else {}),
        **({"replay_of": replay_of} if replay_of is not None else {}),
    }
    move, intent = _announce(s, table, tbl, branch, main_before, intent_details)
    if batch is not None:  # the branch is reserved (the intent holds it): the table joins the batch
        join_batch(lh, batch, table, user)
    props = {
        "wap.source": ", ".join(shown)[:2000],
        "wap.format": fmt,
        "wap.batch-id": batch_id,
        CONTENT_HASH_PROPERTY: digest,
        "wap.branch": move.branch,
        **({"wap.batch": batch} if batch is not None else {}),
        **({"wap.replay-of": replay_of} if replay_of is not None else {}),
        "wap.user": user,
        "wap.malformed-rows": str(prepared.malformed),
        "wap.malformed-sample": sample_json(prepared.sample),  # trimmed before serialising: valid JSON
    }
    writer = _BatchWriter(lh, table, move.branch, user, exists, target, prepared, suite, props, batch)
    move.run(writer.write, intent=intent)  # fault points after_ingest_intent / after_ingest_commit
    branch, created, metrics, lin = move.branch, writer.created, writer.metrics, writer.lineage
    assert lin is not None
    # the audit is part of the ingest (authorized above as INGEST), not a separate re-run
    progress("auditing", prepared.rows)
    audit = audit_branch(
        lh,
        table,
        branch,
        user=user,
        suite=suite,
        observed=(lin.head, metrics) if metrics is not None and len(lin.new_snapshots) == 1 else None,
        announce=announces_at_once(suite),
    )
    audit, kept = apply_policy(s, table, branch, suite, audit)  # on_fail: quarantine (None: nothing to do)
    if batch is not None:
        _reaudit_readers(lh, batch, table, user)
    progress("done", prepared.rows)
    return IngestResult(
        table=str(table),
        branch=branch,
        created_table=created,
        rows_written=prepared.rows,
        malformed_rows=prepared.malformed,
        snapshot_id=audit.snapshot_id,
        fork_snapshot_id=lin.fork,
        sources=shown,
        audit=audit,
        seconds=time.perf_counter() - t0,
        batch=batch,
        narrowing=prepared.narrowing,
        quarantine=kept,
    )


@dataclass
class _BatchWriter:
    """The commit step of an ingest: the table (first batch), the branch, the batch's rows on it."""

    lh: Lakehouse
    table: TableId
    branch: str
    user: str
    exists: bool
    target: StructType
    prepared: Prepared
    suite: Suite
    props: dict[str, str]
    batch: str | None = None  # the batch the table joined for this write
    created: bool = False
    metrics: JsonObject | None = None
    lineage: cat.Lineage | None = None

    def write(self, intent: Intent) -> Moved:
        """Create the table if new, then the branch, then write the rows (undone if the write fails)."""
        lh, table, branch = self.lh, self.table, self.branch
        if (
            self.batch is not None
        ):  # joined: refused (journaled, nothing written) if the batch's publish is in flight
            refuse_a_join_in_flight(lh, self.batch, table)
        if not self.exists:
            self._create_table()
        with_commit_retry(lambda: lh.spark.sql(f"ALTER TABLE {lh.sql_name(table)} CREATE BRANCH `{branch}`"))
        fault_point("after_create_branch")
        pause_point("after_create_branch")
        props = {**self.props, INTENT_PROPERTY: str(intent.id)}
        try:
            self.metrics = _write(lh, self.prepared.df, lh.spark_name(table, branch), props, self.suite)
        except Exception:
            remove_branch_quietly(lh.catalog, table, branch)
            if self.created:
                lh.catalog.purge_table(table.tuple)
            raise
        self.lineage = cat.lineage(lh.table(table), branch)
        return Moved(Outcome.WRITTEN, self.lineage.head)

    def _create_table(self) -> None:
        lh, table = self.lh, self.table
        lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`{table.namespace}`")
        lh.spark.createDataFrame([], self.target).writeTo(lh.spark_name(table)).using("iceberg").create()
        self.created = True
        lh.journal.record(
            user=self.user,
            action=Action.CREATE,
            table=str(table),
            outcome=Outcome.CREATED,
            details={"columns": [f.name for f in self.target.fields]},
        )


def _announce(
    s: Session,
    table: TableId,
    tbl: Table | None,
    branch: str | None,
    main_before: int | None,
    details: JsonObject,
) -> tuple[RefMove, Intent]:
    """Commit the ingest's intent naming the branch it is about to create; returns its move and intent.

    A default name that another in-flight ingest holds is skipped for the next free one.
    """
    existing = set(tbl.metadata.refs) if tbl is not None else set()
    if branch is not None:
        if branch in existing:
            raise ValidationError(
                f"branch {branch!r} already exists on {table}; choose another name or discard it first"
            )
        if cat.is_temp_branch(branch):
            raise ValidationError(f"branch name {branch!r} is reserved for rebase's temporary branches")
        move = RefMove(s, Action.INGEST, table, branch, main_before, details=details)
        return move, move.begin(journal_busy=False)
    for _ in range(20):
        name = default_branch_name(existing)
        move = RefMove(s, Action.INGEST, table, name, main_before, details=details)
        try:
            return move, move.begin(journal_busy=False)
        except BranchBusyError:
            existing.add(name)
    raise BranchBusyError(f"could not find a free branch name on {table}: too many ingests in flight")
