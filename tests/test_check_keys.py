"""Look-ups of a batch's keys in main that min/max cannot prune (wap_core.checks.keys), on real Iceberg.

Main's keys are sparse (the first 8 of every block of 32, like TPC-H order keys); the batch's keys
sit in the gaps over main's whole range, so the key range prunes nothing. The counts must be those
of the plain semi/anti joins, whatever the plan (broadcast or not), with duplicated keys in main
and in the batch and NULL keys.
"""

from __future__ import annotations

import pytest
from helpers import write_csv

from wap_core import TableId
from wap_core.checks.keys import keys_in_main, values_missing
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

HEADER = ["k1", "k2", "ref"]
MAIN_ROWS = [(32 * b + j, j % 2, "US") for b in range(40) for j in range(1, 9)]
MAIN_ROWS += [(33, 1, "US")]  # a key main holds twice (published by force)
GAPS = [(32 * b + 20, 0, "US") for b in range(40)]  # new keys spread over main's whole range
CLASHES = [
    (33, 1, "FR"),  # in main twice: counts once per batch row
    (33, 1, "FR"),  # ... and twice in the batch: two rows in main
    (32 * 39 + 8, 0, "US"),  # main's highest key
    (1, 1, "US"),  # main's lowest key
]
NEAR = [(34, 1, "US")]  # first key value in main, whole key not: (34, 0) is main's
BATCH_ROWS = [*GAPS, *CLASHES, *NEAR, (None, 1, "DE"), (None, None, None), (32 * 7 + 21, 0, "XX")]
# unique against main: the 4 clashing rows; within the batch: 2 rows share (33, 1)
IN_MAIN = 4

SUITE = """\
demo.spread:
  checks:
    - unique: [k1, k2]
    - references: {column: ref, table: demo.codes, ref_column: code}
"""


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory, spark_session: None, backend):  # type: ignore[no-untyped-def]
    from wap_core import Lakehouse

    d = tmp_path_factory.mktemp("keys")
    lh = Lakehouse(backend.settings(d / "lh", SUITE))
    codes = TableId("demo", "codes")
    r = ingest(lh, codes, [write_csv(d / "codes.csv", ["code"], [("US",), ("FR",), ("US",)])], create=True)
    publish(lh, codes, r.branch)
    table = TableId("demo", "spread")
    r = ingest(lh, table, [write_csv(d / "main.csv", HEADER, MAIN_ROWS)], create=True, branch="seed")
    publish(lh, table, "seed", force=True, reason="main with a duplicated key, for the test")
    r = ingest(lh, table, [write_csv(d / "batch.csv", HEADER, BATCH_ROWS)], branch="batch")
    return lh, table, r.audit


def _check(audit, type_):  # type: ignore[no-untyped-def]
    return next(c for c in audit.checks if c.type == type_)


def test_unique_against_main_counts_spread_keys_exactly(spread) -> None:  # type: ignore[no-untyped-def]
    _, _, audit = spread
    c = _check(audit, "unique")
    assert c.observed == {
        "duplicate_rows_in_batch": 2,
        "duplicate_keys_in_batch": 1,
        "rows_already_in_main": IN_MAIN,
    }
    assert c.failing_rows == 2 + IN_MAIN
    in_main = {(s["k1"], s["k2"]) for s in c.sample if s["__problem"] == "already in main"}
    assert in_main and in_main <= {(k1, k2) for k1, k2, _ in CLASHES}


def test_references_counts_missing_values_exactly(spread) -> None:  # type: ignore[no-untyped-def]
    _, _, audit = spread
    c = _check(audit, "references")
    assert c.observed == {"missing_rows": 2, "missing_values": 2}  # DE and XX; NULL is not missing
    assert {s["value"]: s["rows"] for s in c.sample} == {"DE": 1, "XX": 1}


@pytest.mark.parametrize(
    ("batch_rows", "collected", "keys_collected"),
    [
        (None, 10_000, 100_000),
        (len(BATCH_ROWS), 10_000, 100_000),
        (len(BATCH_ROWS), 1, 100_000),
        (len(BATCH_ROWS), 10_000, 1),
    ],
    ids=["no-broadcast", "first-column-broadcast", "too-many-shared-values", "too-many-candidate-keys"],
)
def test_the_plans_agree_with_the_plain_joins(  # type: ignore[no-untyped-def]
    spread, monkeypatch: pytest.MonkeyPatch, batch_rows: int | None, collected: int, keys_collected: int
) -> None:
    from pyspark.sql import functions as F

    from wap_core.checks import keys
    from wap_core.lake import catalog as cat
    from wap_core.workflow.audit import batch_frame

    monkeypatch.setattr(keys, "CANDIDATES_COLLECTED", collected)
    monkeypatch.setattr(keys, "CANDIDATE_KEYS_COLLECTED", keys_collected)
    lh, table, _ = spread
    lin = cat.lineage(lh.table(table), "batch")
    assert lin.fork is not None
    batch, main = batch_frame(lh.spark, lh.spark_name(table), lin), lh.read_snapshot(table, lin.fork)
    lo, hi = batch.agg(F.min("k1"), F.max("k1")).collect()[0]
    n, found = keys_in_main(batch, main, ("k1", "k2"), lo, hi, batch_rows)
    plain = batch.join(main.select("k1", "k2").distinct(), on=["k1", "k2"], how="left_semi").count()
    assert n == plain == IN_MAIN
    assert sorted(tuple(r) for r in found.collect()) == sorted({(k1, k2) for k1, k2, _ in CLASHES})

    codes = lh.read_main(TableId("demo", "codes"))
    assert codes is not None
    lo, hi = batch.agg(F.min("ref"), F.max("ref")).collect()[0]
    missing = {
        r["value"]: r["rows"]
        for r in values_missing(batch, "ref", codes, "code", lo, hi, batch_rows).collect()
    }
    assert missing == {"DE": 1, "XX": 1}


def test_an_empty_range_reads_nothing(spread) -> None:  # type: ignore[no-untyped-def]
    lh, table, _ = spread
    from wap_core.lake import catalog as cat
    from wap_core.workflow.audit import batch_frame

    lin = cat.lineage(lh.table(table), "batch")
    assert lin.fork is not None
    batch, main = batch_frame(lh.spark, lh.spark_name(table), lin), lh.read_snapshot(table, lin.fork)
    assert keys_in_main(batch, main, ("k1", "k2"), None, None, 10)[0] == 0


@pytest.mark.parametrize("batch_rows", [None, len(BATCH_ROWS)], ids=["no-broadcast", "broadcast"])
def test_a_one_column_key_is_matched_from_the_shared_values(spread, batch_rows: int | None) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from wap_core.lake import catalog as cat
    from wap_core.workflow.audit import batch_frame

    lh, table, _ = spread
    lin = cat.lineage(lh.table(table), "batch")
    assert lin.fork is not None
    batch, main = batch_frame(lh.spark, lh.spark_name(table), lin), lh.read_snapshot(table, lin.fork)
    lo, hi = batch.agg(F.min("k1"), F.max("k1")).collect()[0]
    n, found = keys_in_main(batch, main, ("k1",), lo, hi, batch_rows)
    plain = batch.join(main.select("k1").distinct(), on=["k1"], how="left_semi").count()
    assert n == plain == IN_MAIN + len(NEAR)
    assert sorted(r["k1"] for r in found.collect()) == sorted({k1 for k1, _, _ in CLASHES + NEAR})
