"""Reading and exporting what a quarantine kept (issue 29 item 4), on real Spark + Iceberg.

One module-scoped lakehouse: ``shop.orders``; batch ``w1`` quarantined and published (its kept rows on the
quarantine table's main), batch ``w2`` quarantined and still open (its kept rows on the quarantine table's
branch ``w2``). Proved: the summary per batch and check (published or not, each row once), the rows filtered
by batch and check with a limit, ``wap quarantine export`` to CSV and Parquet (read back), its bad input,
that ``wap quarantine TABLE BRANCH`` still quarantines, and that the view's Spark reads (summary, rows,
export) are cancelled after ``WAP_QUERY_TIMEOUT`` when they run away.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import SAM, app_test, cli_as, lake_env, lake_settings, use_env, wait_for, write_csv
from pyspark import InheritableThread
from pyspark.sql import functions as F

from wap_core import Lakehouse, TableId
from wap_core.exceptions import QueryTimeoutError
from wap_core.session import session_of
from wap_core.states import CheckStatus
from wap_core.workflow import quarantine_view
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch
from wap_core.workflow.quarantine import quarantine, quarantine_table_id
from wap_core.workflow.quarantine_view import export_quarantine, quarantine_rows, quarantine_summary

ORD, OTHER = TableId("shop", "orders"), TableId("shop", "clean")
HEADER = ("id", "name", "qty")
CHECKS = """\
shop.orders:
  checks:
    - not_null: [name]
    - range: {column: qty, min: 0}
shop.clean:
  checks:
    - not_null: [name]
"""
ACCESS = f"""\
roles:
  viewer: ["*"]
  steward: [{SAM}]
  admin: [root]
policies:
  "*": {{approvals: 0}}
"""
MAIN_ROWS = [(1, "ann", 5), (2, None, 3)]  # main's own NULL name: never quarantined
W1 = [(10, "a", 1), (11, None, 2), (12, "b", -5), (13, None, -1)]  # 11 name, 12 qty, 13 both
W2 = [(20, None, 1), (21, "ok", 1), (22, None, 4)]  # 20, 22 name


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("quarantine_view")
    settings = lake_settings(
        home, "quarantine_view", "{}\n", access_path=home / "access.yml", ingest_roots=(home,)
    )
    lh = Lakehouse(settings)
    for t in (ORD, OTHER):
        ingest(
            lh,
            t,
            [write_csv(home / "src" / f"{t.name}0.csv", HEADER, MAIN_ROWS)],
            create=True,
            branch="first",
        )
        publish(lh, t, "first")
    settings.checks_file.write_text(CHECKS)
    settings.access_file.write_text(ACCESS)
    for branch, rows in (("w1", W1), ("w2", W2)):
        r = ingest(
            lh, ORD, [write_csv(home / "src" / f"{branch}.csv", HEADER, rows)], branch=branch, user=SAM
        )
        assert r.audit is not None and r.audit.status is CheckStatus.FAILED
        quarantine(lh, ORD, branch, reason=f"bad rows of {branch}", user=SAM)
    publish_batch(session_of(lh, "root"), "w1")
    return lh


def test_summary_per_batch_and_check(lake: Lakehouse) -> None:
    s = quarantine_summary(lake, ORD)
    assert s.exists and s.quarantine_table == str(quarantine_table_id(ORD))
    assert [(b.batch, b.rows, b.published) for b in s.batches] == [("w1", 3, True), ("w2", 2, False)]
    assert s.rows == 5  # each row once (13 fails both checks)
    assert [(g.batch, g.check, g.rows, g.published) for g in s.groups] == [
        ("w1", "not_null(name)", 2, True),
        ("w1", "range(qty)", 2, True),
        ("w2", "not_null(name)", 2, False),
    ]
    assert s.checks == ("not_null(name)", "range(qty)")
    empty = quarantine_summary(lake, OTHER)  # nothing quarantined yet: no quarantine table
    assert (empty.exists, empty.rows, empty.batches) == (False, 0, ())


def test_rows_filtered_by_batch_and_check_with_a_limit(lake: Lakehouse) -> None:
    every = quarantine_rows(lake, ORD)
    assert every.total == 5 and not every.truncated
    assert set(every.frame["id"]) == {11, 12, 13, 20, 22}
    assert {"_wap_batch", "_wap_checks", "_wap_reason", "_wap_user", "_wap_quarantined_at"} <= set(
        every.columns
    )
    assert "__wap_published" not in every.frame.columns
    w1 = quarantine_rows(lake, ORD, batch="w1", check="range(qty)")
    assert sorted(w1.frame["id"]) == [12, 13] and set(w1.frame["_wap_reason"]) == {"bad rows of w1"}
    names = quarantine_rows(lake, ORD, check="not_null(name)", limit=3)
    assert names.total == 4 and len(names.frame) == 3 and names.truncated
    assert quarantine_rows(lake, ORD, batch="nope").total == 0


def test_cli_export_csv_of_a_batch_and_parquet_of_all(lake: Lakehouse, tmp_path: Path) -> None:
    out = tmp_path / "w2.csv"
    code, stdout, err = cli_as(
        lake, "someone", "quarantine", "export", str(ORD), "--batch", "w2", "--format", "csv", str(out)
    )
    assert code == 0, err
    assert stdout.strip() == f"exported 2 quarantined rows of {ORD} of batch w2 to {out} (csv)"
    csv = pd.read_csv(out)
    assert sorted(csv["id"]) == [20, 22] and set(csv["_wap_batch"]) == {"w2"}
    assert set(csv["_wap_checks"]) == {"not_null(name)"} and csv["name"].isna().all()
    assert list(csv.columns)[:3] == list(HEADER)
    pq_out = tmp_path / "all.parquet"
    code, stdout, err = cli_as(
        lake, "someone", "quarantine", "export", str(ORD), "--format", "parquet", str(pq_out), "--json"
    )
    assert code == 0, err
    got = json.loads(stdout)
    assert (got["rows"], got["format"], got["batch"], got["path"]) == (5, "parquet", None, str(pq_out))
    table = pq.read_table(pq_out).to_pandas()
    assert sorted(table["id"]) == [11, 12, 13, 20, 22]
    both = table[table["id"] == 13].iloc[0]
    assert list(both["_wap_checks"]) == ["not_null(name)", "range(qty)"]  # a list in Parquet
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_cli_export_bad_input(lake: Lakehouse, tmp_path: Path) -> None:
    out = str(tmp_path / "x.csv")
    code, _, err = cli_as(lake, "root", "quarantine", "export", str(ORD), "--format", "xlsx", out)
    assert code == 2 and "invalid choice" in err
    code, _, err = cli_as(lake, "root", "quarantine", "export", str(ORD), out)
    assert code == 2 and "--format" in err
    code, _, err = cli_as(lake, "root", "quarantine", "export", str(OTHER), "--format", "csv", out)
    assert (
        code == 2
        and err.strip()
        == f"error: {OTHER} has no quarantine table ({quarantine_table_id(OTHER)}): nothing was quarantined"
    )
    code, _, err = cli_as(lake, "root", "quarantine", "export", "shop.nope", "--format", "csv", out)
    assert code == 2 and err.count("\n") == 1 and "shop.nope" in err
    code, _, err = cli_as(
        lake, "root", "quarantine", "export", str(ORD), "--format", "csv", str(tmp_path / "no" / "x.csv")
    )
    assert code == 2 and "does not exist" in err
    assert not Path(out).exists()


def test_cli_quarantine_table_branch_still_quarantines(lake: Lakehouse) -> None:
    r = ingest(
        lake,
        ORD,
        [write_csv(Path(lake.settings.home) / "src" / "w3.csv", HEADER, [(30, None, 1), (31, "z", 1)])],
        branch="w3",
        user=SAM,
    )
    assert r.audit is not None and r.audit.status is CheckStatus.FAILED
    code, out, err = cli_as(lake, SAM, "quarantine", str(ORD), "w3", "--reason", "nulls", "--json")
    assert code == 0, err
    assert json.loads(out)["quarantined"] == 1
    assert quarantine_rows(lake, ORD, batch="w3").total == 1


def test_review_offers_the_quarantine_to_who_may_only(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Review's Quarantine button (AppTest, the real page): a steward sees it, a viewer does not."""
    r = ingest(
        lake,
        ORD,
        [write_csv(Path(lake.settings.home) / "src" / "w5.csv", HEADER, [(50, None, 1)])],
        branch="w5",
        user=SAM,
    )
    assert r.audit is not None and r.audit.status is CheckStatus.FAILED
    shown = {}
    for user in (SAM, "viewer@corp.test"):
        with monkeypatch.context() as mp:
            use_env(mp, lake_env(lake.settings, user, access=True, roots=True, WAP_SPARK_EAGER="0"))
            at = app_test("pages/review.py", table=str(ORD), branch="w5")
            shown[user] = [b.label for b in at.button if b.label == "Quarantine failing rows"]
    assert shown == {SAM: ["Quarantine failing rows"], "viewer@corp.test": []}


def _stopped_within(
    call: Callable[[], object], seconds: float, lake: Lakehouse
) -> tuple[BaseException, float]:
    """Run ``call`` (a Spark read) in a thread: the error it ended with and how long it took. Not ended within
    ``seconds``: every job is cancelled (so that the module goes on) and the test fails (the read is unbounded)."""
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            call()
        except Exception as exc:
            box["error"] = exc

    t0 = time.monotonic()
    worker = InheritableThread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    took = time.monotonic() - t0
    if worker.is_alive():
        lake.spark.sparkContext.cancelAllJobs()
        worker.join(60)
        pytest.fail(f"the read still ran after {seconds:g} s: it is not bounded by WAP_QUERY_TIMEOUT")
    assert "error" in box, f"the runaway read returned after {took:.1f} s instead of being cancelled"
    return box["error"], took


def test_the_views_reads_are_cancelled_after_the_query_timeout(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Summary, rows and export run their Spark work as the user's jobs under WAP_QUERY_TIMEOUT: made to run
    away (the real quarantined rows, each crossed with a range cross join of 10^14 rows, as the jobs-layer
    runaway of tests/test_jobs.py), each is cancelled with the one-line timeout error and no job keeps running."""
    quick = Lakehouse(lake.settings.with_(query_timeout=1))
    big = lake.spark.range(0, 10**7, numPartitions=4)
    pairs = big.alias("a").crossJoin(big.alias("b")).select((F.col("a.id") * F.col("b.id")).alias("__wap_x"))
    real = quarantine_view._frame

    def runaway(*args: object, **kwargs: object) -> object:
        frame = real(*args, **kwargs)  # type: ignore[arg-type]
        assert frame is not None
        return (
            frame.crossJoin(pairs)
            .where(F.col("__wap_x") >= 0)
            .select(*[F.col(f"`{c}`") for c in frame.columns])
        )

    monkeypatch.setattr(quarantine_view, "_frame", runaway)
    out = Path(lake.settings.home) / "slow.csv"
    reads: dict[str, Callable[[], object]] = {
        "the quarantine summary": lambda: quarantine_summary(quick, ORD, user=SAM),
        "the quarantined rows": lambda: quarantine_rows(quick, ORD, user=SAM),
        "the export of the quarantined rows": lambda: export_quarantine(quick, ORD, fmt="csv", path=out),
    }
    tracker = lake.spark.sparkContext.statusTracker()
    for what, call in reads.items():
        error, took = _stopped_within(call, 45, lake)
        assert isinstance(error, QueryTimeoutError), error
        msg = str(error)
        assert "\n" not in msg and msg.startswith(f"cancelled: {what} of {ORD} ran longer than"), msg
        assert "WAP_QUERY_TIMEOUT (1 s)" in msg, msg
        assert took >= 1, took  # it ran until the limit: the read was slow, not refused
        wait_for(lambda: list(tracker.getActiveJobsIds()) == [], 15, f"the jobs of {what} to end")
    assert not out.exists()
