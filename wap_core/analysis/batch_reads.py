"""Where a branch's checks read the other tables of its batch (a batch that spans tables).

A check that reads another table (``references``) reads it at main, unless that table is in the audited
branch's batch: then at its head in the batch (its branch of the batch's name), so rows added together
(the flights and the airports they go to) are judged together. The audit and Explore's failing rows both
build their check context from :func:`batch_reads`; a plain branch (a one-table batch) gets ``{}`` and
reads exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from wap_core.checks import CheckSpec, OtherRead
from wap_core.identifiers import TableId
from wap_core.lake import catalog as cat
from wap_core.store import batches as store

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse


def batch_reads(lh: Lakehouse, table: TableId, branch: str, wanted: Iterable[str]) -> dict[str, OtherRead]:
    """{other table of ``table``'s batch ``branch`` among ``wanted``: its head there}; ``{}`` for a plain branch.

    ``wanted``: the tables the suite's checks read (:meth:`CheckSpec.other_tables`); nothing else is loaded.
    A member whose branch is gone (published, discarded) is read at main again.
    """
    names = {str(TableId.parse(w)) for w in wanted} - {str(table)}
    if not names:
        return {}
    members = {m.table for m in store.open_members(lh.journal.engine, branch)}
    if str(table) not in members:
        return {}
    out: dict[str, OtherRead] = {}
    for name in sorted(names & members):
        tid = TableId.parse(name)
        if not cat.table_exists(lh.catalog, tid):
            continue
        head = cat.ref_snapshot_id(lh.table(tid), branch)
        if head is not None:
            out[name] = OtherRead(head, branch)
    return out


def suite_reads(specs: Iterable[CheckSpec]) -> set[str]:
    """The other tables a suite's checks read (``references`` targets), as ``namespace.table``."""
    return {str(TableId.parse(t)) for spec in specs for t in spec.other_tables()}
