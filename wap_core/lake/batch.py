"""Reading a batch: what a branch changed since its fork (the one place that reads it).

Audit, diff, keyed diff and rebase all read the batch through :func:`batch_frame`: the rows the
branch's head holds that main at the fork does not (inserted rows and the new versions of updated
rows), and :func:`removed_frame` the rows it no longer holds (deleted rows and the old versions of
updated rows). How they are read (:func:`read_method`, a :class:`~wap_core.states.BatchRead`):

- only appends: an Iceberg incremental append scan (fork, head] of the new files;
- updates, deletes, overwrites (copy-on-write): Iceberg's changelog scan (the ``changes`` table, as
  Spark's ``create_changelog_view`` reads it) of the files each snapshot added and removed, the rows
  a rewrite carried over unchanged cancelled by one grouping of those rows (:func:`net_changes`);
- a snapshot with delete files (merge-on-read), which Iceberg 1.10's changelog scan refuses: the
  head and the fork compared whole, said as such (the one case whose cost follows the table).

So the cost follows the changed files, not the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wap_core.lake import catalog as cat
from wap_core.states import BatchRead

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


NET = "__wap_n"  # net_changes' column: how many times the head holds the row more (> 0) or less (< 0) than the fork
_CHANGELOG_COLUMNS = ("_change_type", "_change_ordinal", "_commit_snapshot_id")


def _delete_files(lin: cat.Lineage) -> int | None:
    """The first new snapshot holding delete files (merge-on-read), else None."""
    for snap in lin.new_snapshots:
        if snap.summary is None or int(
            snap.summary.additional_properties.get("total-delete-files", "0") or 0
        ):
            return snap.snapshot_id
    return None


def read_method(lin: cat.Lineage) -> tuple[BatchRead, str]:
    """How the branch's change is read, and why when it is not read from the changed files alone."""
    if lin.fork is None:
        return BatchRead.WHOLE_TABLE, "the table had no main when the branch started: every row is new"
    if lin.head == lin.fork or {cat.snapshot_operation(s) for s in lin.new_snapshots} <= {"append"}:
        return BatchRead.APPEND, ""
    with_deletes = _delete_files(lin)
    if with_deletes is not None:
        return BatchRead.FULL_COMPARISON, (
            f"snapshot {with_deletes} has delete files (merge-on-read), which Iceberg 1.10's changelog scan "
            "refuses: the branch's head is compared with main at the fork whole (head EXCEPT ALL fork)"
        )
    return BatchRead.CHANGELOG, ""


def net_changes(spark: SparkSession, name: str, lin: cat.Lineage) -> DataFrame:
    """The rows the branch changed since its fork, each with :data:`NET`: how many times more the head holds it
    than the fork (> 0: inserted, or an updated row's new version; < 0: deleted, or its old version).

    Read from the files the branch's snapshots added and removed (the changelog scan); a row a
    copy-on-write rewrite carried over appears removed and added and cancels. With delete files
    (:data:`BatchRead.FULL_COMPARISON`) the head and the fork are compared whole.
    """
    from pyspark.sql import functions as F

    method, _ = read_method(lin)
    if method is BatchRead.FULL_COMPARISON or lin.fork is None:
        head = snapshot_frame(spark, name, lin.head)
        fork = snapshot_frame(spark, name, lin.fork) if lin.fork is not None else head.limit(0)
        return (
            head.exceptAll(fork)
            .withColumn(NET, F.lit(1))
            .unionByName(fork.exceptAll(head).withColumn(NET, F.lit(-1)))
        )
    changes = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(lin.fork))
        .option("end-snapshot-id", str(lin.head))
        .load(f"{name}.changes")
    )
    cols = [F.col(f"`{c}`") for c in changes.columns if c not in _CHANGELOG_COLUMNS]
    sign = F.when(F.col("_change_type") == "INSERT", F.lit(1)).otherwise(F.lit(-1))
    return changes.groupBy(*cols).agg(F.sum(sign).alias(NET)).where(F.col(NET) != 0)


def _repeated(net: DataFrame) -> DataFrame:
    """``net``'s rows, each as many times as its positive :data:`NET`, without that column."""
    from pyspark.sql import functions as F

    return net.withColumn(NET, F.explode(F.array_repeat(F.lit(0), F.col(NET).cast("int")))).drop(NET)


def materialized_changes(spark: SparkSession, name: str, lin: cat.Lineage) -> DataFrame | None:
    """:func:`net_changes` computed ONCE (a local checkpoint: the changed rows, usually few) for a branch that
    rewrites rows, so that an audit's several reads of the change (its counts, the pass, the key look-ups, the
    samples) read the changed files once; None for an append (its reads are already the new files)."""
    method, _ = read_method(lin)
    if method in (BatchRead.APPEND, BatchRead.WHOLE_TABLE) or lin.head == lin.fork:
        return None
    return net_changes(spark, name, lin).localCheckpoint(eager=True)


def batch_frame(spark: SparkSession, name: str, lin: cat.Lineage, net: DataFrame | None = None) -> DataFrame:
    """The rows the branch's head holds that main at the fork does not (appended or inserted rows and the new
    versions of updated rows), read from the changed files only, of the table Spark knows as ``name``
    (unquoted, e.g. :meth:`wap_core.lakehouse.Lakehouse.spark_name`). ``net``: the change already computed
    (:func:`materialized_changes`)."""
    if lin.head == lin.fork:
        return snapshot_frame(spark, name, lin.head).limit(0)
    method, _ = read_method(lin)
    if method is BatchRead.WHOLE_TABLE:
        return snapshot_frame(spark, name, lin.head)
    if method is BatchRead.APPEND:
        return (
            spark.read.format("iceberg")
            .option("start-snapshot-id", str(lin.fork))
            .option("end-snapshot-id", str(lin.head))
            .load(name)
        )
    from pyspark.sql import functions as F

    net = net if net is not None else net_changes(spark, name, lin)
    return _repeated(net.where(F.col(NET) > 0))


def removed_frame(spark: SparkSession, name: str, lin: cat.Lineage) -> DataFrame:
    """The rows main at the fork holds that the branch's head does not (deleted rows and the old versions of
    updated rows); none for a branch that only appended."""
    from pyspark.sql import functions as F

    method, _ = read_method(lin)
    if method in (BatchRead.APPEND, BatchRead.WHOLE_TABLE):
        return snapshot_frame(spark, name, lin.head).limit(0)
    net = net_changes(spark, name, lin).where(F.col(NET) < 0)
    return _repeated(net.withColumn(NET, -F.col(NET)))


CHANGE = "_wap_change"  # changed_rows' column: insert, update_before, update_after or delete


def changed_rows(spark: SparkSession, name: str, lin: cat.Lineage, key: Sequence[str]) -> DataFrame:
    """Every row the branch changed since its fork, with :data:`CHANGE`: ``insert``, ``update_before`` /
    ``update_after`` (a key, the first ``unique``, both removed and added) or ``delete``; a row the change
    holds n times appears n times. Without a usable key an added row is an ``insert``, a removed one a
    ``delete``. An append's rows are all inserts (read from its new files only)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    method, _ = read_method(lin)
    if method in (BatchRead.APPEND, BatchRead.WHOLE_TABLE) or lin.head == lin.fork:
        return batch_frame(spark, name, lin).withColumn(CHANGE, F.lit("insert"))
    net = net_changes(spark, name, lin)
    usable = [k for k in key if k in net.columns] if key and all(k in net.columns for k in key) else []
    if usable:
        per_key = Window.partitionBy(*[F.col(f"`{k}`") for k in usable])
        both = (F.max(F.col(NET)).over(per_key) > 0) & (F.min(F.col(NET)).over(per_key) < 0)
    else:
        both = F.lit(False)
    kind = F.when(F.col(NET) > 0, F.when(both, "update_after").otherwise("insert")).otherwise(
        F.when(both, "update_before").otherwise("delete")
    )
    out = net.withColumn(CHANGE, kind).withColumn(NET, F.abs(F.col(NET)))
    return _repeated(out)


@dataclass(frozen=True)
class ChangeCounts:
    """What a publish of the branch would do to main, in rows: the audit's ``changes`` (shown on Review).

    ``inserted``: rows whose key main at the fork does not hold (every row of an append);
    ``updated``: rows of main replaced by a new version of the same key; ``deleted``: rows of main
    gone with no new version. Without a declared key (a ``unique`` check) an update is one row
    deleted and one inserted. The books balance: rows after = ``main_rows`` + inserted - deleted.
    """

    method: BatchRead
    inserted: int
    updated: int
    deleted: int
    main_rows: int | None  # main's rows at the fork (snapshot summary)
    key: tuple[str, ...] = ()
    note: str = ""  # why the change was not read from the changed files alone

    @property
    def changed(self) -> int:
        """Rows of main a publish removes or rewrites (deleted + updated)."""
        return self.deleted + self.updated

    def pct(self, rows: int) -> float | None:
        """``rows`` as a percentage of main's rows at the fork (None when main had none or is unknown)."""
        return 100.0 * rows / self.main_rows if self.main_rows else None


def change_counts(
    spark: SparkSession,
    name: str,
    lin: cat.Lineage,
    key: Sequence[str],
    main_rows: int | None,
    net: DataFrame | None = None,
) -> ChangeCounts:
    """The branch's inserted, updated and deleted rows (:class:`ChangeCounts`): for an append from the snapshot
    summaries (no Spark job), else ONE Spark job over the changed rows (:func:`net_changes`), by ``key``."""
    from pyspark.sql import functions as F

    method, note = read_method(lin)
    if method in (BatchRead.APPEND, BatchRead.WHOLE_TABLE):
        found = batch_files(lin)
        rows = found.rows if found is not None else snapshot_frame(spark, name, lin.head).count()
        return ChangeCounts(method, rows, 0, 0, main_rows if lin.fork is not None else 0, (), note)
    net = net if net is not None else net_changes(spark, name, lin)
    added = F.when(F.col(NET) > 0, F.col(NET)).otherwise(F.lit(0))
    removed = F.when(F.col(NET) < 0, -F.col(NET)).otherwise(F.lit(0))
    usable = tuple(key) if key and all(k in net.columns for k in key) else ()
    if usable:
        per_key = net.groupBy(*[F.col(f"`{k}`") for k in usable]).agg(
            F.sum(added).alias("a"), F.sum(removed).alias("r")
        )
        row = per_key.agg(
            F.coalesce(F.sum("a"), F.lit(0)).alias("a"),
            F.coalesce(F.sum("r"), F.lit(0)).alias("r"),
            F.coalesce(F.sum(F.least("a", "r")), F.lit(0)).alias("u"),
        ).collect()[0]
    else:
        row = net.agg(
            F.coalesce(F.sum(added), F.lit(0)).alias("a"),
            F.coalesce(F.sum(removed), F.lit(0)).alias("r"),
            F.lit(0).alias("u"),
        ).collect()[0]
    a, r, u = int(row["a"]), int(row["r"]), int(row["u"])
    return ChangeCounts(method, a - u, u, r - u, main_rows, usable, note)


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
