"""Reading a batch: the rows an audit branch added since its fork (the one place that reads them).

Audit, diff, keyed diff and rebase all read the batch through :func:`batch_frame`: an Iceberg
incremental append scan (fork, head] when the branch only appended, so the cost follows the batch,
not the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wap_core import catalog as cat
from wap_core.identifiers import TableId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse


def batch_frame(lh: Lakehouse, table: TableId, lin: cat.Lineage) -> DataFrame:
    """The rows the branch added since its fork, read from the new data files only."""
    name = lh.spark_name(table)
    if lin.head == lin.fork:
        return lh.read_snapshot(table, lin.head).limit(0)
    if lin.fork is None:
        # The table had no main when the branch started: everything on the branch is new.
        return lh.read_snapshot(table, lin.head)
    ops = {cat.snapshot_operation(s) for s in lin.new_snapshots}
    if ops <= {"append"}:
        return (
            lh.spark.read.format("iceberg")
            .option("start-snapshot-id", str(lin.fork))
            .option("end-snapshot-id", str(lin.head))
            .load(name)
        )
    # Non-append history (overwrite/delete on the branch): fall back to a set difference.
    return lh.read_snapshot(table, lin.head).exceptAll(lh.read_snapshot(table, lin.fork))
