"""Branch vs main: what the batch adds, computed by Spark on the new rows only.

Main's column profile is computed once per main snapshot and cached in the
catalog database (``wap_profiles``), so reviewing ten branches of one table
profiles main once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from wap_core import catalog as cat
from wap_core.audit import batch_frame
from wap_core.checks import jsonable
from wap_core.identifiers import MAIN, TableId, quote_column

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
TOP_N = 5
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
        aggs += [F.count(c).alias(f"nn{i}"), F.approx_count_distinct(c).alias(f"d{i}")]
        if kind in ("numeric", "temporal") or typ in ("string", "date"):
            aggs += [F.min(c).alias(f"mn{i}"), F.max(c).alias(f"mx{i}")]
        if kind == "numeric":
            aggs += [F.avg(c).alias(f"avg{i}"), F.percentile_approx(c.cast("double"), list(QUANTILES), 1000).alias(f"q{i}")]
    row = df.agg(*aggs).collect()[0].asDict()
    rows = int(row["_rows"])
    cols: dict[str, dict[str, Any]] = {}
    for i, (name, typ) in enumerate(fields):
        nn = int(row[f"nn{i}"])
        cols[name] = {
            "type": typ,
            "kind": _kind(typ),
            "rows": rows,
            "nulls": rows - nn,
            "null_pct": round(100.0 * (rows - nn) / rows, 4) if rows else 0.0,
            "distinct": int(row[f"d{i}"]),
            "min": jsonable(row.get(f"mn{i}")),
            "max": jsonable(row.get(f"mx{i}")),
            "mean": jsonable(row.get(f"avg{i}")),
            "quantiles": dict(zip([str(q) for q in QUANTILES], jsonable(row.get(f"q{i}")) or [])) if row.get(f"q{i}") else None,
            "top_values": None,
        }
    cats = [n for n, t in fields if _kind(t) == "categorical"][:max_top_columns]
    if cats and rows:
        pairs = F.explode(F.array(*[F.struct(F.lit(n).alias("col"), F.col(quote_column(n)).cast("string").alias("val")) for n in cats]))
        counted = df.select(pairs.alias("p")).groupBy(F.col("p.col").alias("col"), F.col("p.val").alias("val")).count()
        from pyspark.sql.window import Window

        w = Window.partitionBy("col").orderBy(F.desc("count"), F.asc_nulls_last("val"))
        for r in counted.withColumn("rk", F.row_number().over(w)).where(F.col("rk") <= TOP_N).collect():
            tv = cols[r["col"]].setdefault("top_values", None) or []
            tv.append({"value": r["val"], "count": int(r["count"]), "pct": round(100.0 * int(r["count"]) / rows, 4)})
            cols[r["col"]]["top_values"] = tv
        for n in cats:
            if cols[n]["top_values"]:
                cols[n]["top_values"].sort(key=lambda d: -d["count"])
    return {"rows": rows, "columns": cols}


def main_profile(lh: Lakehouse, table: TableId, snapshot_id: int | None) -> dict[str, Any] | None:
    """Main's profile at ``snapshot_id``: cached per snapshot (snapshots are immutable)."""
    if snapshot_id is None:
        return None
    cached = lh.journal.load_profile(str(table), snapshot_id)
    if cached is not None:
        return cached
    prof = profile_frame(lh.read_snapshot(table, snapshot_id))
    lh.journal.save_profile(str(table), snapshot_id, prof)
    return prof


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def schema_changes(lh: Lakehouse, table: TableId, branch: str) -> list[dict[str, Any]]:
    """Schema of the branch head vs main head (by each snapshot's schema id), from metadata."""
    tbl = lh.table(table)
    schemas = {s.schema_id: s for s in tbl.metadata.schemas}

    def schema_of(snapshot_id: int | None) -> Any:
        snap = tbl.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        sid = snap.schema_id if snap is not None and snap.schema_id is not None else tbl.metadata.current_schema_id
        return schemas[sid]

    main_s, br_s = schema_of(cat.ref_snapshot_id(tbl, MAIN)), schema_of(tbl.metadata.refs[branch].snapshot_id)
    m = {f.name: str(f.field_type) for f in main_s.fields}
    b = {f.name: str(f.field_type) for f in br_s.fields}
    out: list[dict[str, Any]] = []
    out += [{"column": n, "change": "added", "type": b[n]} for n in b if n not in m]
    out += [{"column": n, "change": "removed", "type": m[n]} for n in m if n not in b]
    out += [{"column": n, "change": "type_changed", "from": m[n], "to": b[n]} for n in b if n in m and m[n] != b[n]]
    return out


def compute_diff(lh: Lakehouse, table: TableId, branch: str) -> DiffResult:
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    meta = cat.metadata_diff(tbl, table, branch)
    lin = cat.lineage(tbl, branch)
    batch = batch_frame(lh, table, lin)
    batch_prof = profile_frame(batch)
    main_prof = main_profile(lh, table, lin.fork)
    if meta.pure_append:
        deleted = 0
    else:
        fork_df = lh.read_snapshot(table, lin.fork) if lin.fork is not None else None
        deleted = fork_df.exceptAll(lh.read_snapshot(table, lin.head)).count() if fork_df is not None else 0
    columns = []
    for name, b in batch_prof["columns"].items():
        m = (main_prof or {}).get("columns", {}).get(name)
        entry: dict[str, Any] = {"name": name, "type": b["type"], "kind": b["kind"], "main": m, "batch": b}
        if m is not None:
            entry["null_pct_change"] = round(b["null_pct"] - m["null_pct"], 4)
            if b.get("mean") is not None and m.get("mean") is not None:
                entry["mean_change"] = b["mean"] - m["mean"]
        columns.append(entry)
    return DiffResult(
        table=str(table), branch=branch, fork_snapshot_id=lin.fork, head_snapshot_id=lin.head, main_snapshot_id=lin.main_head,
        main_moved=lin.main_moved, pure_append=meta.pure_append, rows_added=batch_prof["rows"], rows_deleted=deleted,
        schema_changes=schema_changes(lh, table, branch), columns=columns, metadata=asdict(meta),
    )


def preview(lh: Lakehouse, table: TableId, branch: str, limit: int = 100) -> pd.DataFrame:
    """The first ``limit`` new rows of the branch, as pandas (for display)."""
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    return batch_frame(lh, table, cat.lineage(tbl, branch)).limit(limit).toPandas()
