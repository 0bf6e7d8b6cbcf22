"""Every failing row of a check (Explore's "failing rows of a check"), read by the core with real Spark.

The demo's failing branch: each failing check that selects rows yields exactly its audit's failing-row
count, the check is found by its exact name in the checks file (never SQL from the request), and a check
judging the batch as a whole, an unknown name or main are refused. ``unique`` counts its duplicates within
the batch and the keys already in main.
"""

from __future__ import annotations

from pathlib import Path

import helpers
import pytest

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore as ex
from wap_core.exceptions import NotFoundError, QueryCancelledError, ValidationError
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.demo import FAILING_BRANCH
from wap_core.workflow.ingest import ingest, target_columns, template_csv
from wap_core.workflow.publish import publish

FLIGHTS = TableId("demo", "flights")


def test_all_failing_rows_of_each_failing_check_of_the_demo(demo_lakehouse: Lakehouse) -> None:
    lh = demo_lakehouse
    audit = latest_audit(lh, FLIGHTS, FAILING_BRANCH)
    assert audit is not None
    guides = ex.check_guides(lh, FLIGHTS)
    failing = [c for c in audit.checks if c.failing_rows and guides[c.name].opens_rows]
    assert {c.type for c in failing} >= {"not_null", "expression", "references"}, failing
    for c in failing:
        got = ex.failing_rows(lh, FLIGHTS, FAILING_BRANCH, c.name, user="analyst")
        assert not got.truncated and len(got.rows) == c.failing_rows, (c.name, len(got.rows), c.failing_rows)
        assert got.head == audit.snapshot_id
    by_type = {c.type: c for c in failing}
    refs = ex.failing_rows(lh, FLIGHTS, FAILING_BRANCH, by_type["references"].name)
    missing = refs.rows["dest"].value_counts().to_dict()
    assert missing["SJU"] == 103 and set(missing) >= {"SJU", "BQN", "STT", "PSE"}, missing
    assert guides[by_type["references"].name].fixed_by == TableId("demo", "airports")
    assert guides[by_type["not_null"].name].fixed_by is None
    nulls = ex.failing_rows(lh, FLIGHTS, FAILING_BRANCH, by_type["not_null"].name)
    assert nulls.rows["dep_time"].isna().all()
    csv = nulls.csv().decode("utf-8").splitlines()
    assert csv[0].split(",")[:3] == ["year", "month", "day"] and len(csv) == 1 + len(nulls.rows)
    # an instant (a timestamp column) is written with its zone, as the console shows it in local time
    assert "time_hour" in nulls.zoned, nulls.zoned
    at = csv[0].split(",").index("time_hour")
    assert all(line.split(",")[at].endswith("Z") for line in csv[1:]), csv[1]
    # the cap: the first rows, and the read says more fail
    capped = ex.failing_rows(lh, FLIGHTS, FAILING_BRANCH, by_type["not_null"].name, limit=5)
    assert len(capped.rows) == 5 and capped.truncated


def test_the_check_is_looked_up_by_its_exact_name_never_built_from_the_request(
    demo_lakehouse: Lakehouse,
) -> None:
    lh = demo_lakehouse
    for bad in ("not_null(dep_time) OR 1=1", "NOT_NULL(DEP_TIME)", "not_null(dep_time) ", "dep_time IS NULL"):
        with pytest.raises(NotFoundError, match="has no check named"):
            ex.failing_rows_request(lh, FLIGHTS, FAILING_BRANCH, bad)
    with pytest.raises(ValidationError, match="as a whole"):
        ex.failing_rows_request(lh, FLIGHTS, FAILING_BRANCH, "row_count")
    with pytest.raises(ValidationError, match="reserved"):
        ex.failing_rows_request(lh, FLIGHTS, "main", "not_null(dep_time)")
    with pytest.raises(NotFoundError, match="does not exist"):
        ex.failing_rows_request(lh, FLIGHTS, "no_such_branch", "not_null(dep_time)")


def test_the_read_is_user_started_spark_work_it_can_be_cancelled(demo_lakehouse: Lakehouse) -> None:
    handle = ex.submit_failing_rows(demo_lakehouse, FLIGHTS, FAILING_BRANCH, "not_null(dep_time)", user="a")
    handle.cancel()
    with pytest.raises(QueryCancelledError, match="failing rows of not_null\\(dep_time\\)"):
        handle.result(120)


def test_unique_failing_rows_are_the_batch_duplicates_and_the_keys_in_main(
    make_lakehouse, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    t = TableId("shop", "ids")
    lh = make_lakehouse("shop.ids:\n  checks:\n    - unique: [id]\n")
    first = ingest(
        lh,
        t,
        [helpers.write_csv(tmp_path / "a.csv", ["id", "v"], [(1, "a"), (2, "b"), (3, "c")])],
        create=True,
    )
    publish(lh, t, first.branch)
    rows = [(3, "again"), (4, "x"), (4, "y"), (5, "z")]
    batch = ingest(lh, t, [helpers.write_csv(tmp_path / "b.csv", ["id", "v"], rows)], branch="b")
    (check,) = [c for c in batch.audit.checks if c.type == "unique"]
    got = ex.failing_rows(lh, t, "b", check.name)
    assert sorted(map(tuple, got.rows.values.tolist())) == [(3, "again"), (4, "x"), (4, "y")]
    assert len(got.rows) == check.failing_rows == 3
    assert [c.name for c in target_columns(lh, t)] == ["id", "v"]
    assert template_csv(target_columns(lh, t)) == b"id,v\n"
