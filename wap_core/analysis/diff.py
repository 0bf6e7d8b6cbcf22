"""Branch vs main: what the batch adds, computed by Spark on the new rows only.

Main's column profile is computed once per main snapshot and cached in the
catalog database (``wap_profiles``), so reviewing ten branches of one table
profiles main once. It is built metadata-first (``wap_core.lake.metaprofile``): rows, nulls,
min and max from the manifests, the rest from a bounded sample, each field of each
column marked ``exact`` or ``approximate``; only a small main or one with delete files
is scanned.
"""

from __future__ import annotations

import base64
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.accepted_values import AcceptedValues
from wap_core.checks.base import CheckResult
from wap_core.checks.not_null import NotNull
from wap_core.checks.range_check import Range
from wap_core.checks.references import References
from wap_core.identifiers import MAIN, TableId, quote_column
from wap_core.lake import catalog as cat
from wap_core.lake import jobs
from wap_core.lake.batch import batch_frame
from wap_core.lake.catalog import MetadataDiff
from wap_core.lake.metaprofile import (
    QUANTILES,
    TOP_N,
    TOP_VALUES_MAX_DISTINCT,
    column_kind,
    metadata_profile,
)
from wap_core.lake.profile import (
    APPROXIMATE,
    EXACT,
    FIELDS,
    ByKey,
    ColumnProfile,
    ProfileSample,
    Quantiles,
    TableProfile,
    TopValue,
)
from wap_core.values import JSON, JsonObject, JsonOrder, Record, jsonable, omit_none, to_jsonable

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame, SparkSession

    from wap_core.lakehouse import Lakehouse

HLL_LG_K = 12
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
MAX_MERGE_DEPTH = 20  # publishes in a row whose profiles merge without a rescan of main


def profile_frame(df: DataFrame, max_top_columns: int = 12) -> TableProfile:
    """Per-column profile in two Spark jobs: one aggregate pass, one top-values pass."""
    fields = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    row = df.agg(*_profile_aggs(fields)).collect()[0].asDict()
    rows = int(row["_rows"])
    cols = {name: _column_profile(row, i, typ, rows) for i, (name, typ) in enumerate(fields)}
    cats = [
        n
        for n, t in fields
        if column_kind(t) == "categorical" and (cols[n].distinct or 0) <= TOP_VALUES_MAX_DISTINCT
    ][:max_top_columns]
    if cats and rows:
        for name, top in _top_values(df, cats, rows).items():
            cols[name] = replace(cols[name], top_values=top)
    return TableProfile(rows, cols)


def _profile_aggs(fields: list[tuple[str, str]]) -> list[Column]:
    """The aggregates of the one pass: the row count, and per column (by position ``i``) its non-nulls,
    distinct estimate and HLL sketch, min/max where ordered, mean and quantiles where numeric."""
    from pyspark.sql import functions as F

    aggs = [F.count(F.lit(1)).alias("_rows")]
    for i, (name, typ) in enumerate(fields):
        c = F.col(quote_column(name))
        kind = column_kind(typ)
        # an HLL sketch per column: its estimate is the distinct count, and sketches of main and of a
        # published batch merge into main's next distinct count without rescanning main
        sketch = f"hll_sketch_agg(CAST({quote_column(name)} AS STRING), {HLL_LG_K})"
        aggs += [
            F.count(c).alias(f"nn{i}"),
            F.expr(f"hll_sketch_estimate({sketch})").alias(f"d{i}"),
            F.expr(sketch).alias(f"h{i}"),
        ]
        if kind in ("numeric", "temporal") or typ in ("string", "date"):
            aggs += [F.min(c).alias(f"mn{i}"), F.max(c).alias(f"mx{i}")]
        if kind == "numeric":
            aggs += [
                F.avg(c).alias(f"avg{i}"),
                F.percentile_approx(c.cast("double"), list(QUANTILES), 1000).alias(f"q{i}"),
            ]
    return aggs


def _column_profile(row: Record, i: int, typ: str, rows: int) -> ColumnProfile:
    """Column ``i``'s profile from the aggregate row (its top values come from the second pass)."""
    nn = int(row[f"nn{i}"])
    # every row read: counts, min, max, mean and top values are exact; the distinct count is an HLL
    # sketch's estimate and the quantiles percentile_approx's
    acc = {
        f: APPROXIMATE if f == "distinct" or (f == "quantiles" and row.get(f"q{i}")) else EXACT
        for f in FIELDS
    }
    return ColumnProfile(
        type=typ,
        kind=column_kind(typ),
        rows=rows,
        nulls=rows - nn,
        null_pct=round(100.0 * (rows - nn) / rows, 4) if rows else 0.0,
        distinct=int(row[f"d{i}"] or 0),
        hll=base64.b64encode(bytes(row[f"h{i}"])).decode("ascii") if row.get(f"h{i}") is not None else None,
        min=jsonable(row.get(f"mn{i}")),
        max=jsonable(row.get(f"mx{i}")),
        mean=jsonable(row.get(f"avg{i}")),
        quantiles=dict(zip([str(q) for q in QUANTILES], jsonable(row.get(f"q{i}")) or [], strict=False))
        if row.get(f"q{i}")
        else None,
        top_values=None,
        accuracy=acc,
        approximate=tuple(f for f in FIELDS if acc[f] == APPROXIMATE),
    )


def _top_values(df: DataFrame, cats: list[str], rows: int) -> dict[str, tuple[TopValue, ...]]:
    """The second pass: the ``TOP_N`` most frequent values of each categorical column in ``cats``."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    pairs = F.explode(
        F.array(
            *[
                F.struct(F.lit(n).alias("col"), F.col(quote_column(n)).cast("string").alias("val"))
                for n in cats
            ]
        )
    )
    counted = (
        df.select(pairs.alias("p")).groupBy(F.col("p.col").alias("col"), F.col("p.val").alias("val")).count()
    )
    w = Window.partitionBy("col").orderBy(F.desc("count"), F.asc_nulls_last("val"))
    found: dict[str, list[TopValue]] = {}
    for r in counted.withColumn("rk", F.row_number().over(w)).where(F.col("rk") <= TOP_N).collect():
        found.setdefault(r["col"], []).append(
            TopValue(r["val"], int(r["count"]), round(100.0 * int(r["count"]) / rows, 4))
        )
    return {n: tuple(sorted(tv, key=lambda t: -t.count)) for n, tv in found.items()}


def main_profile(lh: Lakehouse, table: TableId, snapshot_id: int | None) -> TableProfile | None:
    """Main's profile at ``snapshot_id``: cached per snapshot (snapshots are immutable).

    After a publish, main's new head is the head of a batch whose profile the review computed;
    main's profile is then the merge of its profile at the batch's fork and the batch's profile
    (counts, nulls, min, max, mean and HLL distinct counts merge exactly; quantiles and top values
    approximately, and say so). When no such chain is cached, main's profile is built
    metadata-first (``source`` "metadata": exact counts and bounds from the manifests, the rest
    from a bounded sample, marked approximate); only a small main or one with delete files is
    scanned (``source`` "scan"). ``basis`` says what the profile was computed from.
    """
    if snapshot_id is None:
        return None
    prof = _cached_or_merged(lh, table, snapshot_id, MAX_MERGE_DEPTH)
    if prof is None:
        prof, basis = metadata_profile(lh.table(table), table, snapshot_id, lh.spark, lh.spark_name(table))
        if prof is None:
            prof = replace(profile_frame(lh.read_snapshot(table, snapshot_id)), source="scan", basis=basis)
        lh.profiles.save_profile(str(table), snapshot_id, prof)
    return prof


def cached_main_profile(lh: Lakehouse, table: TableId, snapshot_id: int | None) -> TableProfile | None:
    """Main's profile at ``snapshot_id`` if stored, or merged from stored profiles; None rather than a scan."""
    if snapshot_id is None:
        return None
    return _cached_or_merged(lh, table, snapshot_id, MAX_MERGE_DEPTH)


def _cached_or_merged(lh: Lakehouse, table: TableId, snapshot_id: int, depth: int) -> TableProfile | None:
    cached = lh.profiles.load_profile(str(table), snapshot_id)
    if cached is not None or depth <= 0:
        return cached
    batch = lh.profiles.load_batch_profile(str(table), snapshot_id)
    if batch is None:
        return None
    fork, batch_prof = batch
    base = _cached_or_merged(lh, table, fork, depth - 1)
    if base is None or set(base.columns) != set(batch_prof.columns):
        return None
    merged = replace(
        merge_profiles(lh.spark, base, batch_prof),
        source=f"merged: main at {fork} + batch ({fork}, {snapshot_id}]",
        basis=f"merged from main's profile at {fork} ({(base.source or 'scan').split(':')[0]}) and the published batch's",
    )
    lh.profiles.save_profile(str(table), snapshot_id, merged)
    return merged


def merge_profiles(spark: SparkSession, a: TableProfile, b: TableProfile) -> TableProfile:
    """The profile of the union of two disjoint row sets, from their profiles (one tiny Spark query)."""
    rows = a.rows + b.rows
    names = list(a.columns)
    unions = []
    for i, n in enumerate(names):
        ha, hb = a.columns[n].hll, b.columns[n].hll
        if ha and hb and _BASE64.fullmatch(ha) and _BASE64.fullmatch(hb):  # nothing but base64 reaches SQL
            u = f"hll_union(unbase64('{ha}'), unbase64('{hb}'))"
            unions += [f"hll_sketch_estimate({u}) AS d{i}", f"{u} AS h{i}"]
    merged_hll = spark.sql("SELECT " + ", ".join(unions)).collect()[0].asDict() if unions else {}
    cols: dict[str, ColumnProfile] = {}
    for i, n in enumerate(names):
        ca, cb = a.columns[n], b.columns[n]
        acc_a, acc_b = ca.accuracy, cb.accuracy
        acc = {f: EXACT if acc_a[f] == acc_b[f] == EXACT else APPROXIMATE for f in FIELDS}
        nn_a, nn_b = ca.rows - ca.nulls, cb.rows - cb.nulls
        nulls = ca.nulls + cb.nulls
        acc["distinct"] = APPROXIMATE  # a union of HLL sketches, or without a sketch of one side an estimate
        if f"d{i}" in merged_hll:
            distinct = int(merged_hll[f"d{i}"] or 0)
            hll: str | None = base64.b64encode(bytes(merged_hll[f"h{i}"])).decode("ascii")
        else:
            # no sketch of one side (a metadata-first profile of main): value ranges that do not overlap
            # cannot share a value, so the counts add up; otherwise the larger is a lower bound
            disjoint = _disjoint(ca, acc_a, cb, acc_b)
            distinct = (
                (ca.distinct or 0) + (cb.distinct or 0)
                if disjoint
                else max(ca.distinct or 0, cb.distinct or 0)
            )
            hll = None
        quantiles: Quantiles | None
        if ca.quantiles and cb.quantiles:
            quantiles = _merge_quantiles(ca.quantiles, nn_a, cb.quantiles, nn_b)
            acc["quantiles"] = APPROXIMATE
        else:
            quantiles = ca.quantiles or cb.quantiles
        top_values = ca.top_values
        if ca.top_values or cb.top_values:
            counts: dict[Any, int] = {}
            for tv in (*(ca.top_values or ()), *(cb.top_values or ())):
                counts[tv.value] = counts.get(tv.value, 0) + tv.count
            top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[:TOP_N]
            top_values = tuple(TopValue(v, c, round(100.0 * c / rows, 4) if rows else 0.0) for v, c in top)
            acc["top_values"] = APPROXIMATE
        cols[n] = replace(
            ca,
            rows=rows,
            nulls=nulls,
            null_pct=round(100.0 * nulls / rows, 4) if rows else 0.0,
            distinct=distinct,
            hll=hll,
            min=_pick(ca.min, cb.min, min),
            max=_pick(ca.max, cb.max, max),
            mean=((ca.mean or 0) * nn_a + (cb.mean or 0) * nn_b) / (nn_a + nn_b)
            if ca.mean is not None and cb.mean is not None and nn_a + nn_b
            else _pick(ca.mean, cb.mean, max),
            quantiles=quantiles,
            top_values=top_values,
            accuracy=acc,
            approximate=tuple(f for f in FIELDS if acc[f] == APPROXIMATE),
        )
    return TableProfile(rows, cols)


def _disjoint(
    ca: ColumnProfile, acc_a: Mapping[str, str], cb: ColumnProfile, acc_b: Mapping[str, str]
) -> bool:
    """Whether two columns' exact value ranges do not overlap (then no value is in both)."""
    if not all(acc[f] == EXACT for acc in (acc_a, acc_b) for f in ("min", "max")):
        return False
    if ca.min is None or cb.min is None:
        return True  # one side has no values at all
    try:
        return bool(cb.min > ca.max or cb.max < ca.min)
    except TypeError:
        return False


def _pick(x: Any, y: Any, fn: Any) -> Any:
    if x is None:
        return y
    if y is None:
        return x
    try:
        return fn(x, y)
    except TypeError:
        return x


def _merge_quantiles(qa: Quantiles, na: int, qb: Quantiles, nb: int) -> Quantiles:
    """Quantiles of a mixture of two distributions known by their quantiles (piecewise-linear CDFs)."""

    def cdf(q: Quantiles, x: float) -> float:
        pts = sorted((float(v), float(p)) for p, v in q.items())
        if x <= pts[0][0]:
            return 0.0 if x < pts[0][0] else pts[0][1]
        for (x0, p0), (x1, p1) in itertools.pairwise(pts):
            if x <= x1:
                return p1 if x1 == x0 else p0 + (p1 - p0) * (x - x0) / (x1 - x0)
        return 1.0

    total = na + nb
    if total == 0:
        return qa
    candidates = sorted({float(v) for v in (*qa.values(), *qb.values())})

    def mix(x: float) -> float:
        return (na * cdf(qa, x) + nb * cdf(qb, x)) / total

    out: dict[str, float] = {}
    for key in qa:
        p = float(key)
        lo, hi = candidates[0], candidates[-1]
        if p <= 0:
            out[key] = lo
            continue
        for _ in range(60):  # bisection on the monotone mixture CDF
            mid = (lo + hi) / 2
            if mix(mid) < p:
                lo = mid
            else:
                hi = mid
        out[key] = hi
    return out


@dataclass(frozen=True)
class ColumnDiff(ByKey):
    """One column of the batch next to the same column of main (``main`` None: main has no such column)."""

    name: str
    type: str
    kind: str
    main: ColumnProfile | None
    batch: ColumnProfile
    null_pct_change: float | None = field(
        default=None, metadata={JSON: omit_none}
    )  # batch minus main, percentage points
    mean_change: float | None = field(default=None, metadata={JSON: omit_none})  # batch minus main

    def _keys(self) -> tuple[str, ...]:
        return tuple(to_jsonable(self))

    @classmethod
    def from_dict(cls, d: JsonObject) -> ColumnDiff:
        """A column diff back from its JSON form."""
        main = d.get("main")
        return cls(
            name=str(d.get("name")),
            type=d.get("type", ""),
            kind=d.get("kind", ""),
            main=ColumnProfile.from_json(main) if main else None,
            batch=ColumnProfile.from_json(d.get("batch") or {}),
            null_pct_change=d.get("null_pct_change"),
            mean_change=d.get("mean_change"),
        )

    @classmethod
    def of(cls, name: str, main: ColumnProfile | None, batch: ColumnProfile) -> ColumnDiff:
        """The batch's column next to main's, with the changes of the null share and the mean."""
        null_change = mean_change = None
        if main is not None:
            null_change = round(batch.null_pct - main.null_pct, 4)
            if batch.mean is not None and main.mean is not None:
                mean_change = batch.mean - main.mean
        return cls(name, batch.type, batch.kind, main, batch, null_change, mean_change)


@dataclass(frozen=True)
class ProfileBasis(ByKey):
    """How main's profile was made: ``source`` (scan | metadata | merged: ...), ``basis`` in words,
    and for a metadata-first profile the ``sample`` it read (rows, files, files_total)."""

    source: str | None
    basis: str | None
    sample: ProfileSample | None

    @classmethod
    def of(cls, profile: TableProfile) -> ProfileBasis:
        """How ``profile`` (main's) was made."""
        return cls(profile.source, profile.basis, profile.sample)

    @classmethod
    def from_dict(cls, d: JsonObject) -> ProfileBasis:
        """The basis back from its JSON form."""
        sample = d.get("sample")
        return cls(d.get("source"), d.get("basis"), ProfileSample.from_json(sample) if sample else None)


@dataclass(frozen=True)
class NullOverlap(ByKey):
    """How many of the batch's rows are NULL in both of two columns whose null rate moved (``rows``).

    The diff counts them for every pair of such columns (:func:`null_overlaps`): columns NULL on the
    same rows moved for one reason (the same cancelled flights), and the review charts them once
    (:func:`change_groups`).
    """

    columns: tuple[str, str]
    rows: int

    @classmethod
    def from_dict(cls, d: JsonObject) -> NullOverlap:
        """An overlap back from its JSON form."""
        a, b = d["columns"]
        return cls((str(a), str(b)), int(d["rows"]))


@dataclass(frozen=True)
class DiffResult:
    """Branch vs main: the metadata diff, the counted rows, the schema changes and every column's profiles.

    The refs and whether the branch is a pure append are the :class:`MetadataDiff`'s (read from
    the same table metadata); ``rows_added`` and ``rows_deleted`` are counted by Spark. Its JSON
    (``diff --json``) leads with the refs; a missing ``main_profile`` is written ``{}``.
    """

    __json__: ClassVar[JsonOrder] = (
        "table",
        "branch",
        "fork_snapshot_id",
        "head_snapshot_id",
        "main_snapshot_id",
        "main_moved",
        "pure_append",
        "rows_added",
        "rows_deleted",
        "schema_changes",
        "columns",
        "null_overlaps",
        "metadata",
        "main_profile",
    )

    metadata: MetadataDiff
    rows_added: int
    rows_deleted: int
    schema_changes: tuple[SchemaChange, ...]
    columns: tuple[ColumnDiff, ...]
    main_profile: ProfileBasis | None = field(
        default=None, metadata={JSON: lambda p: {} if p is None else p}
    )  # None: main has no snapshot at the fork
    null_overlaps: tuple[
        NullOverlap, ...
    ] = ()  # batch rows NULL in both of two columns whose null rate moved

    @property
    def table(self) -> str:
        """The table, ``namespace.name``."""
        return self.metadata.table

    @property
    def branch(self) -> str:
        """The branch compared with main."""
        return self.metadata.branch

    @property
    def fork_snapshot_id(self) -> int | None:
        """Main's snapshot the branch forked from (None: main was empty)."""
        return self.metadata.fork_snapshot_id

    @property
    def head_snapshot_id(self) -> int:
        """The branch's head snapshot."""
        return self.metadata.head_snapshot_id

    @property
    def main_snapshot_id(self) -> int | None:
        """Main's current snapshot."""
        return self.metadata.main_snapshot_id

    @property
    def main_moved(self) -> bool:
        """True when main moved since the branch forked (a publish needs a rebase)."""
        return self.metadata.main_moved

    @property
    def pure_append(self) -> bool:
        """True when the branch only appended rows."""
        return self.metadata.pure_append

    def column(self, name: str) -> ColumnDiff | None:
        """The diff of one column by name (None: no such column)."""
        return next((c for c in self.columns if c.name == name), None)

    @classmethod
    def from_dict(cls, d: JsonObject) -> DiffResult:
        """A diff back from its JSON form (``diff --json``)."""
        meta = dict(d["metadata"])
        meta["operations"] = tuple(meta.get("operations") or ())
        return cls(
            metadata=MetadataDiff(**meta),
            rows_added=d["rows_added"],
            rows_deleted=d["rows_deleted"],
            schema_changes=tuple(SchemaChange.from_dict(c) for c in d.get("schema_changes") or ()),
            columns=tuple(ColumnDiff.from_dict(c) for c in d.get("columns") or ()),
            main_profile=ProfileBasis.from_dict(d["main_profile"]) if d.get("main_profile") else None,
            null_overlaps=tuple(NullOverlap.from_dict(o) for o in d.get("null_overlaps") or ()),
        )


@dataclass(frozen=True)
class SchemaChange(ByKey):
    """One column's change from main to the branch: ``kind`` removed, type_changed or added, with the
    column's type on each side (None on the side without it)."""

    column: str
    kind: str
    old_type: str | None
    new_type: str | None

    @classmethod
    def from_dict(cls, d: JsonObject) -> SchemaChange:
        """A schema change back from its JSON form."""
        return cls(str(d["column"]), str(d["kind"]), d.get("old_type"), d.get("new_type"))


def schema_changes(tbl: Table, branch: str) -> tuple[SchemaChange, ...]:
    """Schema of the branch head vs main head (by each snapshot's schema id), from metadata."""
    main_s = cat.schema_at(tbl, cat.ref_snapshot_id(tbl, MAIN))
    br_s = cat.schema_at(tbl, tbl.metadata.refs[branch].snapshot_id)
    return compare_columns(
        {f.name: str(f.field_type) for f in main_s.fields},
        {f.name: str(f.field_type) for f in br_s.fields},
    )


def compare_columns(left: Mapping[str, str], right: Mapping[str, str]) -> tuple[SchemaChange, ...]:
    """Column changes from ``left`` (main) to ``right`` (branch): removed, type_changed, added."""
    out: list[SchemaChange] = []
    for c, t in left.items():
        if c not in right:
            out.append(SchemaChange(c, "removed", t, None))
        elif right[c] != t:
            out.append(SchemaChange(c, "type_changed", t, right[c]))
    out += [SchemaChange(c, "added", None, t) for c, t in right.items() if c not in left]
    return tuple(out)


def compute_diff(lh: Lakehouse, table: TableId, branch: str, *, user: str | None = None) -> DiffResult:
    """Diff the branch against main at its fork: counted rows, schema changes and column profiles (Spark).

    Its Spark jobs run in their own job group in ``user``'s FAIR pool (:mod:`wap_core.lake.jobs`).
    """
    with jobs.user_jobs(lh.spark, user or lh.user, f"the diff of {table} {branch}"):
        return _compute_diff(lh, table, branch)


def _compute_diff(lh: Lakehouse, table: TableId, branch: str) -> DiffResult:
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    meta = cat.metadata_diff(tbl, table, branch)
    lin = cat.lineage(tbl, branch)  # metadata only, like metadata_diff
    batch = batch_frame(lh.spark, lh.spark_name(table), lin)
    batch_prof = profile_frame(batch)
    if meta.pure_append and lin.fork is not None:
        # once published, main = main at the fork + this batch: keep the batch's profile to merge
        lh.profiles.save_batch_profile(str(table), lin.fork, lin.head, batch_prof)
    main_prof = main_profile(lh, table, lin.fork)
    if meta.pure_append:
        deleted = 0
    else:
        fork_df = lh.read_snapshot(table, lin.fork) if lin.fork is not None else None
        deleted = fork_df.exceptAll(lh.read_snapshot(table, lin.head)).count() if fork_df is not None else 0
    main_cols = main_prof.columns if main_prof is not None else {}
    columns = tuple(ColumnDiff.of(name, main_cols.get(name), b) for name, b in batch_prof.columns.items())
    return DiffResult(
        metadata=meta,
        rows_added=batch_prof.rows,
        rows_deleted=deleted,
        schema_changes=schema_changes(tbl, branch),
        columns=columns,
        main_profile=ProfileBasis.of(main_prof) if main_prof is not None else None,
        null_overlaps=null_overlaps(batch, columns),
    )


MAX_OVERLAP_COLUMNS = 24  # pairs of columns counted at most: 276 count_if in one pass


def null_overlaps(batch: DataFrame, columns: Sequence[ColumnDiff]) -> tuple[NullOverlap, ...]:
    """For each pair of columns whose null rate moved (Cohen's h at least :data:`SMALL_CHANGE`, NULLs in
    the batch), the batch rows NULL in both: one more aggregate pass over the new rows, only when two or
    more columns moved so (at most :data:`MAX_OVERLAP_COLUMNS`, the largest moves)."""
    from pyspark.sql import functions as F

    moved = sorted(
        (
            (column_change(c).scores.get("null_rate", 0.0), c.name)
            for c in columns
            if c.batch.nulls and column_change(c).scores.get("null_rate", 0.0) >= SMALL_CHANGE
        ),
        key=lambda sc: (-sc[0], sc[1]),
    )
    names = sorted(n for _, n in moved[:MAX_OVERLAP_COLUMNS])
    pairs = list(itertools.combinations(names, 2))
    if not pairs:
        return ()
    row = (
        batch.agg(
            *[
                F.count_if(F.col(quote_column(a)).isNull() & F.col(quote_column(b)).isNull()).alias(f"p{i}")
                for i, (a, b) in enumerate(pairs)
            ]
        )
        .collect()[0]
        .asDict()
    )
    return tuple(NullOverlap(pair, int(row[f"p{i}"] or 0)) for i, pair in enumerate(pairs))


def preview(lh: Lakehouse, table: TableId, branch: str, limit: int = 100) -> pd.DataFrame:
    """The first ``limit`` new rows of the branch, as pandas (for display)."""
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    return batch_frame(lh.spark, lh.spark_name(table), cat.lineage(tbl, branch)).limit(limit).toPandas()


# --------------------------------------------------------------------------- what changed most
@dataclass(frozen=True)
class ColumnChange:
    """How much one column moved between main and the batch, on one standardized scale (effect sizes).

    ``aspect`` names the measure that moved most: ``null_rate`` (Cohen's h of the null shares),
    ``distribution`` (mean shift in units of main's spread, or the batch outside main's range),
    ``top_values`` (total variation distance of the top-value shares, doubled) or ``distinct``
    (new distinct values beyond main's count). Scores near 0 mean no change; 0.2 small, 0.5 medium,
    0.8 large (Cohen's conventions).
    """

    column: str
    score: float
    aspect: str
    scores: dict[str, float]


def _h(p: float, q: float) -> float:
    """Cohen's h between two proportions (0..1)."""
    return abs(
        2 * math.asin(math.sqrt(min(max(p, 0.0), 1.0))) - 2 * math.asin(math.sqrt(min(max(q, 0.0), 1.0)))
    )


def _num(v: Any) -> float | None:
    return (
        float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        else None
    )


def column_change(col: ColumnDiff | JsonObject) -> ColumnChange:
    """The standardized change of one profiled column (a :class:`ColumnDiff`, or its JSON form)."""
    if not isinstance(col, ColumnDiff):
        col = ColumnDiff.from_dict(col)
    m, b = col.main, col.batch
    scores: dict[str, float] = {}
    if m is not None:
        scores["null_rate"] = _h((m.null_pct or 0.0) / 100, (b.null_pct or 0.0) / 100)
        mq, bq = m.quantiles or {}, b.quantiles or {}
        lo, hi = _num(mq.get("0.05")), _num(mq.get("0.95"))
        spread = (hi - lo) / 3.29 if lo is not None and hi is not None and hi > lo else None
        mm, bm = _num(m.mean), _num(b.mean)
        dist = 0.0
        if spread and mm is not None and bm is not None:
            dist = abs(bm - mm) / spread
            bmin, bmax, mmin, mmax = _num(b.min), _num(b.max), _num(m.min), _num(m.max)
            if None not in (bmin, bmax, mmin, mmax) and mmax > mmin:  # type: ignore[operator]
                outside = max(0.0, mmin - bmin) + max(0.0, bmax - mmax)  # type: ignore[operator]
                dist = max(dist, min(outside / (mmax - mmin), 1.0))  # type: ignore[operator]
            b_lo, b_hi = _num(bq.get("0.05")), _num(bq.get("0.95"))
            if b_lo is not None and b_hi is not None:
                dist = max(dist, (abs(b_lo - lo) + abs(b_hi - hi)) / 2 / spread)  # type: ignore[operator]
        if dist:
            scores["distribution"] = dist
        mt, bt = m.top_values or (), b.top_values or ()
        if mt and bt:
            shares_m = {str(t.value): float(t.pct) for t in mt}
            shares_b = {str(t.value): float(t.pct) for t in bt}
            keys = set(shares_m) | set(shares_b)
            scores["top_values"] = sum(abs(shares_b.get(k, 0.0) - shares_m.get(k, 0.0)) for k in keys) / 100.0
        dm, db = m.distinct or 0, b.distinct or 0
        if dm and db > dm:
            scores["distinct"] = min((db - dm) / dm, 1.0)
    if not scores:
        return ColumnChange(col.name, 0.0, "none", {})
    aspect = max(scores, key=lambda k: scores[k])
    return ColumnChange(
        col.name, round(scores[aspect], 4), aspect, {k: round(v, 4) for k, v in scores.items()}
    )


def rank_changes(columns: Sequence[ColumnDiff | JsonObject]) -> list[ColumnChange]:
    """Every column's change, largest first (ties by column name)."""
    return sorted((column_change(c) for c in columns), key=lambda c: (-c.score, c.column))


# --------------------------------------------------------------------------- what moved, for one reason
SMALL_CHANGE = 0.1  # a change below this is no noticeable move (Cohen's "small" is 0.2)
SAME_ROWS = 0.95  # columns NULL on the same batch rows: overlap (Jaccard) of their NULL rows at least this
# The measure a failed check judges a column by: its chart shows that measure (a failing not_null column
# its null rate, never its quantiles). Checks without one (unique, expression, pattern...) change nothing.
CHECK_MEASURES: dict[str, str] = {
    NotNull.type: "null_rate",
    Range.type: "distribution",
    AcceptedValues.type: "top_values",
    References.type: "top_values",
}


@dataclass(frozen=True)
class ChangeGroup:
    """Columns that moved for one reason, shown as one chart: by ``aspect`` with ``score`` (the largest of
    its columns'), ``columns`` largest move first. Several columns only for ``null_rate``: their NULL rows
    in the batch are the same rows (:data:`SAME_ROWS`). ``checks``: the failed checks that judge these
    columns by this measure."""

    columns: tuple[str, ...]
    aspect: str
    score: float
    checks: tuple[str, ...] = ()

    @property
    def same_rows(self) -> bool:
        """True when several columns moved on the same rows (one cause, one chart)."""
        return len(self.columns) > 1


def _chartable(col: ColumnDiff, aspect: str) -> bool:
    """Whether ``col`` has the figures a chart of ``aspect`` draws."""
    if aspect == "null_rate":
        return True
    if aspect == "distribution":
        return bool(col.batch.quantiles or (col.main and col.main.quantiles))
    if aspect == "top_values":
        return bool(col.batch.top_values or (col.main and col.main.top_values))
    return aspect == "distinct"


def _same_rows(diff: DiffResult, a: str, b: str) -> bool:
    """Whether the batch rows NULL in ``a`` and in ``b`` are the same rows (Jaccard at least SAME_ROWS)."""
    both = next((o.rows for o in diff.null_overlaps if set(o.columns) == {a, b}), None)
    ca, cb = diff.column(a), diff.column(b)
    if both is None or ca is None or cb is None:
        return False
    union = ca.batch.nulls + cb.batch.nulls - both
    return union > 0 and both / union >= SAME_ROWS


def change_groups(diff: DiffResult, checks: Sequence[CheckResult] = ()) -> list[ChangeGroup]:
    """What moved, largest score first, one entry per reason: what the review charts.

    A column counts when its change is at least :data:`SMALL_CHANGE`, or when a failed check (of
    ``checks``, those that block a publish) judges it. A failed check with a measure
    (:data:`CHECK_MEASURES`) sets the measure the column is shown and scored by. Columns whose null rate
    moved on the same batch rows (their overlap from :attr:`DiffResult.null_overlaps`, Jaccard at least
    :data:`SAME_ROWS`, every pair of the group) form one group: one cause, one chart.
    """
    judged: dict[str, list[tuple[str, str]]] = {}
    for c in checks:
        if c.status.blocks_publish:
            for name in c.columns or ():
                judged.setdefault(name, []).append((c.name, CHECK_MEASURES.get(c.type, "")))
    picked: list[tuple[float, str, str, tuple[str, ...]]] = []  # score, column, aspect, checks
    for col in diff.columns:
        ch = column_change(col)
        aspect, score = ch.aspect, ch.score
        by_check = judged.get(col.name, [])
        for _, measure in by_check:
            if measure and _chartable(col, measure):
                aspect, score = measure, ch.scores.get(measure, 0.0)
                break
        names = tuple(name for name, measure in by_check if measure == aspect)
        if aspect != "none" and (score >= SMALL_CHANGE or names) and _chartable(col, aspect):
            picked.append((score, col.name, aspect, names))
    picked.sort(key=lambda p: (-p[0], p[1]))
    groups: list[tuple[list[str], str, float, list[str]]] = []
    for score, name, aspect, names in picked:
        home = next(
            (
                g
                for g in groups
                if aspect == "null_rate" == g[1] and all(_same_rows(diff, name, other) for other in g[0])
            ),
            None,
        )
        if home is None:
            groups.append(([name], aspect, score, list(names)))
        else:
            home[0].append(name)
            home[3].extend(n for n in names if n not in home[3])
    return [
        ChangeGroup(tuple(cols), aspect, round(score, 4), tuple(names))
        for cols, aspect, score, names in groups
    ]
