"""Export -> fix -> replay round-trips every value of every type (issue 39 item 2), on real Spark + Iceberg.

A table of every type the console ingests gets a batch whose rows all fail ``range(score)`` but one; the
failing rows are quarantined and the batch published. The kept rows are exported as CSV and as Parquet, the
``_wap_*`` columns dropped (what a person's fix keeps of the file), and ingested again (the CSV with
``--replay-of``). Each replayed value equals the value kept: an integer column with a NULL stays integral, a
bigint above 2^53 keeps its last digit, a decimal its 9 fraction digits, the empty string stays empty and
NULL stays NULL, a timestamp keeps its zone and microseconds.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from helpers import lake_settings

from wap_core import Lakehouse, TableId
from wap_core.session import session_of
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch
from wap_core.workflow.quarantine import quarantine, quarantine_table_id
from wap_core.workflow.quarantine_view import export_bytes, export_quarantine

T = TableId("rt", "every")
DDL = (
    "id bigint, n int, name string, amount decimal(20,9), score double, small float, day date,"
    " ts timestamp, local timestamp_ntz, flag boolean"
)
CHECKS = """\
rt.every:
  checks:
    - range: {column: score, min: 100}
"""
ROWS: list[dict[str, Any]] = [
    {  # kept: every value at an edge a float, a pandas frame or a zoneless text would change
        "id": 2**53 + 1,
        "n": None,
        "name": "",
        "amount": Decimal("1234567890.123456789"),
        "score": 0.1,
        "small": 0.5,
        "day": date(1, 1, 1),
        "ts": datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "local": datetime(2024, 1, 2, 3, 4, 5, 500000),
        "flag": True,
    },
    {
        "id": -(2**63),
        "n": -(2**31),
        "name": None,
        "amount": Decimal("-0.000000001"),
        "score": -1e300,
        "small": None,
        "day": date(9999, 12, 31),
        "ts": None,
        "local": None,
        "flag": None,
    },
    {
        "id": 3,
        "n": 2**31 - 1,
        "name": 'a,"b"\nc ; d',
        "amount": Decimal("0E-9"),
        "score": 5e-324,
        "small": 3.4028234663852886e38,
        "day": date(2024, 2, 29),
        "ts": datetime(1970, 1, 1, tzinfo=UTC),
        "local": datetime(1, 1, 1),
        "flag": False,
    },
    {  # passes: published
        "id": 4,
        "n": 4,
        "name": "ok",
        "amount": Decimal("4"),
        "score": 400.0,
        "small": 4.0,
        "day": date(2024, 1, 1),
        "ts": datetime(2024, 1, 1, tzinfo=UTC),
        "local": datetime(2024, 1, 1),
        "flag": True,
    },
]
ARROW = pa.schema(
    [
        ("id", pa.int64()),
        ("n", pa.int32()),
        ("name", pa.string()),
        ("amount", pa.decimal128(20, 9)),
        ("score", pa.float64()),
        ("small", pa.float32()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("flag", pa.bool_()),
    ]
)
COLUMNS = [f.name for f in ARROW]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("roundtrip")
    lh = Lakehouse(lake_settings(home, "roundtrip", CHECKS, ingest_roots=(home,)))
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`{T.namespace}`")
    lh.spark.sql(f"CREATE TABLE {lh.sql_name(T)} ({DDL}) USING iceberg")
    first = home / "first.parquet"
    pq.write_table(pa.Table.from_pylist([{**ROWS[3], "id": 0}], schema=ARROW), first)
    assert ingest(lh, T, [str(first)], branch="first").audit.passed
    publish(lh, T, "first")
    src = home / "batch.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS, schema=ARROW), src)
    r = ingest(lh, T, [str(src)], branch="w")
    assert not r.audit.passed and r.malformed_rows == 0, r.audit
    q = quarantine(lh, T, "w", reason="scores below 100")
    assert q.quarantined == 3, q
    publish_batch(session_of(lh, "root"), "w")
    return lh


def _values(lh: Lakehouse, table: TableId, ref: str, where: str = "true") -> list[tuple[Any, ...]]:
    cols = ", ".join(f"`{c}`" for c in COLUMNS)
    rows = lh.spark.sql(f"SELECT {cols} FROM {lh.sql_name(table, ref)} WHERE {where} ORDER BY id").collect()
    return [tuple(r) for r in rows]


def _without_wap_columns(rows: pa.Table) -> pa.Table:
    return rows.drop_columns([c for c in rows.column_names if c.startswith("_wap_")])


def test_the_kept_rows_are_what_the_batch_held(lake: Lakehouse) -> None:
    kept = _values(lake, quarantine_table_id(T), "main")
    assert [r[0] for r in kept] == sorted(r["id"] for r in ROWS[:3])
    assert [r[0] for r in _values(lake, T, "main")] == [0, 4]


def test_parquet_export_keeps_every_column_in_its_type_and_replays_exactly(
    lake: Lakehouse, tmp_path: Path
) -> None:
    out = tmp_path / "kept.parquet"
    export_quarantine(lake, T, fmt="parquet", path=out)
    exported = pq.read_table(out)
    assert exported.select(COLUMNS).schema == ARROW, exported.schema  # an int column with a NULL stays int
    fixed = Path(lake.settings.home) / "fixed.parquet"
    pq.write_table(_without_wap_columns(exported), fixed)
    r = ingest(lake, T, [str(fixed)], branch="fix_parquet")
    assert (r.rows_written, r.malformed_rows) == (3, 0), r
    assert _values(lake, T, "fix_parquet", "id NOT IN (0, 4)") == _values(
        lake, quarantine_table_id(T), "main"
    )


def test_csv_export_writes_exact_text_and_replays_exactly(lake: Lakehouse, tmp_path: Path) -> None:
    text = export_bytes(lake, T, fmt="csv").decode()
    assert "9007199254740993" in text and "9007199254740992" not in text  # no double on the way
    assert "1234567890.123456789" in text and "2024-01-02 03:04:05.123456Z" in text
    # the person's fix: the CSV read as text (a quoted "" stays the empty string, an empty field NULL),
    # the _wap_* columns dropped, saved again
    raw = pcsv.read_csv(
        pa.BufferReader(text.encode()),
        convert_options=pcsv.ConvertOptions(
            column_types={c: pa.string() for c in text.splitlines()[0].replace('"', "").split(",")},
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    fixed = Path(lake.settings.home) / "fixed.csv"
    pcsv.write_csv(_without_wap_columns(raw), fixed)
    r = ingest(lake, T, [str(fixed)], branch="fix_csv", replay_of="w")
    assert (r.rows_written, r.malformed_rows) == (3, 0), r
    assert _values(lake, T, "fix_csv", "id NOT IN (0, 4)") == _values(lake, quarantine_table_id(T), "main")
