"""Branch and table overviews from metadata and the journal only (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.states import BranchStatus, branch_status
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


def table_infos(lh: Lakehouse) -> list[TableInfo]:
    """Every table's overview, from metadata only (no Spark)."""
    out: list[TableInfo] = []
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
                last_updated=_ms_iso(main.timestamp_ms) if main else None,
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


def snapshot_timeline(lh: Lakehouse, table: TableId, ref: str = MAIN) -> list[TimelineSnapshot]:
    """The ancestry of ``ref`` (newest first) with operation and summary counts."""
    tbl = lh.table(table)
    return [
        TimelineSnapshot(
            snapshot_id=s.snapshot_id,
            parent_id=s.parent_snapshot_id,
            at=_ms_iso(s.timestamp_ms),
            operation=cat.snapshot_operation(s),
            added_records=int(cat.summary_get(s, "added-records") or 0),
            total_records=int(cat.summary_get(s, "total-records") or 0),
            source=cat.summary_get(s, "wap.source"),
            user=cat.summary_get(s, "wap.user"),
        )
        for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, ref))
    ]
