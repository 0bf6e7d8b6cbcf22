"""Reading a batch: the rows an audit branch added since its fork (the one place that reads them).

Audit, diff, keyed diff and rebase all read the batch through :func:`batch_frame`: an Iceberg
incremental append scan (fork, head] when the branch only appended, so the cost follows the batch,
not the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from wap_core import catalog as cat
from wap_core.identifiers import TableId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

# Iceberg's Spark reader never plans splits smaller than min(16 MiB, read.split.target-size): with
# adaptive split sizing (on by default) the split size is max(total / parallelism, that floor), else
# the target size itself (TableScanUtil.adjustSplitSize).
_SPLIT_FLOOR = 16 * 1024 * 1024
_TARGET_SIZE = ("read.split.target-size", 128 * 1024 * 1024)
_OPEN_FILE_COST = ("read.split.open-file-cost", 4 * 1024 * 1024)


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


def single_split(properties: Mapping[str, str], lin: cat.Lineage) -> bool:
    """True when the snapshot summaries alone prove :func:`batch_frame` reads ONE split (one Spark task).

    Iceberg packs files into splits by weight, each file weighing at least the open-file cost, and
    never makes a split smaller than :data:`_SPLIT_FLOOR` (or the table's target size, if smaller):
    files whose weights sum to no more than that are one split. False means "not known" (the
    engine then asks Spark), never "more than one".
    """
    if lin.head == lin.fork or not lin.new_snapshots:
        return False
    try:
        if lin.fork is None:
            head = lin.new_snapshots[-1].summary
            if head is None:
                return False
            props = head.additional_properties
            files, size = int(props["total-data-files"]), int(props["total-files-size"])
            if int(props.get("total-delete-files", "0")) != 0:
                return False
        else:
            if {cat.snapshot_operation(s) for s in lin.new_snapshots} - {"append"}:
                return False
            added = [s.summary.additional_properties for s in lin.new_snapshots if s.summary is not None]
            if len(added) != len(lin.new_snapshots):
                return False
            files = sum(int(p.get("added-data-files", "0")) for p in added)
            size = sum(int(p.get("added-files-size", "0")) for p in added)
        target = int(properties.get(_TARGET_SIZE[0], _TARGET_SIZE[1]))
        open_cost = int(properties.get(_OPEN_FILE_COST[0], _OPEN_FILE_COST[1]))
    except (KeyError, ValueError):
        return False
    # one file weighs max(size, open cost); several at most their sizes plus one open cost each
    weight = max(size, open_cost) if files == 1 else size + files * open_cost
    return files > 0 and weight <= min(_SPLIT_FLOOR, target)


def batch_rows(lin: cat.Lineage) -> int | None:
    """The batch's row count from the snapshot summaries (what :func:`batch_frame` reads), None if unknown."""
    try:
        if lin.head == lin.fork or not lin.new_snapshots:
            return 0
        if lin.fork is None:
            head = lin.new_snapshots[-1].summary
            return int(head.additional_properties["total-records"]) if head is not None else None
        if {cat.snapshot_operation(s) for s in lin.new_snapshots} - {"append"}:
            return None
        return sum(
            int(s.summary.additional_properties["added-records"]) if s.summary is not None else 0
            for s in lin.new_snapshots
        )
    except (KeyError, ValueError):
        return None
