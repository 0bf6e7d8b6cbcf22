"""One suite of 11 checks, written three ways (wap_core YAML, Great Expectations 1.x, Soda Core 3),
and the TPC-H batch it runs on, with deterministic defects so that equal counts mean something.

Pure Python (pyarrow only for the data): imported by the bench and by the peer workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHIPMODES = ["AIR", "REG AIR", "FOB", "MAIL", "RAIL", "SHIP", "TRUCK"]

# (id, type, arguments): the same check for every tool
CHECKS: list[tuple[str, str, dict[str, Any]]] = [
    ("nn_orderkey", "not_null", {"column": "l_orderkey"}),
    ("nn_partkey", "not_null", {"column": "l_partkey"}),  # NULLs injected
    ("nn_shipdate", "not_null", {"column": "l_shipdate"}),
    ("rng_quantity", "range", {"column": "l_quantity", "min": 0, "max": 50}),  # 150s injected
    (
        "rng_discount",
        "range",
        {"column": "l_discount", "min": 0, "max": 0.08},
    ),  # real TPC-H: 0.09 and 0.10 fail
    (
        "av_returnflag",
        "accepted_values",
        {"column": "l_returnflag", "values": ["A", "N", "R"]},
    ),  # 'X' injected
    ("av_shipmode", "accepted_values", {"column": "l_shipmode", "values": SHIPMODES}),
    (
        "pat_shipinstruct",
        "pattern",
        {"column": "l_shipinstruct", "regex": "^[A-Z ]+$"},
    ),  # lower case injected
    ("expr_price", "expression", {"sql": "l_extendedprice > 0", "column": "l_extendedprice"}),  # -1 injected
    (
        "expr_dates",
        "expression",
        {"sql": "l_shipdate <= l_receiptdate", "a": "l_receiptdate", "b": "l_shipdate"},
    ),  # swaps
    ("uniq_key", "unique", {"columns": ["l_orderkey", "l_linenumber"]}),  # duplicated keys injected
]


def wap_yaml_lines(overrides: dict[str, str] | None = None) -> list[str]:
    """The suite as wap_core checks-file items (``overrides``: id -> extra YAML mapping entries)."""
    out = []
    for cid, kind, a in CHECKS:
        extra = (", " + overrides[cid]) if overrides and cid in overrides else ""
        if kind == "not_null":
            out.append(f"not_null: {{name: {cid}, column: {a['column']}{extra}}}")
        elif kind == "range":
            out.append(
                f"range: {{name: {cid}, column: {a['column']}, min: {a['min']}, max: {a['max']}{extra}}}"
            )
        elif kind == "accepted_values":
            vals = ", ".join(f"'{v}'" for v in a["values"])
            out.append(f"accepted_values: {{name: {cid}, column: {a['column']}, values: [{vals}]{extra}}}")
        elif kind == "pattern":
            out.append(f"pattern: {{name: {cid}, column: {a['column']}, regex: '{a['regex']}'{extra}}}")
        elif kind == "expression":
            out.append(f"expression: {{name: {cid}, sql: '{a['sql']}'{extra}}}")
        elif kind == "unique":
            out.append(
                f"unique: {{name: {cid}, columns: [{', '.join(a['columns'])}], against_main: false{extra}}}"
            )
    return out


def gx_expectations() -> list[Any]:
    """The suite as Great Expectations 1.x expectations (imported in the GX environment only)."""
    import great_expectations.expectations as gxe

    out: list[Any] = []
    for cid, kind, a in CHECKS:
        meta = {"id": cid}
        if kind == "not_null":
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=a["column"], meta=meta))
        elif kind == "range":
            out.append(
                gxe.ExpectColumnValuesToBeBetween(
                    column=a["column"], min_value=a["min"], max_value=a["max"], meta=meta
                )
            )
        elif kind == "accepted_values":
            out.append(gxe.ExpectColumnValuesToBeInSet(column=a["column"], value_set=a["values"], meta=meta))
        elif kind == "pattern":
            out.append(gxe.ExpectColumnValuesToMatchRegex(column=a["column"], regex=a["regex"], meta=meta))
        elif cid == "expr_price":
            out.append(
                gxe.ExpectColumnValuesToBeBetween(column=a["column"], min_value=0, strict_min=True, meta=meta)
            )
        elif cid == "expr_dates":
            out.append(
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A=a["a"], column_B=a["b"], or_equal=True, meta=meta
                )
            )
        elif kind == "unique":
            out.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=a["columns"], meta=meta))
    return out


def soda_yaml(view: str, samples: bool = True) -> str:
    """The suite as SodaCL for Soda Core 3 on a Spark DataFrame registered as ``view``
    (``samples=False``: ``samples limit: 0`` on every check, Soda's mode without failed-row samples)."""
    lines = [f"checks for {view}:"]
    for cid, kind, a in CHECKS:
        if kind == "not_null":
            lines += [f"  - missing_count({a['column']}) = 0:", f"      name: {cid}"]
        elif kind == "range":
            lines += [
                f"  - invalid_count({a['column']}) = 0:",
                f"      name: {cid}",
                f"      valid min: {a['min']}",
                f"      valid max: {a['max']}",
            ]
        elif kind == "accepted_values":
            lines += [
                f"  - invalid_count({a['column']}) = 0:",
                f"      name: {cid}",
                f"      valid values: [{', '.join(repr(v) for v in a['values'])}]",
            ]
        elif kind == "pattern":
            lines += [
                f"  - invalid_count({a['column']}) = 0:",
                f"      name: {cid}",
                f"      valid regex: '{a['regex']}'",
            ]
        elif kind == "expression":
            lines += [
                "  - failed rows:",
                f"      name: {cid}",
                f"      fail condition: NOT COALESCE({a['sql']}, FALSE)",
            ]
        elif kind == "unique":
            lines += [f"  - duplicate_count({', '.join(a['columns'])}) = 0:", f"      name: {cid}"]
        if not samples:
            lines.append("      samples limit: 0")
    return "\n".join(lines) + "\n"


def defective_batch(source: Path, out: Path, rows: int | None = None) -> Path:
    """``source`` (TPC-H lineitem, optionally its first ``rows`` rows) with deterministic defects."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if out.is_file():
        return out
    t = pq.read_table(source)
    if rows is not None:
        t = t.slice(0, rows)
    n = len(t)
    idx = pa.array(range(n), pa.int64())

    def every(k: int, r: int) -> Any:
        return pc.equal(pc.subtract(idx, pc.multiply(pc.divide(idx, k), k)), r)

    def put(name: str, mask: Any, value: Any) -> None:
        nonlocal t
        col = t[name]
        typ = col.type
        new = pc.if_else(mask, pa.scalar(value, typ) if value is not None else pa.nulls(n, typ), col)
        t = t.set_column(t.schema.get_field_index(name), pa.field(name, typ, nullable=True), new)

    import decimal

    put("l_partkey", every(997, 0), None)
    put("l_quantity", every(1009, 1), decimal.Decimal("150.00"))
    put("l_returnflag", every(1013, 2), "X")
    lower = pc.utf8_lower(t["l_shipinstruct"])
    t = t.set_column(
        t.schema.get_field_index("l_shipinstruct"),
        "l_shipinstruct",
        pc.if_else(every(2003, 3), lower, t["l_shipinstruct"]),
    )
    put("l_extendedprice", every(3001, 4), decimal.Decimal("-1.00"))
    swap = every(4001, 5)
    ship, receipt = t["l_shipdate"], t["l_receiptdate"]
    t = t.set_column(t.schema.get_field_index("l_shipdate"), "l_shipdate", pc.if_else(swap, receipt, ship))
    t = t.set_column(
        t.schema.get_field_index("l_receiptdate"), "l_receiptdate", pc.if_else(swap, ship, receipt)
    )
    # every 5003rd row (from 6) takes the key of the row before it: 2-row duplicate groups
    dup = every(5003, 6)
    prev = pa.array([0, *range(n - 1)], pa.int64())
    for name in ("l_orderkey", "l_linenumber"):
        t = t.set_column(
            t.schema.get_field_index(name), name, pc.if_else(dup, pc.take(t[name], prev), t[name])
        )
    fields = [
        pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type, True) for f in t.schema
    ]
    t = t.cast(pa.schema(fields))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    pq.write_table(t, tmp)
    tmp.rename(out)
    return out
