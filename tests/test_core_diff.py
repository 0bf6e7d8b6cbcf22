"""The Spark diff: profiles of batch vs main, and main's profile kept current without rescans."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_csv

from wap_core import TableId
from wap_core.analysis.diff import SchemaChange, compute_diff, main_profile, profile_frame
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

T = TableId("demo", "m")
HEADER = ["id", "grp", "val"]


def _rows(start: int, n: int, nulls_every: int) -> list[tuple[object, ...]]:
    return [(i, f"g{i % 7}", None if i % nulls_every == 0 else i * 1.5) for i in range(start, start + n)]


def test_main_profile_after_a_publish_is_merged_not_rescanned(
    make_lakehouse, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse("demo.m:\n  checks:\n    - row_count: {min: 1}\n")
    r = ingest(lh, T, [write_csv(tmp_path / "a.csv", HEADER, _rows(1, 300, 10))], create=True)
    publish(lh, T, r.branch)
    b = ingest(lh, T, [write_csv(tmp_path / "b.csv", HEADER, _rows(301, 200, 4))], branch="b")
    d = compute_diff(lh, T, "b")  # the review: profiles main at the fork (scan) and the batch
    assert d.rows_added == 200 and d.rows_deleted == 0
    val = next(c for c in d.columns if c["name"] == "val")
    assert val["main"]["nulls"] == 30 and val["batch"]["nulls"] == 50
    publish(lh, T, "b")
    new_main = lh.table(T).metadata.refs["main"].snapshot_id
    assert new_main == b.snapshot_id

    import wap_core.analysis.diff as diff_mod

    def no_scan(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("main was rescanned although its profile can be merged")

    monkeypatch.setattr(diff_mod, "profile_frame", no_scan)
    merged = main_profile(lh, T, new_main)
    monkeypatch.undo()
    assert merged is not None and merged["source"].startswith("merged")
    truth = profile_frame(lh.read_snapshot(T, new_main))
    for name in HEADER:
        m, t = merged["columns"][name], truth["columns"][name]
        assert (m["rows"], m["nulls"], m["min"], m["max"]) == (t["rows"], t["nulls"], t["min"], t["max"]), (
            name
        )
        exact = lh.read_snapshot(T, new_main).select(name).distinct().where(f"{name} IS NOT NULL").count()
        assert abs(m["distinct"] - exact) <= max(1, 0.04 * exact), (
            name,
            m["distinct"],
            exact,
        )  # HLL sketch union
        if t["mean"] is not None:
            assert m["mean"] == pytest.approx(t["mean"])
    q = merged["columns"]["val"]["quantiles"]
    assert (
        q["0.0"] == truth["columns"]["val"]["quantiles"]["0.0"]
        and q["1.0"] == truth["columns"]["val"]["quantiles"]["1.0"]
    )
    assert (
        abs(q["0.5"] - truth["columns"]["val"]["quantiles"]["0.5"])
        < 0.1 * truth["columns"]["val"]["quantiles"]["0.5"]
    )
    assert "quantiles" in merged["columns"]["val"]["approximate"]
    cached = lh.profiles.load_profile(str(T), new_main)
    assert cached is not None and cached["source"] == merged["source"]


def test_schema_changes_of_a_branch_written_after_a_schema_change(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from wap_core.analysis.keyed_diff import keyed_diff

    lh = make_lakehouse()
    r = ingest(lh, T, [write_csv(tmp_path / "a.csv", HEADER, _rows(1, 5, 10))], create=True)
    publish(lh, T, r.branch)
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(T)} CREATE BRANCH evolved")
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(T)} ADD COLUMN note string")
    lh.spark.sql(f"INSERT INTO {lh.sql_name(T, 'evolved')} VALUES (99, 'g1', 1.0, 'new')")
    expected = [SchemaChange("note", "added", None, "string")]
    assert list(compute_diff(lh, T, "evolved").schema_changes) == expected
    assert (
        list(keyed_diff(lh, T, "evolved", ["id"]).schema_changes) == expected
    )  # one comparison for both diffs
