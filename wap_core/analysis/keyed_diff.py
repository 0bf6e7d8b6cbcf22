"""Keyed row diff of a branch against main: added / removed / changed / unchanged keys.

Computes what ``lake-sift LEFT RIGHT --key K`` reports for ``LEFT = main at the
branch's fork`` and ``RIGHT = the branch head``: rows whose key is only on the
branch (added), only on main (removed), on both with at least one differing
non-key column (changed, compared ``NULL``-safely, with per-column cell counts),
and schema changes. Keys are matched ``NULL``-safely, as lake-sift does.

The cost follows the batch, not the table. For a branch whose commits since the
fork are all appends (the usual WAP batch) nothing of main can have been removed
or rewritten, so:

* the batch is read incrementally from the data files the branch added
  (manifest-level ``added`` entries between fork and head);
* the batch's key range comes from the per-file lower/upper bounds in those
  manifest entries (no data read), and is pushed into the scan of main, so
  Iceberg prunes every main data file whose key bounds miss the range;
* main is read key-only for that lookup; full rows of main are read only when
  some batch key already exists in main (to compare its cells).

Other histories (overwrite, delete, replace on the branch) fall back to a full
NULL-safe outer join of the fork snapshot with the branch head.

Differences from lake-sift: lake-sift refuses to diff when either side holds a
duplicate key; here duplicates are counted and reported instead
(``duplicate_keys_branch``: keys repeated within the batch or already in main;
``duplicate_keys_main``: on the append path only within the batch's key range,
since main outside it is never read) and the counts follow lake-sift's
``--allow-duplicates`` join semantics.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import reduce
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.analysis.diff import SchemaChange, compare_columns
from wap_core.exceptions import ValidationError
from wap_core.identifiers import TableId, quote_column
from wap_core.lake import catalog as cat
from wap_core.lake import jobs
from wap_core.lake.batch import batch_frame, read_method, removed_frame
from wap_core.states import BatchRead
from wap_core.values import JSON, JsonObject, JsonOrder, Record

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame

    from wap_core.lakehouse import Lakehouse

_EPOCH = _dt.date(1970, 1, 1)


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    return v


def _count_pairs(pairs: tuple[tuple[str, int], ...]) -> list[JsonObject]:
    return [{"column": c, "count": n} for c, n in pairs]


@dataclass(frozen=True)
class KeyRange:
    """Bounds of one key column over the batch (sound: every batch value lies inside)."""

    column: str
    lo: Any = field(metadata={JSON: _plain})
    hi: Any = field(metadata={JSON: _plain})
    has_nulls: bool


@dataclass(frozen=True)
class KeyedDiff:
    """Keyed comparison of main at the fork (left) with the branch head (right); its JSON adds the summary."""

    __json__: ClassVar[JsonOrder] = (..., "summary")

    table: str
    branch: str
    key: tuple[str, ...]
    compared_columns: tuple[str, ...]
    fork_snapshot_id: int | None
    head_snapshot_id: int
    method: (
        str  # "append" (incremental, pruned) | "changes" (the changed rows by key) | "full" (merge-on-read)
    )
    main_rows: int  # rows of main at the fork (snapshot metadata)
    branch_rows: int  # rows of the branch head (snapshot metadata)
    batch_rows: int  # rows the branch added since the fork (append path) / rows main gains: inserted + updated (changes)
    keys_added: int  # branch rows whose key is not on main            (lake-sift "added")
    keys_removed: int  # main rows whose key is not on the branch        (lake-sift "removed")
    rows_changed: int  # key on both sides, some compared column differs (lake-sift "changed")
    cells_changed: int  # differing cells over those rows                 (lake-sift "changed_cells")
    keys_unchanged: int  # main rows whose key is on the branch with equal values
    changed_by_column: tuple[tuple[str, int], ...] = field(metadata={JSON: _count_pairs})
    duplicate_keys_branch: int
    duplicate_keys_main: int
    schema_changes: tuple[SchemaChange, ...]
    key_ranges: tuple[KeyRange, ...] = ()
    main_files_total: int = 0
    main_files_scanned: int = 0  # main data files left after pruning by the batch's key range
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pure_append(self) -> bool:
        """True when the diff took the incremental append path (not the full outer join of both snapshots)."""
        return self.method == "append"

    def summary(self) -> dict[str, int]:
        """The counts in lake-sift's ``DiffResult.summary()`` shape."""
        return {
            "added": self.keys_added,
            "removed": self.keys_removed,
            "changed": self.rows_changed,
            "changed_cells": self.cells_changed,
            "schema_changes": len(self.schema_changes),
        }


# --------------------------------------------------------------------------- validation


def validate_key(tbl: Table, table: TableId, key: Sequence[str], label: str = "key") -> tuple[str, ...]:
    """The key columns, checked against the table schema (ValidationError naming the columns)."""
    if isinstance(key, str):
        key = [k.strip() for k in key.split(",")]
    cols = tuple(key)
    if not cols or any(not isinstance(c, str) or not c.strip() for c in cols):
        raise ValidationError(f"a {label} needs at least one non-empty column name")
    if len(set(cols)) != len(cols):
        raise ValidationError(f"{label} names a column twice: {', '.join(cols)}")
    names = [f.name for f in tbl.schema().fields]
    unknown = [c for c in cols if c not in names]
    if unknown:
        lower = {n.lower(): n for n in names}
        hints = [f"{c} (did you mean {lower[c.lower()]}?)" if c.lower() in lower else c for c in unknown]
        raise ValidationError(
            f"{label} column(s) not in {table}: {', '.join(hints)}; columns are {', '.join(names)}"
        )
    return cols


# --------------------------------------------------------------------------- metadata helpers


def _decode_bound(field_type: Any, raw: bytes) -> Any:
    """A manifest bound as a Python value Spark can compare with, or None when unsupported."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType

    if not isinstance(field_type, (IntegerType, LongType, StringType, DecimalType, DateType)):
        return None
    value = from_bytes(field_type, raw)
    if isinstance(field_type, DateType) and isinstance(value, int):
        return _EPOCH + _dt.timedelta(days=value)
    return value


def batch_key_ranges(tbl: Table, lin: cat.Lineage, key: Sequence[str]) -> tuple[KeyRange, ...]:
    """Per key column, the bounds over the data files the branch added since its fork.

    Read from the manifest entries of the new snapshots (lower/upper bounds and null
    counts per file): no data file is opened. A column with any file lacking a bound
    (metrics disabled, unsupported type) is left out: no range is pushed for it.
    """
    schema = tbl.schema()
    fields = {c: schema.find_field(c) for c in key}
    lo: Record = {}
    hi: Record = {}
    nulls: dict[str, bool] = dict.fromkeys(key, False)
    usable = set(key)
    new_ids = {s.snapshot_id for s in lin.new_snapshots}
    seen_file = False
    for snap in lin.new_snapshots:
        for manifest in snap.manifests(tbl.io):
            if manifest.added_snapshot_id not in new_ids:
                continue
            for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
                if entry.snapshot_id not in new_ids or entry.status.name != "ADDED":
                    continue
                df = entry.data_file
                seen_file = True
                for c in list(usable):
                    fid = fields[c].field_id
                    if (df.null_value_counts or {}).get(fid, 0):
                        nulls[c] = True
                    raw_lo, raw_hi = (df.lower_bounds or {}).get(fid), (df.upper_bounds or {}).get(fid)
                    if raw_lo is None or raw_hi is None:
                        # A file of only NULLs has no bounds but a null count equal to its rows.
                        if (df.null_value_counts or {}).get(fid, -1) == df.record_count:
                            continue
                        usable.discard(c)
                        continue
                    a, b = (
                        _decode_bound(fields[c].field_type, raw_lo),
                        _decode_bound(fields[c].field_type, raw_hi),
                    )
                    if a is None or b is None:
                        usable.discard(c)
                        continue
                    lo[c] = a if c not in lo else min(lo[c], a)
                    hi[c] = b if c not in hi else max(hi[c], b)
    if not seen_file:
        return ()
    return tuple(KeyRange(c, lo.get(c), hi.get(c), nulls[c]) for c in key if c in usable)


def _pyiceberg_filter(ranges: Sequence[KeyRange]) -> Any:
    from pyiceberg.expressions import AlwaysFalse, And, GreaterThanOrEqual, IsNull, LessThanOrEqual, Or

    expr: Any = None
    for r in ranges:
        if r.lo is None or r.hi is None:
            part: Any = IsNull(r.column) if r.has_nulls else AlwaysFalse()  # type: ignore[misc,arg-type]
        else:
            part = And(GreaterThanOrEqual(r.column, r.lo), LessThanOrEqual(r.column, r.hi))  # type: ignore[call-arg,misc,arg-type]  # PyIceberg's documented positional form; its pydantic signature confuses mypy
            if r.has_nulls:
                part = Or(part, IsNull(r.column))  # type: ignore[misc,arg-type]
        expr = part if expr is None else And(expr, part)
    return expr


def _spark_filter(ranges: Sequence[KeyRange]) -> Column | None:
    from pyspark.sql import functions as F

    cond: Column | None = None
    for r in ranges:
        c = F.col(quote_column(r.column))
        if r.lo is None or r.hi is None:
            part = c.isNull() if r.has_nulls else F.lit(False)
        else:
            part = (c >= F.lit(r.lo)) & (c <= F.lit(r.hi))
            if r.has_nulls:
                part = part | c.isNull()
        cond = part if cond is None else (cond & part)
    return cond


def _count_files(tbl: Table, snapshot_id: int, row_filter: Any = None) -> int:
    scan = (
        tbl.scan(snapshot_id=snapshot_id)
        if row_filter is None
        else tbl.scan(snapshot_id=snapshot_id, row_filter=row_filter)
    )
    return sum(1 for _ in scan.plan_files())


def _schema_of(tbl: Table, snapshot_id: int | None) -> dict[str, str]:
    return {f.name: str(f.field_type) for f in cat.schema_at(tbl, snapshot_id).fields}


# --------------------------------------------------------------------------- Spark helpers


def _renamed(df: DataFrame, key: Sequence[str], cols: Sequence[str], side: str) -> DataFrame:
    """``df`` projected to key + cols under positional names (``__lk0``, ``__lc3``...): no quoting issues in joins."""
    from pyspark.sql import functions as F

    return df.select(
        *[F.col(quote_column(k)).alias(f"__{side}k{i}") for i, k in enumerate(key)],
        *[F.col(quote_column(c)).alias(f"__{side}c{j}") for j, c in enumerate(cols)],
    )


def _key_cond(n: int) -> Column:
    from pyspark.sql import functions as F

    return reduce(lambda a, b: a & b, [F.col(f"__lk{i}").eqNullSafe(F.col(f"__rk{i}")) for i in range(n)])


def _differs(j: int) -> Column:
    from pyspark.sql import functions as F

    return ~F.col(f"__lc{j}").eqNullSafe(F.col(f"__rc{j}"))


def _any_differs(ncols: int) -> Column:
    from pyspark.sql import functions as F

    if ncols == 0:
        return F.lit(False)
    return reduce(lambda a, b: a | b, [_differs(j) for j in range(ncols)])


def _cell_stats(pairs: DataFrame, cols: Sequence[str], where: Column | None = None) -> tuple[int, list[int]]:
    """(rows with any differing cell, per-column differing cells) over joined ``pairs`` (one job)."""
    from pyspark.sql import functions as F

    both = where if where is not None else F.lit(True)
    aggs = [F.count(F.when(both & _any_differs(len(cols)), 1)).alias("changed")]
    aggs += [F.count(F.when(both & _differs(j), 1)).alias(f"d{j}") for j in range(len(cols))]
    row = pairs.agg(*aggs).collect()[0]
    return int(row["changed"] or 0), [int(row[f"d{j}"] or 0) for j in range(len(cols))]


def _dup_keys(df: DataFrame, key: Sequence[str]) -> int:
    from pyspark.sql import functions as F

    keys = [F.col(quote_column(k)) for k in key]
    return int(df.groupBy(*keys).count().where(F.col("count") > 1).count())


# --------------------------------------------------------------------------- the diff


def keyed_diff(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    key: Sequence[str],
    *,
    exclude: Sequence[str] = (),
    columns: Sequence[str] | None = None,
    user: str | None = None,
) -> KeyedDiff:
    """Keyed diff of ``branch`` against main at its fork; see the module docstring.

    Its Spark jobs run in their own job group in ``user``'s FAIR pool (:mod:`wap_core.lake.jobs`).
    """
    with jobs.user_jobs(lh.spark, user or lh.user, f"the keyed diff of {table} {branch}"):
        t0 = time.perf_counter()
        tbl = lh.table(table)
        cat.require_branch(tbl, table, branch)
        key = validate_key(tbl, table, key)
        if exclude:
            validate_key(tbl, table, exclude, "exclude")
        if columns:
            validate_key(tbl, table, columns, "columns")
        lin = cat.lineage(tbl, branch)
        left_schema, right_schema = _schema_of(tbl, lin.fork), _schema_of(tbl, lin.head)
        compared = tuple(
            c
            for c in left_schema
            if c in right_schema
            and c not in key
            and c not in set(exclude)
            and (not columns or c in set(columns))
        )
        ops = {cat.snapshot_operation(s) for s in lin.new_snapshots}
        common = {
            "table": str(table),
            "branch": branch,
            "key": key,
            "compared_columns": compared,
            "fork_snapshot_id": lin.fork,
            "head_snapshot_id": lin.head,
            "main_rows": cat.snapshot_rows(tbl, lin.fork),
            "branch_rows": cat.snapshot_rows(tbl, lin.head),
            "schema_changes": compare_columns(left_schema, right_schema),
        }
        d = _Diffing(lh, tbl, table, lin, key, compared, common)
        result = _append_diff(d) if ops <= {"append"} or lin.fork is None else _change_diff(d)
        return replace(result, seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class _Diffing:
    """What both diff methods read: the table at its lineage, the key, the compared columns, and the
    fields every result shares (``common``)."""

    lh: Lakehouse
    tbl: Table
    table: TableId
    lin: cat.Lineage
    key: tuple[str, ...]
    compared: tuple[str, ...]
    common: Record  # the KeyedDiff fields every path shares, by name


def _cell_changes(compared: tuple[str, ...], rows_changed: int, per_col: list[int]) -> Record:
    """A result's changed rows, changed cells and the changed cells per column (most first, none left out)."""
    by_column = sorted(((c, n) for c, n in zip(compared, per_col, strict=False) if n), key=lambda t: -t[1])
    return {
        "rows_changed": rows_changed,
        "cells_changed": sum(per_col),
        "changed_by_column": tuple(by_column),
    }


def _all_added(d: _Diffing, batch: DataFrame) -> KeyedDiff:
    """Nothing on main to compare with: every batch row is added."""
    from pyspark.sql import functions as F

    stats = (
        batch.groupBy(*[F.col(quote_column(k)) for k in d.key])
        .agg(F.count(F.lit(1)).alias("n"))
        .agg(
            F.coalesce(F.sum("n"), F.lit(0)).alias("rows"),
            F.count(F.when(F.col("n") > 1, 1)).alias("dups"),
        )
        .collect()[0]
    )
    rows = int(stats["rows"])
    return KeyedDiff(
        **d.common,
        method="append",
        batch_rows=rows,
        keys_added=rows,
        keys_removed=0,
        **_cell_changes(d.compared, 0, []),
        keys_unchanged=0,
        duplicate_keys_branch=int(stats["dups"]),
        duplicate_keys_main=0,
    )


def _key_ranges(d: _Diffing, batch: DataFrame, notes: list[str]) -> tuple[KeyRange, ...]:
    """The batch's key ranges from the manifests; without usable bounds, the first key's range from one
    aggregate over the (small) batch."""
    from pyspark.sql import functions as F

    ranges = batch_key_ranges(d.tbl, d.lin, d.key)
    if ranges:
        return ranges
    c = F.col(quote_column(d.key[0]))
    r = batch.agg(
        F.min(c).alias("lo"), F.max(c).alias("hi"), F.count(F.when(c.isNull(), 1)).alias("nulls")
    ).collect()[0]
    notes.append("key range computed from the batch (no usable manifest bounds)")
    return (KeyRange(d.key[0], r["lo"], r["hi"], int(r["nulls"]) > 0),)


def _keys_on_main(key: tuple[str, ...], batch: DataFrame, main_near: DataFrame) -> Any:
    """Job 1 (key-only): batch keys with their multiplicity, looked up in main's keys within the range."""
    from pyspark.sql import functions as F

    bk = batch.groupBy(*[F.col(quote_column(k)).alias(f"__rk{i}") for i, k in enumerate(key)]).agg(
        F.count(F.lit(1)).alias("__bn")
    )
    mk = main_near.groupBy(*[F.col(quote_column(k)).alias(f"__lk{i}") for i, k in enumerate(key)]).agg(
        F.count(F.lit(1)).alias("__mn")
    )
    on_main = F.col("__mn").isNotNull()
    return (
        bk.join(mk, _key_cond(len(key)), "left")
        .agg(
            F.coalesce(F.sum("__bn"), F.lit(0)).alias("batch_rows"),
            F.coalesce(F.sum(F.when(~on_main, F.col("__bn"))), F.lit(0)).alias("added"),
            F.count(F.when(on_main, 1)).alias("keys_on_main"),
            F.count(F.when((F.col("__bn") > 1) | on_main, 1)).alias("dup_branch"),
            F.count(F.when(F.col("__mn") > 1, 1)).alias("dup_main"),
        )
        .collect()[0]
    )


def _append_diff(d: _Diffing) -> KeyedDiff:
    """Branch = main@fork + appended rows: only the batch, and main within its key range, are read."""
    batch = batch_frame(d.lh.spark, d.lh.spark_name(d.table), d.lin)
    if d.lin.fork is None or d.lin.head == d.lin.fork or d.common["main_rows"] == 0:
        return _all_added(d, batch)
    notes: list[str] = []
    ranges = _key_ranges(d, batch, notes)
    main = d.lh.read_snapshot(d.table, d.lin.fork)
    cond = _spark_filter(ranges)
    main_near = main.where(cond) if cond is not None else main
    s = _keys_on_main(d.key, batch, main_near)
    changed, per_col = 0, [0] * len(d.compared)
    if int(s["keys_on_main"]):
        # Job 2 (only when some batch key is already in main): compare the cells of those rows.
        pairs = _renamed(main_near, d.key, d.compared, "l").join(
            _renamed(batch, d.key, d.compared, "r"), _key_cond(len(d.key)), "inner"
        )
        changed, per_col = _cell_stats(pairs, d.compared)
        notes.append(f"{int(s['keys_on_main'])} batch keys already exist in main")
    return KeyedDiff(
        **d.common,
        method="append",
        batch_rows=int(s["batch_rows"]),
        keys_added=int(s["added"]),
        keys_removed=0,
        **_cell_changes(d.compared, changed, per_col),
        keys_unchanged=max(d.common["main_rows"] - changed, 0),
        duplicate_keys_branch=int(s["dup_branch"]),
        duplicate_keys_main=int(s["dup_main"]),
        key_ranges=ranges,
        main_files_total=_count_files(d.tbl, d.lin.fork),
        main_files_scanned=_count_files(d.tbl, d.lin.fork, _pyiceberg_filter(ranges)),
        notes=tuple(notes),
    )


def _change_diff(d: _Diffing) -> KeyedDiff:
    """Updates, deletes, overwrites: the rows main loses (deleted, and updated rows' old versions) joined by key
    with the rows it gains (inserted, and updated rows' new versions), both read from the changed files only
    (:func:`wap_core.lake.batch.removed_frame` / :func:`~wap_core.lake.batch.batch_frame`): a key on both sides
    is an update, compared cell by cell; the rows main keeps as they are are never read."""
    from pyspark.sql import functions as F

    lin, compared = d.lin, d.compared
    assert lin.fork is not None
    name = d.lh.spark_name(d.table)
    left = removed_frame(d.lh.spark, name, lin)
    right = batch_frame(d.lh.spark, name, lin)
    lsel = _renamed(left, d.key, compared, "l").withColumn("__l", F.lit(1))
    rsel = _renamed(right, d.key, compared, "r").withColumn("__r", F.lit(1))
    j = lsel.join(rsel, _key_cond(len(d.key)), "full_outer")
    both = F.col("__l").isNotNull() & F.col("__r").isNotNull()
    aggs = [
        F.count(F.when(F.col("__l").isNull(), 1)).alias("added"),
        F.count(F.when(F.col("__r").isNull(), 1)).alias("removed"),
        F.count(F.when(both, 1)).alias("pairs"),
        F.count(F.when(both & _any_differs(len(compared)), 1)).alias("changed"),
        F.count(F.when(F.col("__r").isNotNull(), 1)).alias("gained"),
        *[F.count(F.when(both & _differs(i), 1)).alias(f"d{i}") for i in range(len(compared))],
    ]
    r = j.agg(*aggs).collect()[0]
    per_col = [int(r[f"d{i}"]) for i in range(len(compared))]
    changed, pairs, removed = int(r["changed"]), int(r["pairs"]), int(r["removed"])
    method, note = read_method(lin)
    touched = sum(int(cat.summary_get(s, "deleted-data-files") or 0) for s in lin.new_snapshots)
    notes = [
        "the branch updates, deletes or overwrites rows: only the rows main loses and gains are read and "
        "compared by key; duplicate keys are counted among those rows"
    ]
    if note:
        notes.append(note)
    return KeyedDiff(
        **d.common,
        method="changes" if method is BatchRead.CHANGELOG else "full",
        batch_rows=int(r["gained"]),
        keys_added=int(r["added"]),
        keys_removed=removed,
        **_cell_changes(compared, changed, per_col),
        keys_unchanged=max(0, d.common["main_rows"] - removed - pairs) + (pairs - changed),
        duplicate_keys_branch=_dup_keys(right, d.key),
        duplicate_keys_main=_dup_keys(left, d.key),
        main_files_total=_count_files(d.tbl, lin.fork),
        main_files_scanned=touched,
        notes=tuple(notes),
    )


__all__ = ["KeyRange", "KeyedDiff", "batch_key_ranges", "keyed_diff", "validate_key"]


@dataclass(frozen=True)
class CellChange:
    """One differing cell of a changed row: the column, main's value and the branch's."""

    column: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ChangedRow:
    """A row whose key is on both sides with some compared column different: the key's values (by key
    column) and the differing cells, in the compared columns' order."""

    key: JsonObject
    cells: tuple[CellChange, ...]

    def cell(self, column: str) -> CellChange | None:
        """The change of ``column`` in this row (None: it did not change)."""
        return next((c for c in self.cells if c.column == column), None)


@dataclass(frozen=True)
class KeyedSamples:
    """A few rows of each kind of keyed change: added / removed rows as they are (values as JSON holds
    them, by column), changed rows as :class:`ChangedRow`."""

    key: tuple[str, ...]
    added: tuple[JsonObject, ...]
    removed: tuple[JsonObject, ...]
    changed: tuple[ChangedRow, ...]


def keyed_samples(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    key: Sequence[str],
    limit: int = 10,
    *,
    user: str | None = None,
) -> KeyedSamples:
    """Up to ``limit`` sample rows added, removed and changed by ``key`` (main at the fork vs the branch head).

    Its Spark jobs run in their own job group in ``user``'s FAIR pool (:mod:`wap_core.lake.jobs`).
    """
    with jobs.user_jobs(lh.spark, user or lh.user, f"the keyed diff samples of {table} {branch}"):
        return _keyed_samples(lh, table, branch, key, limit)


def _keyed_samples(
    lh: Lakehouse, table: TableId, branch: str, key: Sequence[str], limit: int
) -> KeyedSamples:
    from pyspark.sql import functions as F

    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    key = validate_key(tbl, table, key)
    lin = cat.lineage(tbl, branch)
    left_schema, right_schema = _schema_of(tbl, lin.fork), _schema_of(tbl, lin.head)
    compared = [c for c in left_schema if c in right_schema and c not in key]
    right = lh.read_snapshot(table, lin.head)
    if lin.fork is None:
        added = [_plain_row(r.asDict()) for r in right.limit(limit).collect()]
        return KeyedSamples(tuple(key), tuple(added), (), ())
    left = lh.read_snapshot(table, lin.fork)
    if read_method(lin)[0] is not BatchRead.APPEND:
        # updates, deletes, overwrites: only the rows main loses and gains (the changed files), matched by key
        left = removed_frame(lh.spark, lh.spark_name(table), lin)
        right = batch_frame(lh.spark, lh.spark_name(table), lin)
    lk = left.select(
        *[F.col(quote_column(k)).alias(f"__k{i}") for i, k in enumerate(key)],
        *[F.col(quote_column(c)).alias(f"__l{j}") for j, c in enumerate(compared)],
    )
    rk = right.select(
        *[F.col(quote_column(k)).alias(f"__r{i}") for i, k in enumerate(key)],
        *[F.col(quote_column(c)).alias(f"__n{j}") for j, c in enumerate(compared)],
    )
    cond = reduce(
        lambda a, b: a & b, [F.col(f"__k{i}").eqNullSafe(F.col(f"__r{i}")) for i in range(len(key))]
    )
    added_df = right.join(
        lk, [right[quote_column(k)].eqNullSafe(lk[f"__k{i}"]) for i, k in enumerate(key)], "left_anti"
    )
    removed_df = left.join(
        rk, [left[quote_column(k)].eqNullSafe(rk[f"__r{i}"]) for i, k in enumerate(key)], "left_anti"
    )
    both = lk.join(rk, cond, "inner")
    if compared:
        differs = reduce(
            lambda a, b: a | b, [~F.col(f"__l{j}").eqNullSafe(F.col(f"__n{j}")) for j in range(len(compared))]
        )
        changed_rows = both.where(differs).limit(limit).collect()
    else:
        changed_rows = []
    changed = [
        ChangedRow(
            {k: _plain(r[f"__k{i}"]) for i, k in enumerate(key)},
            tuple(
                CellChange(c, _plain(r[f"__l{j}"]), _plain(r[f"__n{j}"]))
                for j, c in enumerate(compared)
                if r[f"__l{j}"] != r[f"__n{j}"]
            ),
        )
        for r in changed_rows
    ]
    return KeyedSamples(
        key=tuple(key),
        added=tuple(_plain_row(r.asDict()) for r in added_df.limit(limit).collect()),
        removed=tuple(_plain_row(r.asDict()) for r in removed_df.limit(limit).collect()),
        changed=tuple(changed),
    )


def _plain_row(row: Record) -> JsonObject:
    return {k: _plain(v) for k, v in row.items()}
