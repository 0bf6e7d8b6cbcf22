"""Main's column profile metadata-first: exact counts and bounds from the manifests, the rest from a bounded sample.

A full scan of main to profile it costs minutes on a large table (HLL sketches, quantiles and
top values over every row). Most of a profile is already in Iceberg's manifests, exactly: each
data file records its row count and, per column (field id), its null count and lower/upper
bounds. Summed and min/maxed over the snapshot's data files they give the column's rows, nulls,
min and max without reading a row. Where the metadata is not exact, the profile says so:

- string bounds are truncated (Iceberg's default metrics mode is ``truncate(16)``): a truncated
  lower bound is a prefix (still a lower bound) and a truncated upper bound is a prefix with its
  last character incremented (still an upper bound); min/max are exact only when the deciding
  bound is shorter than the truncation length (or the column's mode is ``full``);
- metrics mode ``counts`` keeps no bounds and ``none`` no counts: those fields come from the sample;
- float/double bounds exclude NaN (Spark's max of a column holding NaN is NaN): max is exact only
  when every file reports zero NaN values;
- delete files (position or equality deletes) make every count inexact: then there is no
  metadata profile and the caller scans main.

Distinct counts come from Puffin NDV sketches (``apache-datasketches-theta-v1`` blobs, written by
Spark's ``compute_table_stats``) for the same snapshot where present, else from the sample; mean,
quantiles and top values come from the sample. Everything that does not come exactly from the
metadata is marked ``approximate`` (per column, per field). The sample reads a bounded number of
rows from a bounded number of data files chosen evenly over the snapshot's files (PyIceberg +
PyArrow in this process: no Spark job, never a full scan).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wap_core.identifiers import TableId
from wap_core.lake import catalog as cat
from wap_core.lake.batch import snapshot_frame
from wap_core.lake.profile import (
    APPROXIMATE,
    EXACT,
    FIELDS,
    ColumnProfile,
    ProfileSample,
    Quantiles,
    TableProfile,
    TopValue,
)
from wap_core.values import jsonable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType


log = logging.getLogger(__name__)

SAMPLE_ROWS = 200_000  # rows of main the sample keeps (at most)
SAMPLE_FILES = 32  # data files the sample reads (at most), chosen evenly over the snapshot's files
SCAN_MAX_ROWS = (
    200_000  # a main this small is scanned exactly instead (seconds; gives mergeable HLL sketches)
)
DEFAULT_TRUNCATE = 16  # Iceberg's default metrics mode: truncate(16)
THETA_BLOB = "apache-datasketches-theta-v1"
_MODE = re.compile(r"(none|counts|full)|truncate\((\d+)\)")

# The shape of a column profile, shared by the metadata profile (here) and Spark's (analysis.diff).
QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
TOP_N = 5
TOP_VALUES_MAX_DISTINCT = 10_000  # top values of a column with more distinct values say little (each is rare) and cost a big shuffle
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_CATEGORICAL = ("string", "boolean", "date")


def column_kind(type_str: str) -> str:
    """A column's kind for profiling by its Spark type string: numeric, categorical, temporal or other."""
    if type_str.startswith(_NUMERIC):
        return "numeric"
    if type_str.startswith(_CATEGORICAL):
        return "categorical"
    if type_str.startswith("timestamp"):
        return "temporal"
    return "other"


@dataclass(frozen=True)
class MetricsMode:
    """A column's ``write.metadata.metrics`` mode: none, counts, truncate(length) or full."""

    kind: str
    length: int | None = None

    @property
    def has_counts(self) -> bool:
        """True when the mode keeps value and null counts."""
        return self.kind != "none"

    @property
    def has_bounds(self) -> bool:
        """True when the mode keeps lower and upper bounds."""
        return self.kind in ("truncate", "full")


def metrics_mode(properties: dict[str, str], column: str) -> MetricsMode:
    """The mode the table's properties give ``column`` (per-column key, else the default, else truncate(16))."""
    raw = properties.get(f"write.metadata.metrics.column.{column}") or properties.get(
        "write.metadata.metrics.default"
    )
    m = _MODE.fullmatch((raw or "").strip().lower())
    if m is None:
        return MetricsMode("truncate", DEFAULT_TRUNCATE)
    if m.group(1):
        return MetricsMode(m.group(1))
    return MetricsMode("truncate", int(m.group(2)))


def puffin_ndv(tbl: Table, snapshot_id: int) -> dict[int, int]:
    """{field id: NDV} from the table's Puffin statistics of ``snapshot_id`` (theta sketches), if any."""
    out: dict[int, int] = {}
    for stats in tbl.metadata.statistics:
        if stats.snapshot_id != snapshot_id:
            continue
        for blob in stats.blob_metadata:
            ndv = (blob.properties or {}).get("ndv")
            if blob.type == THETA_BLOB and len(blob.fields) == 1 and ndv is not None and ndv.isdigit():
                out[blob.fields[0]] = int(ndv)
    return out


def evenly(items: Sequence[Any], k: int) -> list[Any]:
    """``k`` items spread evenly over ``items`` (all of them when there are no more than ``k``)."""
    n = len(items)
    if n <= k:
        return list(items)
    return [items[(2 * i + 1) * n // (2 * k)] for i in range(k)]


def read_sample(tbl: Table, schema: Schema, tasks: Sequence[FileScanTask], rows: int) -> pa.Table:
    """At most ``rows`` rows from ``tasks``' files, evenly many from each (the first rows of each file).

    Each file's columns are matched to ``schema`` by field id (renamed, added, reordered columns
    read right) and only the pages holding those rows are decoded.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    if not tasks or rows <= 0:
        return schema_to_pyarrow(schema).empty_table()
    quota = max(1, math.ceil(rows / len(tasks)))
    with ThreadPoolExecutor(max_workers=4) as pool:  # file I/O and Parquet decoding release the GIL
        parts = list(pool.map(lambda t: _read_head(tbl, schema, t, quota), tasks))
    return pa.concat_tables(parts, promote_options="permissive").slice(0, rows)


def _read_head(tbl: Table, schema: Schema, task: FileScanTask, rows: int) -> pa.Table:
    """The first ``rows`` rows of one data file, projected onto ``schema`` by field id."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
    from pyiceberg.manifest import FileFormat

    target = schema_to_pyarrow(schema)
    if task.file.file_format == FileFormat.PARQUET:
        with tbl.io.new_input(task.file.file_path).open() as fin:
            pf = pq.ParquetFile(fin)
            by_id = {
                int(f.metadata[b"PARQUET:field_id"]): f.name
                for f in pf.schema_arrow
                if f.metadata and b"PARQUET:field_id" in f.metadata
            }
            wanted = [by_id[f.field_id] for f in schema.fields if f.field_id in by_id]
            if by_id:
                batch = next(pf.iter_batches(batch_size=rows, columns=wanted), None)
                n = batch.num_rows if batch is not None else 0
                cols = []
                for f, af in zip(schema.fields, target, strict=False):
                    if batch is None or f.field_id not in by_id:
                        cols.append(pa.nulls(n, af.type))  # a column added after this file was written
                        continue
                    col = batch.column(by_id[f.field_id])
                    # promoted types (int -> long), string -> large_string; nested types whose inner names
                    # differ stay as they are: their text form is all the sample uses
                    with suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        col = col.cast(af.type)
                    cols.append(col)
                return pa.Table.from_arrays(cols, names=[f.name for f in schema.fields])
    # other formats, or Parquet without field ids (imported files, name-mapped): PyIceberg's own projection
    return ArrowScan(tbl.metadata, tbl.io, schema, AlwaysTrue(), limit=rows).to_table([task])


@dataclass(frozen=True)
class _FileStats:
    """One column's metadata over the snapshot's data files."""

    nulls: int | None  # None: some file has no null count for the column
    lower: Any
    upper: Any
    bounds_complete: bool  # every file holding a non-null value has both bounds
    nan_free: bool  # every file reports a NaN count of 0 (floating point only)


def _column_stats(files: Sequence[DataFile], field_id: int, ftype: Any, floating: bool) -> _FileStats:
    from pyiceberg.conversions import from_bytes

    nulls: int | None = 0
    lower: Any = None
    upper: Any = None
    complete = True
    nan_free = True
    for f in files:
        nc = (f.null_value_counts or {}).get(field_id)
        if nc is None:
            nulls = None
        elif nulls is not None:
            nulls += nc
        has_values = nc is None or nc < f.record_count
        if floating and (f.nan_value_counts or {}).get(field_id) != 0:
            nan_free = False
        lo, hi = (f.lower_bounds or {}).get(field_id), (f.upper_bounds or {}).get(field_id)
        if lo is None or hi is None:
            complete = complete and not has_values
            continue
        lv, hv = from_bytes(ftype, lo), from_bytes(ftype, hi)
        lower = lv if lower is None or lv < lower else lower
        upper = hv if upper is None or hv > upper else upper
    return _FileStats(nulls, lower, upper, complete, nan_free)


def _to_spark_value(value: Any, spark_type: DataType) -> Any:
    """A decoded Iceberg bound as Spark's ``collect()`` returns the column's value (then JSON-able)."""
    if value is None:
        return None
    if spark_type.needConversion():  # dates (days) and timestamps (micros): Spark's own conversion
        return jsonable(spark_type.fromInternal(value))
    if isinstance(value, (bytes, bytearray)):
        return None
    return jsonable(value)  # Decimal as float (as the Spark profile's), UUID as text


def _sample_distinct(values: pa.Array, non_null_total: int) -> int:
    """Distinct count of the column from the sample (Haas & Stokes' Duj1 estimator), within [seen, non-null rows]."""
    import pyarrow as pa
    import pyarrow.compute as pc

    vals = values.drop_null()
    n = len(vals)
    if n == 0:
        return 0
    try:
        counts = pc.struct_field(pc.value_counts(vals), [1])
    except pa.ArrowNotImplementedError:  # nested types: count their text form (bounded sample)
        seen: dict[str, int] = {}
        for v in vals.to_pylist():
            seen[str(v)] = seen.get(str(v), 0) + 1
        counts = pa.array(list(seen.values()), pa.int64())
    d = len(counts)
    f1 = int(pc.sum(pc.equal(counts, 1)).as_py() or 0)
    big_n = max(non_null_total, n)
    estimate = n * d / (n - f1 + f1 * n / big_n) if n - f1 + f1 * n / big_n > 0 else d
    return int(min(max(round(estimate), d), big_n))


def _top_values(values: pa.Array, rows: int, sample_rows: int, top_n: int) -> tuple[TopValue, ...] | None:
    """The ``top_n`` most frequent values in the sample, as text, counts scaled to the table's rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if sample_rows == 0:
        return None
    vc = pc.value_counts(values.cast(pa.string()))
    counted = pa.table({"value": vc.field("values"), "count": vc.field("counts")})
    top = pc.select_k_unstable(counted, top_n, [("count", "descending"), ("value", "ascending")])
    out = []
    for d in counted.take(top).to_pylist():
        pct = 100.0 * d["count"] / sample_rows
        out.append(TopValue(d["value"], round(pct * rows / 100.0), round(pct, 4)))
    out.sort(key=lambda t: (-t.pct, t.value is None, str(t.value)))
    return tuple(out)


def metadata_profile(
    tbl: Table,
    table: TableId,
    snapshot_id: int,
    spark: SparkSession,
    spark_name: str,
    *,
    sample_rows: int | None = None,
    sample_files: int | None = None,
    scan_max_rows: int | None = None,
    max_top_columns: int = 12,
) -> tuple[TableProfile | None, str]:
    """Main's profile at ``snapshot_id`` from manifests + a bounded sample: ``(profile, basis)``.

    ``tbl``: the table's metadata (``table`` names it in the log); ``spark`` gives Spark's types of the
    snapshot of the table it knows as ``spark_name`` (an analysis, no job).

    ``profile`` is None when the metadata cannot give it (delete files, or a main of at most
    ``scan_max_rows`` rows, cheaper to scan exactly); ``basis`` then says why the caller should scan.
    The profile has the same shape as :func:`wap_core.analysis.diff.profile_frame`'s, with each column's
    ``accuracy`` ({field: "exact"|"approximate"}) and ``approximate`` (the approximate fields).
    The limits default to the module's ``SAMPLE_ROWS``, ``SAMPLE_FILES`` and ``SCAN_MAX_ROWS``.
    """
    sample_rows = SAMPLE_ROWS if sample_rows is None else sample_rows
    sample_files = SAMPLE_FILES if sample_files is None else sample_files
    scan_max_rows = SCAN_MAX_ROWS if scan_max_rows is None else scan_max_rows
    found = _data_files(tbl, snapshot_id, scan_max_rows)
    if isinstance(found, str):
        return None, found
    tasks, files, rows = found

    spark_schema = snapshot_frame(
        spark, spark_name, snapshot_id
    ).schema  # analysis only: Spark's types, no job
    chosen = evenly(tasks, sample_files)
    schema = cat.schema_at(tbl, snapshot_id)
    sample = read_sample(tbl, schema, chosen, sample_rows)
    n = sample.num_rows
    cols, puffin_cols = _profile_columns(
        tbl, snapshot_id, schema, spark_schema, sample, files, rows, max_top_columns
    )
    basis = (
        f"rows, nulls, min and max from the manifests of {len(files):,} data files; distinct, mean, quantiles and "
        f"top values from a sample of {n:,} rows in {len(chosen)} files"
        + (f"; distinct from Puffin NDV sketches for {puffin_cols} column(s)" if puffin_cols else "")
    )
    log.info("metadata profile of %s at %s: %s", table, snapshot_id, basis)
    prof = TableProfile(rows, cols, "metadata", basis, ProfileSample(n, len(chosen), len(files)))
    return prof, basis


def _data_files(
    tbl: Table, snapshot_id: int, scan_max_rows: int
) -> tuple[list[FileScanTask], list[DataFile], int] | str:
    """The snapshot's scan tasks, data files and row count; or why its profile needs a full scan."""
    snap = tbl.metadata.snapshot_by_id(snapshot_id)
    if snap is None:
        return f"snapshot {snapshot_id} not in the table's metadata"
    tasks = list(tbl.scan(snapshot_id=snapshot_id).plan_files())
    deletes = {d.file_path for t in tasks for d in t.delete_files}
    if deletes:
        return f"full scan: {len(deletes)} delete file(s) make the manifests' counts inexact"
    files = [t.file for t in tasks]
    rows = sum(f.record_count for f in files)
    if rows <= scan_max_rows:
        return f"full scan: main has {rows:,} rows (no more than {scan_max_rows:,})"
    return tasks, files, rows


def _profile_columns(
    tbl: Table,
    snapshot_id: int,
    schema: Schema,
    spark_schema: StructType,
    sample: pa.Table,
    files: list[DataFile],
    rows: int,
    max_top_columns: int,
) -> tuple[dict[str, ColumnProfile], int]:
    """Each column's profile, top values for the first ``max_top_columns`` categorical ones; and how
    many columns took their distinct count from a Puffin sketch."""
    import pyarrow as pa

    ndv = puffin_ndv(tbl, snapshot_id)
    props = dict(tbl.properties)
    n = sample.num_rows
    cols: dict[str, ColumnProfile] = {}
    cats: list[str] = []
    puffin_cols = 0
    for sf in spark_schema.fields:
        name = sf.name
        values = sample.column(name).combine_chunks() if name in sample.column_names else pa.nulls(n)
        col = _ColumnFacts(sf, schema.find_field(name), files, rows, values, metrics_mode(props, name))
        top_wanted = len(cats) < max_top_columns
        cols[name], from_puffin = col.profile(ndv, top_wanted)
        puffin_cols += from_puffin
        if (
            cols[name].kind == "categorical"
            and top_wanted
            and (cols[name].distinct or 0) <= TOP_VALUES_MAX_DISTINCT
        ):
            cats.append(name)
    return cols, puffin_cols


class _ColumnFacts:
    """One column of a metadata profile: the manifests' statistics first, the bounded sample for the rest.

    Each measure records whether it is exact (from every data file's statistics) or approximate
    (from the sample, or a sketch).
    """

    def __init__(
        self, sf: Any, field: Any, files: list[Any], rows: int, values: Any, mode: MetricsMode
    ) -> None:
        from pyiceberg.types import DoubleType, FloatType, PrimitiveType

        self.sf, self.field, self.rows, self.values, self.mode = sf, field, rows, values, mode
        self.typ = sf.dataType.simpleString()
        self.kind = column_kind(self.typ)
        self.floating = isinstance(field.field_type, (FloatType, DoubleType))
        primitive = isinstance(field.field_type, PrimitiveType)
        self.st = _column_stats(files, field.field_id, field.field_type, self.floating) if primitive else None
        self.acc = dict.fromkeys(FIELDS, EXACT)

    def profile(self, ndv: dict[int, int], top_wanted: bool) -> tuple[ColumnProfile, bool]:
        """``(the column's profile, whether its distinct count came from a Puffin sketch)``."""
        rows, acc = self.rows, self.acc
        nulls = self._nulls()
        non_null = rows - nulls
        mn, mx = self._bounds(non_null)
        distinct, from_puffin = self._distinct(ndv, non_null, mn, mx)
        mean, quantiles = self._moments(non_null, mn, mx)
        top = None
        if self.kind == "categorical" and top_wanted and distinct <= TOP_VALUES_MAX_DISTINCT:
            n = len(self.values)
            top = _top_values(self.values, rows, n, TOP_N) if rows else None
            acc["top_values"] = APPROXIMATE if top else EXACT
        return ColumnProfile(
            type=self.typ,
            kind=self.kind,
            rows=rows,
            nulls=nulls,
            null_pct=round(100.0 * nulls / rows, 4) if rows else 0.0,
            distinct=distinct,
            min=mn,
            max=mx,
            mean=mean,
            quantiles=quantiles,
            top_values=top,
            accuracy=dict(acc),
            approximate=tuple(f for f in FIELDS if acc[f] == APPROXIMATE),
        ), from_puffin

    def _nulls(self) -> int:
        nulls = self.st.nulls if self.st is not None and self.mode.has_counts else None
        if nulls is None:
            n = len(self.values)
            nulls = round(self.rows * self.values.null_count / n) if n else 0
            self.acc["nulls"] = self.acc["null_pct"] = APPROXIMATE
        return int(nulls)

    def _bounds(self, non_null: int) -> tuple[Any, Any]:
        import pyarrow.compute as pc

        st, mode, acc, typ = self.st, self.mode, self.acc, self.typ
        if not (self.kind in ("numeric", "temporal") or typ in ("string", "date")):
            return None, None
        if st is not None and mode.has_bounds and st.lower is not None:
            mn, mx = _to_spark_value(st.lower, self.sf.dataType), _to_spark_value(st.upper, self.sf.dataType)
            exact_min = exact_max = st.bounds_complete
            if typ == "string" and mode.kind == "truncate":
                limit = mode.length or DEFAULT_TRUNCATE
                exact_min = exact_min and len(st.lower) < limit
                exact_max = exact_max and len(st.upper) < limit
            if self.floating:
                exact_max = exact_max and st.nan_free
            acc["min"] = EXACT if exact_min else APPROXIMATE
            acc["max"] = EXACT if exact_max else APPROXIMATE
            return mn, mx
        mn = mx = None
        if non_null:
            nn_vals = self.values.drop_null()
            if len(nn_vals):
                mm = pc.min_max(nn_vals).as_py()
                mn, mx = jsonable(mm["min"]), jsonable(mm["max"])
            acc["min"] = acc["max"] = APPROXIMATE
        return mn, mx

    def _distinct(self, ndv: dict[int, int], non_null: int, mn: Any, mx: Any) -> tuple[int, bool]:
        acc, fid = self.acc, self.field.field_id
        if non_null == 0 and acc["nulls"] == EXACT:
            return 0, False
        if fid in ndv:
            acc["distinct"] = APPROXIMATE  # a theta sketch's estimate over every row
            return min(ndv[fid], non_null), True
        if acc["min"] == acc["max"] == EXACT and mn is not None and mn == mx:
            return 1, False
        acc["distinct"] = APPROXIMATE
        return _sample_distinct(self.values, non_null), False

    def _moments(self, non_null: int, mn: Any, mx: Any) -> tuple[float | None, Quantiles | None]:
        import pyarrow as pa
        import pyarrow.compute as pc

        acc = self.acc
        if self.kind != "numeric":
            return None, None
        acc["mean"] = acc["quantiles"] = APPROXIMATE
        nums = self.values.drop_null().cast(pa.float64())
        if not len(nums):
            if non_null == 0 and acc["nulls"] == EXACT:
                acc["mean"] = acc["quantiles"] = EXACT
            return None, None
        mean = float(pc.mean(nums).as_py())
        qs = pc.quantile(nums, q=list(QUANTILES), interpolation="lower").to_pylist()
        quantiles = {str(q): float(v) for q, v in zip(QUANTILES, qs, strict=False)}
        if acc["min"] == EXACT and mn is not None:
            quantiles["0.0"] = float(mn)
        if acc["max"] == EXACT and mx is not None:
            quantiles["1.0"] = float(mx)
        return mean, quantiles
