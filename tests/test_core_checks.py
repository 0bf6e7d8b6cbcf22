"""Every check type on real Iceberg tables where the right answer is known."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import write_csv

from wap_core import TableId
from wap_core.workflow.audit import run_audit
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

NOW = datetime.now(UTC).replace(microsecond=0)
RECENT = (NOW - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S")
OLD = (NOW - timedelta(days=10)).strftime("%Y-%m-%d %H:%M:%S")

HEADER = ["id", "name", "country", "amount", "code", "ts"]
MAIN_ROWS = [
    (1, "a", "US", 10, "AB1", OLD),
    (2, "b", "FR", 20, "CD2", OLD),
    (3, "c", "US", 30, "EF3", OLD),
]
# The batch: 6 rows with known problems.
BATCH_ROWS = [
    (4, "d", "US", 40, "GH4", RECENT),
    (5, None, "FR", 50, "ij5", RECENT),  # name null; code fails pattern
    (
        6,
        "f",
        "XX",
        -5,
        "KL6",
        RECENT,
    ),  # country not accepted and not in countries; amount out of range; expression fails
    (6, "g", "US", 60, "MN7", RECENT),  # duplicate id 6 within batch
    (2, "h", "DE", 70, "OP8", RECENT),  # id 2 already in main; DE not accepted, not in countries
    (9, "i", None, 80, None, RECENT),  # nulls in country and code: not failures for accepted_values/pattern
]
COUNTRIES = [("US", "United States"), ("FR", "France")]

SUITE = """\
demo.orders:
  checks:
    - not_null: [name, id]
    - unique: [id]
    - unique: {name: unique_in_batch_only, columns: [id], against_main: false}
    - row_count: {min: 1, max: 100}
    - row_count: {name: too_small, min: 10}
    - accepted_values: {column: country, values: [US, FR]}
    - range: {column: amount, min: 0, max: 100}
    - pattern: {column: code, regex: "^[A-Z]{2}[0-9]$", level: warn}
    - expression: {name: positive_amount, sql: "amount > 0"}
    - freshness: {column: ts, max_age: 1d}
    - freshness: {name: very_fresh, column: ts, max_age: 30m}
    - references: {column: country, table: demo.countries, ref_column: code}
    - schema: {columns: {id: int, name: string, country: string, amount: int, code: string, ts: timestamp}}
    - schema: {name: schema_wrong, columns: {id: bigint, missing_col: string}}
    - not_null: {name: broken_column, column: no_such_column}
    - expression: {name: broken_sql, sql: "amount >>> 1"}
"""


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory, spark_session: None, backend):  # type: ignore[no-untyped-def]
    from wap_core import Lakehouse

    d = tmp_path_factory.mktemp("checks")
    lh = Lakehouse(backend.settings(d / "lh", SUITE))
    countries = TableId("demo", "countries")
    r = ingest(lh, countries, [write_csv(d / "countries.csv", ["code", "label"], COUNTRIES)], create=True)
    publish(lh, countries, r.branch)
    orders = TableId("demo", "orders")
    r = ingest(lh, orders, [write_csv(d / "main.csv", HEADER, MAIN_ROWS)], create=True, branch="seed")
    assert r.audit.status == "failed"  # too_small etc. on the seed too
    publish(lh, orders, "seed", force=True, reason="seed data for the test")
    r = ingest(lh, orders, [write_csv(d / "batch.csv", HEADER, BATCH_ROWS)], branch="batch")
    return lh, r.audit


def _check(audit, name):  # type: ignore[no-untyped-def]
    return next(c for c in audit.checks if c.name == name)


def test_audit_reads_only_the_new_rows(audited) -> None:  # type: ignore[no-untyped-def]
    _, audit = audited
    assert audit.rows_checked == len(BATCH_ROWS)


@pytest.mark.parametrize(
    ("name", "status", "failing"),
    [
        ("not_null(name)", "failed", 1),
        ("not_null(id)", "passed", 0),
        ("unique(id)", "failed", 3),  # 2 rows share id 6 + 1 row with id 2 already in main
        ("unique_in_batch_only", "failed", 2),
        ("accepted_values(country)", "failed", 2),
        ("range(amount)", "failed", 1),
        ("pattern(code)", "warned", 1),
        ("positive_amount", "failed", 1),
        ("references(country -> demo.countries.code)", "failed", 2),
    ],
)
def test_row_checks_count_exactly_the_failing_rows(audited, name: str, status: str, failing: int) -> None:  # type: ignore[no-untyped-def]
    _, audit = audited
    c = _check(audit, name)
    assert (c.status, c.failing_rows) == (status, failing), c.message


def test_failing_rows_come_with_a_sample(audited) -> None:  # type: ignore[no-untyped-def]
    _, audit = audited
    assert _check(audit, "range(amount)").sample[0]["amount"] == -5
    assert {s["name"] for s in _check(audit, "accepted_values(country)").sample} == {"f", "h"}
    ref = _check(audit, "references(country -> demo.countries.code)")
    assert {s["value"] for s in ref.sample} == {"XX", "DE"}
    uniq = _check(audit, "unique(id)")
    assert {s["__problem"] for s in uniq.sample} == {"duplicate in batch", "already in main"}
    assert _check(audit, "not_null(id)").sample == []


def test_row_count_and_freshness_and_schema(audited) -> None:  # type: ignore[no-untyped-def]
    _, audit = audited
    assert _check(audit, "row_count").status == "passed" and _check(audit, "row_count").observed == 6
    assert _check(audit, "too_small").status == "failed"
    fresh = _check(audit, "freshness(ts)")
    assert fresh.status == "passed" and 1.5 < fresh.observed["age_hours"] < 3
    assert _check(audit, "very_fresh").status == "failed"
    assert _check(audit, "schema").status == "passed"
    wrong = _check(audit, "schema_wrong")
    assert wrong.status == "failed"
    assert (
        "missing column missing_col" in wrong.observed
        and "column id is int, expected bigint" in wrong.observed
    )


def test_a_broken_check_is_an_error_result_and_the_others_still_run(audited) -> None:  # type: ignore[no-untyped-def]
    _, audit = audited
    col = _check(audit, "broken_column")
    sql = _check(audit, "broken_sql")
    assert col.status == "error" and "no_such_column" in col.message
    assert sql.status == "error" and sql.message
    assert _check(audit, "range(amount)").status == "failed"  # evaluated all the same
    assert audit.status == "failed"


def test_results_are_journaled_with_the_audited_snapshot(audited) -> None:  # type: ignore[no-untyped-def]
    lh, audit = audited
    stored = lh.journal.latest_audit("demo.orders", "batch")
    assert stored is not None and stored.snapshot_id == audit.snapshot_id
    assert stored.status == "failed"
    assert lh.table(TableId("demo", "orders")).metadata.refs["batch"].snapshot_id == audit.snapshot_id


def test_warn_level_only_gives_warned_and_publishable(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse("demo.w:\n  checks:\n    - pattern: {column: code, regex: '^[A-Z]+$', level: warn}\n")
    t = TableId("demo", "w")
    r = ingest(lh, t, [write_csv(tmp_path / "w.csv", ["code"], [("ab",), ("CD",)])], create=True)
    assert r.audit.status == "warned" and r.audit.passed
    again = run_audit(lh, t, r.branch)
    assert again.status == "warned"
    assert publish(lh, t, r.branch).outcome == "published"


def test_regex_escapes_and_quoted_values_reach_spark_intact(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    suite = (
        "demo.q:\n  checks:\n"
        "    - pattern: {column: code, regex: '^\\d{3}$'}\n"
        "    - accepted_values: {column: name, values: [\"O'Brien\", 'x\\y']}\n"
    )
    lh = make_lakehouse(suite)
    src = tmp_path / "q.csv"
    src.write_text("code,name\n123,O'Brien\n12a,O'Brien\n456,x\\y\n789,Smith\n")
    r = ingest(lh, TableId("demo", "q"), [str(src)], create=True)
    by = {c.name: c for c in r.audit.checks}
    assert (by["pattern(code)"].failing_rows, by["pattern(code)"].sample[0]["code"]) == (1, "12a")
    assert (by["accepted_values(name)"].failing_rows, by["accepted_values(name)"].sample[0]["name"]) == (
        1,
        "Smith",
    )
