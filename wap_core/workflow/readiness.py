"""Whether a batch may be published now, and why not: one table's readiness and a batch's (a branch is a batch of one).

:func:`publish_readiness` answers for one table's branch (metadata and journal only: audited head, passed,
main not moved, review policy met); :func:`batch_readiness` for every table of a batch: it may be published
when every table may be, it is forceable when every refusal is, and its code is the first refusal's, tables
in order. The Review page (one table or a batch), ``wap publish`` and the pipelines read these; the one
publish path (:mod:`wap_core.workflow.publish`) judges a branch as a batch of one
(:func:`readiness_of_one`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from wap_core.identifiers import TableId
from wap_core.lake import catalog as cat
from wap_core.lake.multitable import Atomicity, atomicity
from wap_core.states import BranchStatus, branch_status
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.batch import Batch, batch_of, load_batch
from wap_core.workflow.batch_audit import stale_tables
from wap_core.workflow.review import ReviewStatus, review_state

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse


@dataclass(frozen=True)
class PublishCheck:
    """Whether a branch may be published now, and if not, why (for the console's disabled button)."""

    allowed: bool
    code: str  # ok | in_batch | not_audited | stale | audit_failed | main_moved | empty | author_unknown | changes_requested | approvals_missing
    message: str
    forceable: bool
    review: ReviewStatus | None = (
        None  # the head's review status against the table's policy (None: not reached)
    )


def publish_readiness(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    tbl: Table | None = None,
    *,
    alone: bool = True,
    batch: Batch | None = None,
) -> PublishCheck:
    """Whether the branch can be published now and, if not, why (metadata and journal only).

    ``alone`` (a one-table publish): a branch of a batch that spans several tables is refused (``in_batch``,
    not forceable): its tables are published together or not at all (``wap publish --batch``). The batch's
    own readiness asks with ``alone=False`` and its ``batch`` already loaded (``tbl`` too: no reload).
    """
    tbl = tbl if tbl is not None else lh.table(table)
    cat.require_branch(tbl, table, branch)
    if alone and (b := batch_of(lh, table, branch)) is not None and len(b.tables) > 1:
        others = ", ".join(str(t) for t in b.table_ids if t != table)
        return PublishCheck(
            False,
            "in_batch",
            f"branch {branch} of {table} belongs to batch {b.name} with {others}: its tables are published"
            f" together or not at all (publish the batch: wap publish --batch {b.name})",
            False,
        )
    lin = cat.lineage(tbl, branch)
    if lin.published:
        return PublishCheck(False, "empty", "the branch has no commits since main: nothing to publish", False)
    if lin.main_moved:
        return PublishCheck(
            False,
            "main_moved",
            "main moved since this branch forked: rebase the branch, audit it again, then publish",
            False,
        )
    audit = latest_audit(lh, table, branch)
    status = branch_status(lin.head, audit)
    if audit is None or status is BranchStatus.NOT_AUDITED:
        return PublishCheck(False, "not_audited", "the branch has not been audited", True)
    if status is BranchStatus.STALE:
        return PublishCheck(
            False,
            "stale",
            f"the branch moved since its last audit (audited snapshot {audit.snapshot_id}, head {lin.head}): audit it again",
            True,
        )
    rs = review_state(lh, table, branch, tbl, batch=batch)
    if status.blocks_publish:
        bad = audit.failed_checks
        also = f"; {rs.message}" if rs.message else ""
        return PublishCheck(
            False,
            "audit_failed",
            f"the latest audit failed: {', '.join(bad) or 'see the audit'}{also}",
            True,
            rs,
        )
    # the audit passed on the head: the table's review policy must be satisfied on the same head
    if rs.policy.author_cannot_approve and not rs.authors:
        return PublishCheck(
            False,
            "author_unknown",
            f"no author is journaled for {table} {branch} (written by a job that did not open it): four-eyes "
            f"review cannot tell who wrote it; open it or take it over first: wap branch open {table} --branch {branch}",
            True,
            rs,
        )
    if rs.changes_requested:
        return PublishCheck(False, "changes_requested", rs.message, True, rs)
    if rs.missing:
        return PublishCheck(False, "approvals_missing", rs.message, True, rs)
    approved = f"; approved by {', '.join(r.user for r in rs.approvals)}" if rs.approvals else ""
    return PublishCheck(
        True, "ok", f"audit {audit.status} at snapshot {audit.snapshot_id}{approved}", False, rs
    )


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


def readiness_of_one(
    lh: Lakehouse, table: TableId, branch: str, head: int, check: PublishCheck
) -> BatchReadiness:
    """One table's ``check`` as the readiness of a batch of one (what the one publish path judges)."""
    return BatchReadiness(branch, (TableReadiness(str(table), head, check),), atomicity(lh.catalog))
