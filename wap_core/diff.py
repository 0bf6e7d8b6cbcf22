"""Branch vs main: what the batch adds, computed by Spark on the new rows only.

Main's column profile is computed once per main snapshot and cached in the
catalog database (``wap_profiles``), so reviewing ten branches of one table
profiles main once. It is built metadata-first (``wap_core.metaprofile``): rows, nulls,
min and max from the manifests, the rest from a bounded sample, each field of each
column marked ``exact`` or ``approximate``; only a small main or one with delete files
is scanned.
"""

from __future__ import annotations

import base64
import itertools
import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from wap_core import catalog as cat
from wap_core.batch import batch_frame
from wap_core.identifiers import MAIN, TableId, quote_column
from wap_core.metaprofile import APPROXIMATE, EXACT, FIELDS
from wap_core.values import jsonable

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from wap_core.lakehouse import Lakehouse

HLL_LG_K = 12
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
MAX_MERGE_DEPTH = 20  # publishes in a row whose profiles merge without a rescan of main
QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
TOP_N = 5
TOP_VALUES_MAX_DISTINCT = 10_000  # top values of a column with more distinct values say little (each is rare) and cost a big shuffle
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_CATEGORICAL = ("string", "boolean", "date")


def _kind(type_str: str) -> str:
    if type_str.startswith(_NUMERIC):
        return "numeric"
    if type_str.startswith(_CATEGORICAL):
        return "categorical"
    if type_str.startswith("timestamp"):
        return "temporal"
    return "other"


def profile_frame(df: DataFrame, max_top_columns: int = 12) -> dict[str, Any]:
    """Per-column profile in two Spark jobs: one aggregate pass, one top-values pass."""
    from pyspark.sql import functions as F

    fields = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    aggs = [F.count(F.lit(1)).alias("_rows")]
    for i, (name, typ) in enumerate(fields):
        c = F.col(quote_column(name))
        kind = _kind(typ)
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
    row = df.agg(*aggs).collect()[0].asDict()
    rows = int(row["_rows"])
    cols: dict[str, dict[str, Any]] = {}
    for i, (name, typ) in enumerate(fields):
        nn = int(row[f"nn{i}"])
        # every row read: counts, min, max, mean and top values are exact; the distinct count is an HLL
        # sketch's estimate and the quantiles percentile_approx's
        acc = {
            f: APPROXIMATE if f == "distinct" or (f == "quantiles" and row.get(f"q{i}")) else EXACT
            for f in FIELDS
        }
        cols[name] = {
            "type": typ,
            "kind": _kind(typ),
            "rows": rows,
            "nulls": rows - nn,
            "null_pct": round(100.0 * (rows - nn) / rows, 4) if rows else 0.0,
            "distinct": int(row[f"d{i}"] or 0),
            "hll": base64.b64encode(bytes(row[f"h{i}"])).decode("ascii")
            if row.get(f"h{i}") is not None
            else None,
            "min": jsonable(row.get(f"mn{i}")),
            "max": jsonable(row.get(f"mx{i}")),
            "mean": jsonable(row.get(f"avg{i}")),
            "quantiles": dict(
                zip([str(q) for q in QUANTILES], jsonable(row.get(f"q{i}")) or [], strict=False)
            )
            if row.get(f"q{i}")
            else None,
            "top_values": None,
            "accuracy": acc,
            "approximate": [f for f in FIELDS if acc[f] == APPROXIMATE],
        }
    cats = [
        n for n, t in fields if _kind(t) == "categorical" and cols[n]["distinct"] <= TOP_VALUES_MAX_DISTINCT
    ][:max_top_columns]
    if cats and rows:
        pairs = F.explode(
            F.array(
                *[
                    F.struct(F.lit(n).alias("col"), F.col(quote_column(n)).cast("string").alias("val"))
                    for n in cats
                ]
            )
        )
        counted = (
            df.select(pairs.alias("p"))
            .groupBy(F.col("p.col").alias("col"), F.col("p.val").alias("val"))
            .count()
        )
        from pyspark.sql.window import Window

        w = Window.partitionBy("col").orderBy(F.desc("count"), F.asc_nulls_last("val"))
        for r in counted.withColumn("rk", F.row_number().over(w)).where(F.col("rk") <= TOP_N).collect():
            tv = cols[r["col"]].setdefault("top_values", None) or []
            tv.append(
                {"value": r["val"], "count": int(r["count"]), "pct": round(100.0 * int(r["count"]) / rows, 4)}
            )
            cols[r["col"]]["top_values"] = tv
        for n in cats:
            if cols[n]["top_values"]:
                cols[n]["top_values"].sort(key=lambda d: -d["count"])
    return {"rows": rows, "columns": cols}


def main_profile(lh: Lakehouse, table: TableId, snapshot_id: int | None) -> dict[str, Any] | None:
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
        from wap_core.metaprofile import metadata_profile

        prof, basis = metadata_profile(lh, table, snapshot_id)
        if prof is None:
            prof = profile_frame(lh.read_snapshot(table, snapshot_id))
            prof["source"], prof["basis"] = "scan", basis
        lh.profiles.save_profile(str(table), snapshot_id, prof)
    return prof


def cached_main_profile(lh: Lakehouse, table: TableId, snapshot_id: int | None) -> dict[str, Any] | None:
    """Main's profile at ``snapshot_id`` if stored, or merged from stored profiles; None rather than a scan."""
    if snapshot_id is None:
        return None
    return _cached_or_merged(lh, table, snapshot_id, MAX_MERGE_DEPTH)


def _cached_or_merged(lh: Lakehouse, table: TableId, snapshot_id: int, depth: int) -> dict[str, Any] | None:
    cached = lh.profiles.load_profile(str(table), snapshot_id)
    if cached is not None or depth <= 0:
        return cached
    batch = lh.profiles.load_batch_profile(str(table), snapshot_id)
    if batch is None:
        return None
    fork, batch_prof = batch
    base = _cached_or_merged(lh, table, fork, depth - 1)
    if base is None or set(base["columns"]) != set(batch_prof["columns"]):
        return None
    merged = merge_profiles(lh.spark, base, batch_prof)
    merged["source"] = f"merged: main at {fork} + batch ({fork}, {snapshot_id}]"
    merged["basis"] = (
        f"merged from main's profile at {fork} ({str(base.get('source', 'scan')).split(':')[0]}) and the published batch's"
    )
    lh.profiles.save_profile(str(table), snapshot_id, merged)
    return merged


def merge_profiles(spark: SparkSession, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The profile of the union of two disjoint row sets, from their profiles (one tiny Spark query)."""
    rows = a["rows"] + b["rows"]
    names = list(a["columns"])
    unions = []
    for i, n in enumerate(names):
        ha, hb = a["columns"][n].get("hll"), b["columns"][n].get("hll")
        if ha and hb and _BASE64.fullmatch(ha) and _BASE64.fullmatch(hb):  # nothing but base64 reaches SQL
            u = f"hll_union(unbase64('{ha}'), unbase64('{hb}'))"
            unions += [f"hll_sketch_estimate({u}) AS d{i}", f"{u} AS h{i}"]
    merged_hll = spark.sql("SELECT " + ", ".join(unions)).collect()[0].asDict() if unions else {}
    cols: dict[str, dict[str, Any]] = {}
    for i, n in enumerate(names):
        ca, cb = a["columns"][n], b["columns"][n]
        acc_a, acc_b = accuracy(ca), accuracy(cb)
        acc = {f: EXACT if acc_a[f] == acc_b[f] == EXACT else APPROXIMATE for f in FIELDS}
        nn_a, nn_b = ca["rows"] - ca["nulls"], cb["rows"] - cb["nulls"]
        nulls = ca["nulls"] + cb["nulls"]
        col = dict(ca)
        col.update(
            {
                "rows": rows,
                "nulls": nulls,
                "null_pct": round(100.0 * nulls / rows, 4) if rows else 0.0,
                "min": _pick(ca["min"], cb["min"], min),
                "max": _pick(ca["max"], cb["max"], max),
                "mean": ((ca["mean"] or 0) * nn_a + (cb["mean"] or 0) * nn_b) / (nn_a + nn_b)
                if ca.get("mean") is not None and cb.get("mean") is not None and nn_a + nn_b
                else _pick(ca.get("mean"), cb.get("mean"), max),
            }
        )
        acc["distinct"] = APPROXIMATE  # a union of HLL sketches, or without a sketch of one side an estimate
        if f"d{i}" in merged_hll:
            col["distinct"] = int(merged_hll[f"d{i}"] or 0)
            col["hll"] = base64.b64encode(bytes(merged_hll[f"h{i}"])).decode("ascii")
        else:
            # no sketch of one side (a metadata-first profile of main): value ranges that do not overlap
            # cannot share a value, so the counts add up; otherwise the larger is a lower bound
            disjoint = _disjoint(ca, acc_a, cb, acc_b)
            col["distinct"] = (
                (ca["distinct"] or 0) + (cb["distinct"] or 0)
                if disjoint
                else max(ca["distinct"] or 0, cb["distinct"] or 0)
            )
            col["hll"] = None
        if ca.get("quantiles") and cb.get("quantiles"):
            col["quantiles"] = _merge_quantiles(ca["quantiles"], nn_a, cb["quantiles"], nn_b)
            acc["quantiles"] = APPROXIMATE
        else:
            col["quantiles"] = ca.get("quantiles") or cb.get("quantiles")
        if ca.get("top_values") or cb.get("top_values"):
            counts: dict[Any, int] = {}
            for tv in (ca.get("top_values") or []) + (cb.get("top_values") or []):
                counts[tv["value"]] = counts.get(tv["value"], 0) + tv["count"]
            top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[:TOP_N]
            col["top_values"] = [
                {"value": v, "count": c, "pct": round(100.0 * c / rows, 4) if rows else 0.0} for v, c in top
            ]
            acc["top_values"] = APPROXIMATE
        col["accuracy"], col["approximate"] = acc, [f for f in FIELDS if acc[f] == APPROXIMATE]
        cols[n] = col
    return {"rows": rows, "columns": cols}


def accuracy(col: dict[str, Any]) -> dict[str, str]:
    """``{field: "exact"|"approximate"}`` of a profiled column (profiles cached before the markers: derived)."""
    acc = col.get("accuracy")
    if isinstance(acc, dict) and set(acc) >= set(FIELDS):
        return {f: acc[f] for f in FIELDS}
    approx = {*(col.get("approximate") or []), "distinct", "quantiles"}  # HLL and percentile_approx estimates
    return {f: APPROXIMATE if f in approx else EXACT for f in FIELDS}


def _disjoint(ca: dict[str, Any], acc_a: dict[str, str], cb: dict[str, Any], acc_b: dict[str, str]) -> bool:
    """Whether two columns' exact value ranges do not overlap (then no value is in both)."""
    if not all(acc[f] == EXACT for acc in (acc_a, acc_b) for f in ("min", "max")):
        return False
    if ca.get("min") is None or cb.get("min") is None:
        return True  # one side has no values at all
    try:
        return bool(cb["min"] > ca["max"] or cb["max"] < ca["min"])
    except TypeError:
        return False


def _public(profile: dict[str, Any]) -> dict[str, Any]:
    """A profile without its sketches (internal merge state, not for display or JSON)."""
    return {
        **profile,
        "columns": {n: {k: v for k, v in c.items() if k != "hll"} for n, c in profile["columns"].items()},
    }


def _pick(x: Any, y: Any, fn: Any) -> Any:
    if x is None:
        return y
    if y is None:
        return x
    try:
        return fn(x, y)
    except TypeError:
        return x


def _merge_quantiles(qa: dict[str, float], na: int, qb: dict[str, float], nb: int) -> dict[str, float]:
    """Quantiles of a mixture of two distributions known by their quantiles (piecewise-linear CDFs)."""

    def cdf(q: dict[str, float], x: float) -> float:
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


@dataclass
class DiffResult:
    table: str
    branch: str
    fork_snapshot_id: int | None
    head_snapshot_id: int
    main_snapshot_id: int | None
    main_moved: bool
    pure_append: bool
    rows_added: int
    rows_deleted: int
    schema_changes: list[dict[str, Any]]
    columns: list[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)
    # how main's profile was made: source (scan | metadata | merged: ...), basis (in words), sample (rows, files)
    main_profile: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def schema_changes(tbl: Table, branch: str) -> list[dict[str, Any]]:
    """Schema of the branch head vs main head (by each snapshot's schema id), from metadata."""
    main_s = cat.schema_at(tbl, cat.ref_snapshot_id(tbl, MAIN))
    br_s = cat.schema_at(tbl, tbl.metadata.refs[branch].snapshot_id)
    return list(
        compare_columns(
            {f.name: str(f.field_type) for f in main_s.fields},
            {f.name: str(f.field_type) for f in br_s.fields},
        )
    )


def compare_columns(left: dict[str, str], right: dict[str, str]) -> tuple[dict[str, Any], ...]:
    """Column changes from ``left`` (main) to ``right`` (branch): removed, type_changed, added."""
    out: list[dict[str, Any]] = []
    for c, t in left.items():
        if c not in right:
            out.append({"column": c, "kind": "removed", "old_type": t, "new_type": None})
        elif right[c] != t:
            out.append({"column": c, "kind": "type_changed", "old_type": t, "new_type": right[c]})
    out += [
        {"column": c, "kind": "added", "old_type": None, "new_type": t}
        for c, t in right.items()
        if c not in left
    ]
    return tuple(out)


def compute_diff(lh: Lakehouse, table: TableId, branch: str) -> DiffResult:
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    meta = cat.metadata_diff(tbl, table, branch)
    lin = cat.lineage(tbl, branch)  # metadata only, like metadata_diff
    batch = batch_frame(lh, table, lin)
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
    columns = []
    main_cols = _public(main_prof)["columns"] if main_prof is not None else {}
    for name, b in _public(batch_prof)["columns"].items():
        m = main_cols.get(name)
        entry: dict[str, Any] = {"name": name, "type": b["type"], "kind": b["kind"], "main": m, "batch": b}
        if m is not None:
            entry["null_pct_change"] = round(b["null_pct"] - m["null_pct"], 4)
            if b.get("mean") is not None and m.get("mean") is not None:
                entry["mean_change"] = b["mean"] - m["mean"]
        columns.append(entry)
    return DiffResult(
        table=str(table),
        branch=branch,
        fork_snapshot_id=lin.fork,
        head_snapshot_id=lin.head,
        main_snapshot_id=lin.main_head,
        main_moved=lin.main_moved,
        pure_append=meta.pure_append,
        rows_added=batch_prof["rows"],
        rows_deleted=deleted,
        schema_changes=schema_changes(tbl, branch),
        columns=columns,
        metadata=asdict(meta),
        main_profile={k: main_prof.get(k) for k in ("source", "basis", "sample")}
        if main_prof is not None
        else {},
    )


def preview(lh: Lakehouse, table: TableId, branch: str, limit: int = 100) -> pd.DataFrame:
    """The first ``limit`` new rows of the branch, as pandas (for display)."""
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    return batch_frame(lh, table, cat.lineage(tbl, branch)).limit(limit).toPandas()


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


def column_change(col: dict[str, Any]) -> ColumnChange:
    """The standardized change of one profiled column (``DiffResult.columns`` item: name, kind, main, batch)."""
    m, b = col.get("main") or {}, col.get("batch") or {}
    scores: dict[str, float] = {}
    if m:
        scores["null_rate"] = _h((m.get("null_pct") or 0.0) / 100, (b.get("null_pct") or 0.0) / 100)
        mq, bq = m.get("quantiles") or {}, b.get("quantiles") or {}
        lo, hi = _num(mq.get("0.05")), _num(mq.get("0.95"))
        spread = (hi - lo) / 3.29 if lo is not None and hi is not None and hi > lo else None
        mm, bm = _num(m.get("mean")), _num(b.get("mean"))
        dist = 0.0
        if spread and mm is not None and bm is not None:
            dist = abs(bm - mm) / spread
            bmin, bmax, mmin, mmax = (
                _num(b.get("min")),
                _num(b.get("max")),
                _num(m.get("min")),
                _num(m.get("max")),
            )
            if None not in (bmin, bmax, mmin, mmax) and mmax > mmin:  # type: ignore[operator]
                outside = max(0.0, mmin - bmin) + max(0.0, bmax - mmax)  # type: ignore[operator]
                dist = max(dist, min(outside / (mmax - mmin), 1.0))  # type: ignore[operator]
            b_lo, b_hi = _num(bq.get("0.05")), _num(bq.get("0.95"))
            if b_lo is not None and b_hi is not None:
                dist = max(dist, (abs(b_lo - lo) + abs(b_hi - hi)) / 2 / spread)  # type: ignore[operator]
        if dist:
            scores["distribution"] = dist
        mt, bt = m.get("top_values") or [], b.get("top_values") or []
        if mt and bt:
            shares_m = {str(t["value"]): float(t["pct"]) for t in mt}
            shares_b = {str(t["value"]): float(t["pct"]) for t in bt}
            keys = set(shares_m) | set(shares_b)
            scores["top_values"] = sum(abs(shares_b.get(k, 0.0) - shares_m.get(k, 0.0)) for k in keys) / 100.0
        dm, db = m.get("distinct") or 0, b.get("distinct") or 0
        if dm and db > dm:
            scores["distinct"] = min((db - dm) / dm, 1.0)
    if not scores:
        return ColumnChange(str(col.get("name")), 0.0, "none", {})
    aspect = max(scores, key=lambda k: scores[k])
    return ColumnChange(
        str(col.get("name")), round(scores[aspect], 4), aspect, {k: round(v, 4) for k, v in scores.items()}
    )


def rank_changes(columns: list[dict[str, Any]]) -> list[ColumnChange]:
    """Every column's change, largest first (ties by column name)."""
    return sorted((column_change(c) for c in columns), key=lambda c: (-c.score, c.column))
