"""Where a batch that spans tables stands: each table's readiness and the batch's (metadata and journal only).

A batch may be published when every one of its tables may be (:func:`~wap_core.workflow.publish.publish_readiness`
on each: audited head, passed, main not moved, review policy met); it is forceable when every refusal is.
Its code is the first refusal's, tables in order. The console's batch Review, ``wap publish --batch`` and
the pipelines read this one function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wap_core.identifiers import TableId
from wap_core.lake.multitable import Atomicity, atomicity
from wap_core.workflow.batch import Batch, load_batch
from wap_core.workflow.batch_audit import stale_tables
from wap_core.workflow.publish import PublishCheck, publish_readiness

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


def batch_readiness(lh: Lakehouse, batch: Batch | str) -> BatchReadiness:
    """Each table's publish readiness and the batch's (``batch``: an open batch or its name).

    A table whose checks read another table of the batch at a head that moved since (its audit is stale
    in effect though its own head did not move, see :func:`~wap_core.workflow.batch_audit.stale_tables`)
    is refused as ``stale`` too: ``audit --batch`` re-audits it.
    """
    b = load_batch(lh, batch) if isinstance(batch, str) else batch
    stale = {str(t) for t in stale_tables(lh, b)}

    def check(table: TableId) -> PublishCheck:
        got = publish_readiness(lh, table, b.name)
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

    tables = tuple(TableReadiness(str(t.table), t.head, check(t.table)) for t in b.tables)
    return BatchReadiness(b.name, tables, atomicity(lh.catalog))
