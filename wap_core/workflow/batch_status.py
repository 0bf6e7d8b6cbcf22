"""Where a batch that spans tables stands: each table's readiness and the batch's (metadata and journal only).

A batch may be published when every one of its tables may be (:func:`~wap_core.workflow.publish.publish_readiness`
on each: audited head, passed, main not moved, review policy met); it is forceable when every refusal is.
Its code is the first refusal's, tables in order. The console's batch Review, ``wap publish --batch`` and
the pipelines read this one function.

:func:`batch_rows` is the Branches page's view of the open batches: one row per batch (its tables, its
worst status, the rows it adds, whether main moved under any table, its review, every author), read from
:func:`~wap_core.workflow.status.list_branches` and :func:`~wap_core.workflow.batch.open_batches` (metadata and
the journal, never Spark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from wap_core.identifiers import TableId
from wap_core.lake.multitable import Atomicity, atomicity
from wap_core.states import BranchStatus, worst_branch_status
from wap_core.workflow.batch import Batch, load_batch, open_batches
from wap_core.workflow.batch_audit import stale_tables
from wap_core.workflow.publish import PublishCheck, publish_readiness
from wap_core.workflow.review import ReviewState
from wap_core.workflow.status import BranchInfo, list_branches

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse


@dataclass(frozen=True)
class TableReadiness:
    """One table of a batch and whether it may be published now."""

    table: str
    head: int
    check: PublishCheck


@dataclass(frozen=True)
class BatchReadiness:
    """Whether the whole batch may be published now (all tables or none), and what a publish guarantees."""

    batch: str
    tables: tuple[TableReadiness, ...]
    atomicity: Atomicity  # what the catalog's multi-table commit guarantees (the Review says it)

    @property
    def allowed(self) -> bool:
        """True when every table may be published."""
        return all(t.check.allowed for t in self.tables)

    @property
    def forceable(self) -> bool:
        """True when every refusal (if any) may be overridden by a forced publish."""
        return all(t.check.allowed or t.check.forceable for t in self.tables)

    @property
    def refusals(self) -> tuple[TableReadiness, ...]:
        """The tables that may not be published now, in order."""
        return tuple(t for t in self.tables if not t.check.allowed)

    @property
    def code(self) -> str:
        """``ok``, else the first refused table's code (see :class:`~wap_core.workflow.publish.PublishCheck`)."""
        return self.refusals[0].check.code if self.refusals else "ok"

    @property
    def message(self) -> str:
        """One line: every refused table with why, or that all may be published."""
        if not self.refusals:
            return f"all {len(self.tables)} tables of batch {self.batch} may be published together"
        return "; ".join(f"{t.table}: {t.check.message}" for t in self.refusals)


_JUDGED = ("ok", "audit_failed", "changes_requested", "approvals_missing")  # codes past the audit's freshness


def batch_readiness(
    lh: Lakehouse, batch: Batch | str, tables: Mapping[str, Table] | None = None
) -> BatchReadiness:
    """Each table's publish readiness and the batch's (``batch``: an open batch or its name).

    ``tables``: the metadata ``batch`` was read from (``namespace.table`` -> table, see
    :func:`~wap_core.workflow.batch.load_batch_tables`): read from it, not loaded again.

    A table whose checks read another table of the batch at a head that moved since (its audit is stale
    in effect though its own head did not move, see :func:`~wap_core.workflow.batch_audit.stale_tables`)
    is refused as ``stale`` too: ``audit --batch`` re-audits it.
    """
    b = load_batch(lh, batch) if isinstance(batch, str) else batch
    loaded = tables if tables is not None and not isinstance(batch, str) else {}
    stale = {str(t) for t in stale_tables(lh, b)}

    def check(table: TableId) -> PublishCheck:
        got = publish_readiness(lh, table, b.name, loaded.get(str(table)), alone=False, batch=b)
        # judged after the table's own staleness, before its verdict and review (as publish_readiness does)
        if str(table) in stale and got.code in _JUDGED:
            return PublishCheck(
                False,
                "stale",
                f"its checks read another table of batch {b.name} at an older head: audit the batch again",
                True,
                got.review,
            )
        return got

    readiness = tuple(TableReadiness(str(t.table), t.head, check(t.table)) for t in b.tables)
    return BatchReadiness(b.name, readiness, atomicity(lh.catalog))


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
