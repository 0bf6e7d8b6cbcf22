"""The check engine on real Spark + Iceberg: one pass (counted in Spark jobs), the result cache, the registry."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import write_csv

from wap_core import TableId
from wap_core.checks import AVAILABLE_CHECKS, parse_checks, yaml_types
from wap_core.values import to_jsonable
from wap_core.workflow.audit import run_audit
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

_groups = itertools.count(1)

HEADER = ["id", "k2", "name", "amount", "code"]
# ids 1..40; id 7 three times, id 9 twice (5 rows in duplicate groups, 2 keys); (id, k2) unique except one pair
ROWS = [
    (i, i % 3, None if i % 10 == 0 else f"n{i}", i * 10 - 50, "AB" if i % 4 else "zz") for i in range(1, 41)
]
ROWS += [(7, 1, "x", 5, "AB"), (7, 2, "y", 5, "AB"), (9, 0, "z", 5, "AB")]

TEN = [
    "not_null: [name]",
    "not_null: [id]",
    "not_null: [code]",
    "range: {column: amount, min: 0, max: 300}",
    "range: {column: id, min: 0, max: 100}",
    "accepted_values: {column: code, values: [AB, CD]}",
    "accepted_values: {column: k2, values: [0, 1]}",
    "pattern: {column: code, regex: '^[A-Z]+$'}",
    "expression: {name: positive_amount, sql: 'amount > 0'}",
    "expression: {name: small_k2, sql: 'k2 < 5'}",
]


def suite(table: TableId, lines: list[str]) -> Any:
    return parse_checks(f"{table}:\n  checks:\n" + "".join(f"    - {ln}\n" for ln in lines))[str(table)]


def jobs(lh: Any, fn: Callable[[], Any]) -> tuple[int, Any]:
    """Spark jobs ``fn`` ran (counted through a job group on this thread)."""
    sc = lh.spark.sparkContext
    group = f"wap_test_{next(_groups)}"
    sc.setJobGroup(group, "counted")
    try:
        out = fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return len(sc.statusTracker().getJobIdsForGroup(group)), out


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory, spark_session: None):  # type: ignore[no-untyped-def]
    from conftest import make_settings

    from wap_core import Lakehouse

    d = tmp_path_factory.mktemp("engine")
    lh = Lakehouse(make_settings(d / "lh", ""))
    t = TableId("demo", "e")
    r = ingest(
        lh, t, [write_csv(d / "seed.csv", HEADER, [(1000, 0, "s", 1, "AB")])], create=True, branch="seed"
    )
    publish(lh, t, "seed")
    r = ingest(lh, t, [write_csv(d / "b.csv", HEADER, ROWS)], branch="b")
    assert r.rows_written == len(ROWS)
    return lh, t


def test_ten_row_checks_cost_the_jobs_of_one(batch) -> None:  # type: ignore[no-untyped-def]
    lh, t = batch
    one, ten = suite(t, TEN[:1]), suite(t, TEN)
    run_audit(lh, t, "b", suite=ten, use_cache=False)  # warm-up
    # failing rows are sampled by one more job whatever their number; compare like with like
    n1, _ = jobs(lh, lambda: run_audit(lh, t, "b", suite=one, use_cache=False))
    n10, a10 = jobs(lh, lambda: run_audit(lh, t, "b", suite=ten, use_cache=False))
    assert len([c for c in a10.checks if c.type != "malformed_rows"]) == 10
    assert n10 == n1, (n1, n10)
    passing = suite(
        t, ["not_null: [id]", "range: {column: id, min: 0, max: 100}", "expression: {name: k, sql: 'k2 < 5'}"]
    )
    n_pass, a = jobs(lh, lambda: run_audit(lh, t, "b", suite=passing, use_cache=False))
    assert a.status == "passed"
    assert n_pass <= 2, n_pass  # the one aggregate pass (a global aggregate: map stage + result under AQE)


def test_unique_within_the_batch_is_counted_in_the_same_pass(batch) -> None:  # type: ignore[no-untyped-def]
    lh, t = batch
    rows_only = suite(t, [*TEN[1:3], "expression: {name: k, sql: 'k2 < 5'}"])
    with_unique = suite(
        t,
        [
            *TEN[1:3],
            "expression: {name: k, sql: 'k2 < 5'}",
            "unique: {name: u1, columns: [id, k2, name], against_main: false}",
        ],
    )
    two_keys = suite(
        t,
        [
            *TEN[1:3],
            "expression: {name: k, sql: 'k2 < 5'}",
            "unique: {name: u1, columns: [id, k2, name], against_main: false}",
            "unique: {name: u2, columns: [code, k2], against_main: false}",
        ],
    )
    run_audit(lh, t, "b", suite=two_keys, use_cache=False)  # warm-up
    n0, _ = jobs(lh, lambda: run_audit(lh, t, "b", suite=rows_only, use_cache=False))
    n1, a1 = jobs(lh, lambda: run_audit(lh, t, "b", suite=with_unique, use_cache=False))
    u1 = next(c for c in a1.checks if c.name == "u1")
    assert (u1.status, u1.failing_rows) == ("passed", 0)
    # one query for everything: the grouping adds its shuffle stage, never a second scan job of its own
    assert n1 <= n0 + 2, (n0, n1)
    n2, a2 = jobs(lh, lambda: run_audit(lh, t, "b", suite=two_keys, use_cache=False))
    u2 = next(c for c in a2.checks if c.name == "u2")
    assert u2.status == "failed" and u2.failing_rows == len(
        ROWS
    )  # (code, k2) has only 6 distinct pairs, all repeated
    assert n2 <= n1 + 3, (n1, n2)  # + the sample of duplicate keys


def test_unique_counts_rows_sharing_a_key_exactly(batch) -> None:  # type: ignore[no-untyped-def]
    lh, t = batch
    a = run_audit(
        lh,
        t,
        "b",
        suite=suite(t, ["unique: [id]", "unique: {name: pair, columns: [id, k2]}"]),
        use_cache=False,
    )
    by = {c.name: c for c in a.checks}
    # id 7: three rows, id 9: two rows; id 1000 is main's only row (not in the batch)
    assert by["unique(id)"].observed == {
        "duplicate_rows_in_batch": 5,
        "duplicate_keys_in_batch": 2,
        "rows_already_in_main": 0,
    }
    assert by["unique(id)"].failing_rows == 5
    # (7, 1) occurs twice (ROWS has id 7 with k2 = 7 % 3 = 1, plus (7, 1, "x")); (9, 0) twice
    assert by["pair"].failing_rows == 4
    assert {s["__problem"] for s in by["pair"].sample} == {"duplicate in batch"}


def test_a_threshold_change_is_judged_from_the_cache_without_spark(batch) -> None:  # type: ignore[no-untyped-def]
    lh, t = batch
    lines = [*TEN, "unique: [id]", "row_count: {min: 1}"]
    first = run_audit(lh, t, "b", suite=suite(t, lines), use_cache=False)
    _, fresh = jobs(lh, lambda: run_audit(lh, t, "b", suite=suite(t, lines)))  # fills the cache
    assert [to_jsonable(c) for c in fresh.checks] == [to_jsonable(c) for c in first.checks]
    changed = [
        ln.replace("not_null: [name]", "not_null: {column: name, max_failing_rows: 10}") for ln in lines
    ]
    changed[-1] = "row_count: {min: 100}"
    n_again, again = jobs(lh, lambda: run_audit(lh, t, "b", suite=suite(t, changed)))
    assert n_again == 0, n_again
    by = {c.name: c for c in again.checks}
    assert by["not_null(name)"].status == "passed" and by["not_null(name)"].failing_rows == 4
    assert by["row_count"].status == "failed"
    assert by["unique(id)"].failing_rows == 5 and by["unique(id)"].sample  # samples come from the cache too
    assert again.rows_checked == len(ROWS)
    # a changed predicate is measured again, alone
    narrower = [
        ("range: {column: amount, min: 0, max: 10}" if "column: amount" in ln else ln) for ln in changed
    ]
    n_one, one = jobs(lh, lambda: run_audit(lh, t, "b", suite=suite(t, narrower)))
    assert 0 < n_one <= 3, n_one
    assert next(c for c in one.checks if c.name == "range(amount)").failing_rows == 38


def test_the_registry_lists_every_type_and_each_parses(tmp_path: Path) -> None:
    assert set(AVAILABLE_CHECKS) == {
        "not_null",
        "unique",
        "row_count",
        "accepted_values",
        "range",
        "pattern",
        "expression",
        "freshness",
        "references",
        "schema",
        "anomaly",
        "drift",
        "removed_rows",
        "changed_rows",
        "malformed_rows",
    }
    assert "malformed_rows" not in yaml_types()  # built in, not for the checks file
    for key, cls in AVAILABLE_CHECKS.items():
        assert cls.type == key
    s = parse_checks(
        "demo.t:\n  checks:\n    - anomaly: {metric: null_pct, column: dep_time, min_history: 5, threshold: 4}\n"
        "    - anomaly: {metric: row_count, history: 10}\n    - drift: {column: distance, warn: 0.1, fail: 0.25}\n"
    )
    a, rc, d = s["demo.t"].checks
    assert (a.name, a.line, a.args["max_z"], a.args["window"]) == ("anomaly(null_pct(dep_time))", 3, 4.0, 30)
    assert (rc.name, rc.args["window"], rc.columns) == ("anomaly(row_count)", 10, ())
    assert (d.name, d.args["warn_at"], d.args["fail_at"]) == ("drift(distance)", 0.1, 0.25)


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("anomaly: {metric: median, column: a}", "metric must be one of row_count, null_pct, distinct, mean"),
        ("anomaly: {metric: null_pct}", "name the column(s)"),
        ("anomaly: {metric: row_count, column: a}", "row_count takes no column"),
        ("anomaly: {metric: mean, column: a, threshold: -1}", "threshold must be a number >= 0"),
        ("anomaly: {metric: mean, column: a, min_history: 10, window: 5}", "smaller than min_history"),
        ("anomaly: {metric: mean, column: a, window: 5, history: 6}", "window or history"),
        ("drift: {column: a, warn: 0.3, fail: 0.2}", "warn is greater than fail"),
        ("drift: {columns: [a, b]}", "give exactly one column"),
        ("malformed_rows: {}", "unknown check type 'malformed_rows'"),
    ],
)
def test_new_types_reject_bad_arguments_with_file_and_line(item: str, fragment: str) -> None:
    from wap_core.exceptions import ChecksFileError

    with pytest.raises(ChecksFileError) as info:
        parse_checks(f"demo.t:\n  checks:\n    - row_count: {{min: 1}}\n    - {item}\n", "suite.yml")
    assert info.value.line == 4 and fragment in str(info.value), str(info.value)


@pytest.mark.parametrize("broken", ["none", "row check", "key check"])
def test_aggregates_and_key_grouping_run_at_once_in_the_callers_job_group(batch, broken: str) -> None:  # type: ignore[no-untyped-def]
    """The aggregation and the key grouping are two concurrent jobs (the aggregates from a second
    thread): every job still carries the caller's job group, the counts and samples are those of a
    plain DataFrame, and a broken check on either side leaves the other side's results intact."""
    from pyspark.sql import functions as F

    lh, t = batch
    lines = [
        "not_null: [name]",
        "range: {column: amount, min: 0, max: 300}",
        "unique: {name: u1, columns: [id], against_main: false}",
    ]
    if broken == "row check":
        lines.append("expression: {name: bad, sql: 'no_such_column > 0'}")
    if broken == "key check":
        lines.append("unique: {name: bad, columns: [no_such_column], against_main: false}")
    s = suite(t, lines)
    run_audit(lh, t, "b", suite=s, use_cache=False)  # warm-up
    sc = lh.spark.sparkContext
    ungrouped = set(sc.statusTracker().getJobIdsForGroup(None))
    n, a = jobs(lh, lambda: run_audit(lh, t, "b", suite=s, use_cache=False))
    # no new job outside a group (<=: the tracker keeps the newest jobs only and may drop old ungrouped ones)
    assert set(sc.statusTracker().getJobIdsForGroup(None)) <= ungrouped, "a job left the caller's job group"
    assert n >= 2
    by = {c.name: c for c in a.checks}
    frame = lh.spark.createDataFrame(ROWS, HEADER)
    assert by["not_null(name)"].failing_rows == frame.where(F.col("name").isNull()).count() == 4
    amount = by["range(amount)"]
    assert amount.failing_rows == frame.where((F.col("amount") < 0) | (F.col("amount") > 300)).count()
    assert amount.sample and all(not 0 <= r["amount"] <= 300 for r in amount.sample)
    assert (
        by["u1"].observed["duplicate_rows_in_batch"] == 5
        and by["u1"].observed["duplicate_keys_in_batch"] == 2
    )
    if broken != "none":
        assert by["bad"].status == "error"


def test_a_small_batch_is_known_as_one_split_from_its_snapshot_summaries(batch) -> None:  # type: ignore[no-untyped-def]
    """The audit skips Spark's planning of the read when the summaries prove one split; the proof
    agrees with Spark, and it is withheld (never wrong) when the table's split size is smaller."""
    from wap_core.lake import catalog as cat
    from wap_core.lake.batch import BatchFiles, batch_files, batch_frame, single_split

    lh, t = batch
    tbl = lh.table(t)
    lin = cat.lineage(tbl, "b")
    found = batch_files(lin)
    assert found is not None and (found.files, found.rows) == (1, len(ROWS)) and found.size > 0
    assert batch_files(cat.lineage(tbl, "main")) == BatchFiles(0, 0, 0)
    assert single_split(tbl.properties, found)
    assert batch_frame(lh.spark, lh.spark_name(t), lin).rdd.getNumPartitions() == 1
    assert not single_split({**tbl.properties, "read.split.target-size": "1024"}, found)
    assert not single_split({**tbl.properties, "read.split.open-file-cost": str(64 * 1024 * 1024)}, found)
    head = cat.lineage(tbl, "main")  # nothing new on main itself: no batch to read
    assert not single_split(tbl.properties, batch_files(head)) and not single_split(tbl.properties, None)


def test_the_sample_read_prepared_ahead_returns_the_rows_built_from_scratch(batch) -> None:  # type: ignore[no-untyped-def]
    """The failing-row read's projection is built while the pass runs; the rows it returns are the
    ones the read built from scratch returns, and a projection that cannot be built (a broken check,
    a batch column clashing with its names) leaves the read to build its own query."""
    from pyspark.sql import functions as F

    from wap_core.checks import engine
    from wap_core.lake import catalog as cat
    from wap_core.lake.batch import batch_frame

    lh, t = batch
    frame = batch_frame(lh.spark, lh.spark_name(t), cat.lineage(lh.table(t), "b"))
    checks = [c for c in suite(t, TEN).checks if c.row_level]
    broken = suite(t, ["expression: {name: bad, sql: 'no_such_column > 0'}"]).checks[0]
    values = engine._aggregate(frame, engine.suite_aggregates(checks, None))

    def sample(df: Any, flags: Any) -> dict[str, Any]:
        fresh: dict[str, Any] = {c.name: {"fail": values[engine.metric_name(c.name, "fail")]} for c in checks}
        engine._sample_failing(df, checks, fresh, 3, flags)
        return {name: m.get("sample") for name, m in fresh.items()}

    scratch = sample(frame, None)
    assert sum(len(s or []) for s in scratch.values()) > 10
    ahead = engine._FailureFlags(frame, checks)
    ahead.prepare()
    assert ahead.frame_for(checks) is not None
    assert sample(frame, ahead) == scratch
    with_broken = engine._FailureFlags(frame, [*checks, broken])
    with_broken.prepare()
    assert with_broken.frame_for(checks) is None and sample(frame, with_broken) == scratch
    clashing = frame.withColumn("__wap_note", F.lit("x"))
    clash = engine._FailureFlags(clashing, checks)
    clash.prepare()
    assert clash.frame_for(checks) is None
    got = sample(clashing, clash)  # another column, other row hashes: as many rows, not the same ones
    assert {k: len(s or []) for k, s in got.items()} == {k: len(s or []) for k, s in scratch.items()}
    assert all(r["__wap_note"] == "x" for s in got.values() for r in s or [])


def test_duplicate_keys_of_a_one_task_batch_are_counted_by_a_window_as_by_the_grouping(
    batch, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A batch read in one task counts duplicated keys with one window count (NULL keys count
    together, as in GROUP BY); past DUP_ROWS_COLLECTED rows the hash grouping counts them instead."""
    from wap_core.checks import engine
    from wap_core.lake import catalog as cat
    from wap_core.lake.batch import batch_frame

    lh, t = batch
    frame = batch_frame(lh.spark, lh.spark_name(t), cat.lineage(lh.table(t), "b")).coalesce(1)
    expected = {("id",): (5, 2), ("name",): (4, 1), ("id", "k2"): (4, 2), ("code", "k2"): (len(ROWS), 6)}
    for cols, (dup_rows, dup_keys) in expected.items():
        keys = {"u": cols}
        windowed, hashed = engine._group(frame, keys, one_task=True), engine._group(frame, keys)
        for got in (windowed, hashed):
            assert (got["u::dup_rows"], got["u::dup_keys"]) == (dup_rows, dup_keys), (cols, got)
        assert len(windowed["u::dup_examples"]) == min(3, dup_keys)
    by_id = engine._group(frame, {"u": ("id",)}, one_task=True)["u::dup_examples"]
    assert by_id == [{"id": 7, "count": 3}, {"id": 9, "count": 2}]  # in key order
    assert engine._group(frame, {"u": ("name",)}, one_task=True)["u::dup_examples"] == [
        {"name": None, "count": 4}
    ]
    arrays = frame.selectExpr("array(id) AS a").coalesce(1)  # keys Python cannot hash: the grouping counts
    assert engine._duplicated_rows(arrays, ("a",)) is None
    grouped = engine._group(arrays, {"u": ("a",)}, one_task=True)
    assert (grouped["u::dup_rows"], grouped["u::dup_keys"]) == (5, 2)
    monkeypatch.setattr(engine, "DUP_ROWS_COLLECTED", 3)
    assert engine._duplicated_rows(frame, ("id",)) is None  # 5 duplicated rows: the grouping counts them
    fallback = engine._group(frame, {"u": ("id",)}, one_task=True)
    assert (fallback["u::dup_rows"], fallback["u::dup_keys"]) == (5, 2)


@pytest.mark.parametrize("broken", [False, True])
def test_a_large_one_split_batch_spreads_its_aggregates_over_concurrent_jobs(
    batch, monkeypatch, broken: bool
) -> None:  # type: ignore[no-untyped-def]
    """Past SPLIT_ROWS rows a one-split batch's aggregates run as AGGREGATE_JOBS concurrent jobs
    (a check's aggregates stay together): every result, sample and observed value is the one of a
    single aggregate job, and a broken check still breaks only itself."""
    from wap_core.checks import engine

    lh, t = batch
    lines = [*TEN, "unique: {name: u1, columns: [id], against_main: false}"]
    if broken:
        lines.append("expression: {name: bad, sql: 'no_such_column > 0'}")
    s = suite(t, lines)
    run_audit(lh, t, "b", suite=s, use_cache=False)  # warm-up
    n_one, one = jobs(lh, lambda: run_audit(lh, t, "b", suite=s, use_cache=False))
    monkeypatch.setattr(engine, "SPLIT_ROWS", 1)
    n_split, split = jobs(lh, lambda: run_audit(lh, t, "b", suite=s, use_cache=False))

    def seen(a: Any) -> dict[str, Any]:
        return {c.name: (c.status, c.failing_rows, c.observed, c.sample) for c in a.checks}

    assert seen(split) == seen(one)
    if broken:
        assert seen(split)["bad"][0] == "error"
    else:
        assert n_split == n_one + engine.AGGREGATE_JOBS - 1, (n_one, n_split)
    parts = engine._split_aggregates(engine.suite_aggregates(s.checks, None), 2)
    assert len(parts) == 2 and abs(len(parts[0]) - len(parts[1])) <= 2
    owners = [{k.split(engine.SEP)[0] for k in p} for p in parts]
    assert not owners[0] & owners[1]  # each check's aggregates in one job


def test_the_grouping_starts_once_every_aggregate_query_is_planned(batch, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The aggregate queries (which the failing-row read waits for) are planned before the key
    grouping starts, so its planning does not compete with theirs; the results are unchanged."""
    from wap_core.checks import engine

    lh, t = batch
    s = suite(t, [*TEN, "unique: {name: u1, columns: [id], against_main: false}"])
    before = run_audit(lh, t, "b", suite=s, use_cache=False)
    events: list[str] = []
    real_aggregate, real_group = engine._aggregate, engine._group

    def aggregate(b: Any, plain: Any, planned: Any = None) -> dict[str, Any]:
        def mark() -> None:
            events.append("planned")
            planned()

        return real_aggregate(b, plain, mark if planned is not None else None)

    def group(*a: Any, **k: Any) -> dict[str, Any]:
        events.append("group")
        return real_group(*a, **k)

    monkeypatch.setattr(engine, "_aggregate", aggregate)
    monkeypatch.setattr(engine, "_group", group)
    monkeypatch.setattr(engine, "SPLIT_ROWS", 1)  # two aggregate queries
    after = run_audit(lh, t, "b", suite=s, use_cache=False)
    assert events.count("planned") == engine.AGGREGATE_JOBS and events[-1] == "group", events
    assert [(c.name, c.status, c.failing_rows, c.observed, c.sample) for c in after.checks] == [
        (c.name, c.status, c.failing_rows, c.observed, c.sample) for c in before.checks
    ]
