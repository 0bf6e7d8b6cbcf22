"""Branch, batch and table overviews from metadata and the journal only (no Spark).

:func:`list_branches` lists every open branch; :func:`batch_rows` is the Branches page's view of the open
batches (one row per batch: its tables, its worst status, the rows it adds, whether main moved under any
table, its review, every author), read from the same rows and :func:`~wap_core.workflow.batch.open_batches`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.states import BranchStatus, branch_status, worst_branch_status
from wap_core.workflow.batch import open_batches
from wap_core.workflow.review import ReviewState, review_states

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Snapshot

    from wap_core.lakehouse import Lakehouse

# incomplete: an ingest created the branch but never finished writing its batch (crashed or still
# running); discard cleans it. Rebase temp branches are never listed.
BRANCH_STATUSES = tuple(s.value for s in BranchStatus)


@dataclass(frozen=True)
class BranchInfo:
    """An open branch and where it stands: audit status, rows added, review."""

    table: str
    branch: str
    status: BranchStatus
    created: str | None
    rows_added: int
    main_moved: bool
    head_snapshot_id: int
    fork_snapshot_id: int | None
    last_audit_at: str | None
    audited_snapshot_id: int | None
    failed_checks: tuple[str, ...]
    review: ReviewState = ReviewState.NONE  # the head against the table's policy
    approvals: int = 0  # counting approvals on the head
    authors: tuple[str, ...] = ()  # everyone who wrote the batch (ingest, rebase, reopen), first writer first


@dataclass(frozen=True)
class TableInfo:
    """A table's overview from its metadata: rows, files, size, snapshots, branches, tags."""

    table: str
    rows: int
    data_files: int
    size_bytes: int
    snapshots: int
    main_snapshot_id: int | None
    last_updated: str | None
    open_branches: int
    tags: tuple[str, ...]
    format_version: int
    location: str


def _ms_iso(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


def _main_log(tbl: Any) -> dict[int, int]:
    """{snapshot id: when main last moved to it (ms)} from the table's snapshot log (Iceberg's ``snapshot-log``:
    every change of main's snapshot, a publish's fast-forward and a rollback included, with its time)."""
    return {e.snapshot_id: e.timestamp_ms for e in tbl.metadata.snapshot_log}


def _main_moved_at(tbl: Any, main: Snapshot | None, journaled: datetime | None) -> str | None:
    """When main last moved: the newest of the journal's last publish/rollback, the snapshot log's entry of
    main's snapshot, and (the fallback) the snapshot's own commit time."""
    if main is None:
        return None
    ms = max(main.timestamp_ms, _main_log(tbl).get(main.snapshot_id, 0))
    if journaled is not None:
        ms = max(ms, int(journaled.timestamp() * 1000))
    return _ms_iso(ms)


def table_infos(lh: Lakehouse) -> list[TableInfo]:
    """Every table's overview, from metadata and the journal only (no Spark)."""
    out: list[TableInfo] = []
    moved = lh.journal.last_main_moves()
    for tid, tbl in cat.load_tables(lh.catalog):
        main_id = cat.ref_snapshot_id(tbl, MAIN)
        main = tbl.metadata.snapshot_by_id(main_id) if main_id is not None else None

        def total(key: str, main: Snapshot | None = main) -> int:
            return int(cat.summary_get(main, key) or 0) if main is not None else 0

        out.append(
            TableInfo(
                table=str(tid),
                rows=total("total-records"),
                data_files=total("total-data-files"),
                size_bytes=total("total-files-size"),
                snapshots=len(tbl.metadata.snapshots),
                main_snapshot_id=main.snapshot_id if main else None,
                last_updated=_main_moved_at(tbl, main, moved.get(str(tid))),
                open_branches=len(cat.branch_names(tbl)),
                tags=tuple(cat.tag_names(tbl)),
                format_version=tbl.metadata.format_version,
                location=tbl.metadata.location,
            )
        )
    return out


def list_branches(lh: Lakehouse, table: TableId | None = None) -> list[BranchInfo]:
    """Every open branch (all refs of type branch except main) with its audit status."""
    if table is not None:
        tables = [(table, lh.table(table))]
    else:
        tables = cat.load_tables(lh.catalog)
    audits = lh.journal.latest_audits(str(table) if table is not None else None)
    created = lh.journal.created_times(str(table) if table is not None else None)
    incomplete = lh.journal.incomplete_branches(str(table) if table is not None else None)
    heads = {
        (str(tid), name): cat.require_branch(tbl, tid, name)
        for tid, tbl in tables
        for name in cat.branch_names(tbl)
    }
    reviews = review_states(lh, str(table) if table is not None else None, heads)
    out: list[BranchInfo] = []
    for tid, tbl in tables:
        for name in cat.branch_names(tbl):
            lin = cat.lineage(tbl, name)
            audit = audits.get((str(tid), name))
            status = branch_status(lin.head, audit, incomplete=(str(tid), name) in incomplete)
            rows = sum(int(cat.summary_get(s, "added-records") or 0) for s in lin.new_snapshots)
            made = created.get((str(tid), name))
            first = lin.new_snapshots[0].timestamp_ms if lin.new_snapshots else None
            failed = audit.failed_checks if audit else ()
            out.append(
                BranchInfo(
                    table=str(tid),
                    branch=name,
                    status=status,
                    created=made.isoformat() if made else _ms_iso(first),
                    rows_added=rows,
                    main_moved=lin.main_moved,
                    head_snapshot_id=lin.head,
                    fork_snapshot_id=lin.fork,
                    last_audit_at=audit.at.isoformat() if audit else None,
                    audited_snapshot_id=audit.snapshot_id if audit else None,
                    failed_checks=failed,
                    review=reviews[(str(tid), name)].state,
                    approvals=len(reviews[(str(tid), name)].approvals),
                    authors=reviews[(str(tid), name)].authors,
                )
            )
    return out


@dataclass(frozen=True)
class TimelineSnapshot:
    """One snapshot of a ref's ancestry: when, its operation, its row counts, who wrote it from where."""

    snapshot_id: int
    parent_id: int | None
    at: str | None  # ISO time of the commit
    operation: str
    added_records: int
    total_records: int
    source: str | None  # wap.source of the snapshot
    user: str | None  # wap.user of the snapshot
    main_at: str | None = None  # ISO time main last moved to it (a publish, a rollback; main's timeline only)


def snapshot_timeline(lh: Lakehouse, table: TableId, ref: str = MAIN) -> list[TimelineSnapshot]:
    """The ancestry of ``ref`` (newest first) with operation and summary counts.

    On main, ``main_at`` is when main moved to the snapshot (the snapshot log: the time of the publish
    or rollback, not of the write); a snapshot main passed over in one move (a branch's earlier
    commits, published with its head) takes the time of the move that brought it onto main.
    """
    tbl = lh.table(table)
    log = _main_log(tbl) if ref == MAIN else {}
    first: dict[int, int] = {}  # when main first moved to each snapshot
    for e in tbl.metadata.snapshot_log if ref == MAIN else ():
        first.setdefault(e.snapshot_id, e.timestamp_ms)
    out: list[TimelineSnapshot] = []
    joined: int | None = None  # when the nearest newer snapshot of the log first came onto main
    for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, ref)):
        moved = log.get(s.snapshot_id, joined)
        joined = first.get(s.snapshot_id, joined)
        out.append(
            TimelineSnapshot(
                snapshot_id=s.snapshot_id,
                parent_id=s.parent_snapshot_id,
                at=_ms_iso(s.timestamp_ms),
                operation=cat.snapshot_operation(s),
                added_records=int(cat.summary_get(s, "added-records") or 0),
                total_records=int(cat.summary_get(s, "total-records") or 0),
                source=cat.summary_get(s, "wap.source"),
                user=cat.summary_get(s, "wap.user"),
                main_at=_ms_iso(moved),
            )
        )
    return out


# The review of a batch is its worst table's: a request for changes on any table blocks it, then a table
# still awaiting approvals; approved (where a policy asks for approvals) outranks "none needed".
_REVIEW_RANK = {
    ReviewState.CHANGES_REQUESTED: 0,
    ReviewState.AWAITING: 1,
    ReviewState.APPROVED: 2,
    ReviewState.NONE: 3,
}


@dataclass(frozen=True)
class BatchRow:
    """One open batch as the Branches page lists it: one row for all its tables.

    ``status`` is the worst of its tables' (:attr:`~wap_core.states.BranchStatus.rank`: incomplete, failed,
    not audited, stale, warned, passed); ``review`` the worst of its tables' review states (changes
    requested, awaiting, approved, none); ``approvals`` the fewest counting approvals of a table whose policy
    asks for them (0 when none asks); ``authors`` everyone who wrote any of its tables, first seen first;
    ``failed_checks`` as ``table: check``; ``created`` its earliest table's, ``last_audit_at`` its latest
    audit's; ``branches`` each table's own row (sorted by table).
    """

    batch: str
    tables: tuple[str, ...]
    status: BranchStatus
    rows_added: int
    main_moved: bool
    review: ReviewState
    approvals: int
    authors: tuple[str, ...]
    failed_checks: tuple[str, ...]
    created: str | None
    last_audit_at: str | None
    branches: tuple[BranchInfo, ...]

    def member(self, table: str, branch: str) -> bool:
        """True when ``table``'s ``branch`` is one of this batch's tables (listed in this row, not on its own)."""
        return branch == self.batch and table in self.tables


def _row(name: str, infos: Sequence[BranchInfo]) -> BatchRow:
    authors: dict[str, None] = {}
    for b in infos:
        authors.update(dict.fromkeys(b.authors))
    asked = [b.approvals for b in infos if b.review is not ReviewState.NONE]
    created = [b.created for b in infos if b.created]
    audited = [b.last_audit_at for b in infos if b.last_audit_at]
    return BatchRow(
        batch=name,
        tables=tuple(b.table for b in infos),
        status=worst_branch_status(b.status for b in infos),
        rows_added=sum(b.rows_added for b in infos),
        main_moved=any(b.main_moved for b in infos),
        review=min((b.review for b in infos), key=lambda r: _REVIEW_RANK[r]),
        approvals=min(asked, default=0),
        authors=tuple(authors),
        failed_checks=tuple(f"{b.table}: {c}" for b in infos for c in b.failed_checks),
        created=min(created) if created else None,
        last_audit_at=max(audited) if audited else None,
        branches=tuple(infos),
    )


def batch_rows(lh: Lakehouse, branches: Sequence[BranchInfo] | None = None) -> list[BatchRow]:
    """Every open batch as one row, by name (metadata and the journal only: no Spark).

    ``branches``: :func:`~wap_core.workflow.status.list_branches` already read (else it is read here). A table
    whose branch closed between the two reads is left out; a batch with no table left is not listed.
    """
    infos = {(b.table, b.branch): b for b in (branches if branches is not None else list_branches(lh))}
    out: list[BatchRow] = []
    for batch in open_batches(lh):
        rows = [
            infos[(str(t.table), batch.name)] for t in batch.tables if (str(t.table), batch.name) in infos
        ]
        if rows:
            out.append(_row(batch.name, rows))
    return out
