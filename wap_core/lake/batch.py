"""Reading a batch: the rows an audit branch added since its fork (the one place that reads them).

Audit, diff, keyed diff and rebase all read the batch through :func:`batch_frame`: an Iceberg
incremental append scan (fork, head] when the branch only appended, so the cost follows the batch,
not the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wap_core.lake import catalog as cat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# Iceberg's Spark reader never plans splits smaller than min(16 MiB, read.split.target-size): with
# adaptive split sizing (on by default) the split size is max(total / parallelism, that floor), else
# the target size itself (TableScanUtil.adjustSplitSize).
_SPLIT_FLOOR = 16 * 1024 * 1024
_TARGET_SIZE = ("read.split.target-size", 128 * 1024 * 1024)
_OPEN_FILE_COST = ("read.split.open-file-cost", 4 * 1024 * 1024)


def snapshot_frame(spark: SparkSession, name: str, snapshot_id: int) -> DataFrame:
    """The data of the table Spark knows as ``name`` (unquoted) at a snapshot."""
    return spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(name)


def batch_frame(spark: SparkSession, name: str, lin: cat.Lineage) -> DataFrame:
    """The rows the branch added since its fork, read from the new data files only, of the table Spark knows as
    ``name`` (unquoted, e.g. :meth:`wap_core.lakehouse.Lakehouse.spark_name`)."""
    if lin.head == lin.fork:
        return snapshot_frame(spark, name, lin.head).limit(0)
    if lin.fork is None:
        # The table had no main when the branch started: everything on the branch is new.
        return snapshot_frame(spark, name, lin.head)
    ops = {cat.snapshot_operation(s) for s in lin.new_snapshots}
    if ops <= {"append"}:
        return (
            spark.read.format("iceberg")
            .option("start-snapshot-id", str(lin.fork))
            .option("end-snapshot-id", str(lin.head))
            .load(name)
        )
    # Non-append history (overwrite/delete on the branch): fall back to a set difference.
    return snapshot_frame(spark, name, lin.head).exceptAll(snapshot_frame(spark, name, lin.fork))


@dataclass(frozen=True)
class BatchFiles:
    """What :func:`batch_frame` reads, from the snapshot summaries alone: data files, bytes, rows."""

    files: int
    size: int
    rows: int


def batch_files(lin: cat.Lineage) -> BatchFiles | None:
    """The batch's data files, bytes and rows (no delete file to apply), None when the summaries cannot tell."""
    if lin.head == lin.fork or not lin.new_snapshots:
        return BatchFiles(0, 0, 0)
    try:
        if lin.fork is None:  # the whole head snapshot is the batch
            head = lin.new_snapshots[-1].summary
            if head is None:
                return None
            p = head.additional_properties
            if int(p.get("total-delete-files", "0")) != 0:
                return None
            return BatchFiles(int(p["total-data-files"]), int(p["total-files-size"]), int(p["total-records"]))
        if {cat.snapshot_operation(s) for s in lin.new_snapshots} - {"append"}:
            return None
        added = [s.summary.additional_properties for s in lin.new_snapshots if s.summary is not None]
        if len(added) != len(lin.new_snapshots):
            return None
        return BatchFiles(
            sum(int(p.get("added-data-files", "0")) for p in added),
            sum(int(p.get("added-files-size", "0")) for p in added),
            sum(int(p.get("added-records", "0")) for p in added),
        )
    except (KeyError, ValueError):
        return None


def single_split(properties: Mapping[str, str], found: BatchFiles | None) -> bool:
    """True when the batch's files (:func:`batch_files`) prove :func:`batch_frame` reads ONE split (one Spark task).

    Iceberg packs files into splits by weight, each file weighing at least the open-file cost, and
    never makes a split smaller than :data:`_SPLIT_FLOOR` (or the table's target size, if smaller):
    files whose weights sum to no more than that are one split. False means "not known" (the
    engine then asks Spark), never "more than one".
    """
    if found is None or found.files == 0:
        return False
    try:
        target = int(properties.get(_TARGET_SIZE[0], _TARGET_SIZE[1]))
        open_cost = int(properties.get(_OPEN_FILE_COST[0], _OPEN_FILE_COST[1]))
    except ValueError:
        return False
    # one file weighs max(size, open cost); several at most their sizes plus one open cost each
    weight = max(found.size, open_cost) if found.files == 1 else found.size + found.files * open_cost
    return weight <= min(_SPLIT_FLOOR, target)
