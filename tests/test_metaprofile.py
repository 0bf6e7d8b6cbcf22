"""Main's profile metadata-first: exact where the manifests are exact, marked approximate elsewhere, never a full scan."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import write_csv

from wap_core import TableId
from wap_core.analysis.diff import compute_diff, main_profile, profile_frame
from wap_core.lake.metaprofile import metadata_profile, metrics_mode
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

T = TableId("demo", "wide")
LONG = "a-long-label-well-past-sixteen-characters-"  # Iceberg truncates string bounds to 16 characters by default


def _create_wide(lh: Any, rows: int = 3000, files: int = 4, props: str = "") -> int:
    """A real table with several data files, NULLs in every column, a long-string column and per-column metrics modes."""
    name = lh.sql_name(T)
    lh.catalog.create_namespace_if_not_exists("demo")
    lh.spark.sql(
        f"CREATE TABLE {name} (id bigint, grp string, val double, amount decimal(10,2), day date, ts timestamp, "
        "flag boolean, label string, note string, q int) USING iceberg TBLPROPERTIES ("
        "'write.metadata.metrics.column.note'='full', 'write.metadata.metrics.column.q'='counts'"
        + props
        + ")"
    )
    (
        lh.spark.range(0, rows)
        .selectExpr(
            "id",
            "CASE WHEN id % 11 = 0 THEN NULL ELSE concat('g', CAST(id % 7 AS string)) END AS grp",
            "CASE WHEN id % 13 = 0 THEN NULL ELSE id * 1.5 END AS val",
            "CASE WHEN id % 17 = 0 THEN NULL ELSE CAST(id / 3.0 AS decimal(10,2)) END AS amount",
            "CASE WHEN id % 19 = 0 THEN NULL ELSE date_add(DATE'2024-01-01', CAST(id % 400 AS int)) END AS day",
            "CASE WHEN id % 23 = 0 THEN NULL ELSE timestamp_seconds(1700000000 + id * 37) END AS ts",
            "CASE WHEN id % 5 = 0 THEN NULL ELSE id % 2 = 0 END AS flag",
            f"CASE WHEN id % 29 = 0 THEN NULL ELSE concat('{LONG}', CAST(id AS string)) END AS label",
            f"CASE WHEN id % 31 = 0 THEN NULL ELSE concat('{LONG}', CAST(id % 97 AS string)) END AS note",
            "CASE WHEN id % 3 = 0 THEN NULL ELSE CAST(id % 1000 AS int) END AS q",
        )
        .repartitionByRange(files, "id")
        .sortWithinPartitions("id")
        .writeTo(name)
        .append()
    )  # files hold key ranges
    return int(lh.table(T).current_snapshot().snapshot_id)


class _NoSparkJobs:
    """Counts the Spark jobs started in this thread while the block runs (a job group of its own)."""

    def __init__(self, spark: Any, group: str) -> None:
        self.sc, self.group = spark.sparkContext, group

    def __enter__(self) -> _NoSparkJobs:
        self.sc.setJobGroup(self.group, "metadata profile must not start a job")
        return self

    def __exit__(self, *exc: object) -> None:
        self.jobs = list(self.sc.statusTracker().getJobIdsForGroup(self.group))
        self.sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


@pytest.fixture
def wide(make_lakehouse: Any) -> Iterator[tuple[Any, int]]:
    lh = make_lakehouse()
    yield lh, _create_wide(lh)


def test_metrics_mode_parsing() -> None:
    assert metrics_mode({}, "c").kind == "truncate" and metrics_mode({}, "c").length == 16
    props = {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.c": "truncate(8)"}
    assert (metrics_mode(props, "c").kind, metrics_mode(props, "c").length) == ("truncate", 8)
    assert metrics_mode(props, "d").kind == "counts" and not metrics_mode(props, "d").has_bounds
    assert metrics_mode({"write.metadata.metrics.default": "none"}, "d").has_counts is False


def test_metadata_profile_is_exact_where_the_manifests_are(wide: tuple[Any, int]) -> None:
    lh, snap = wide
    assert len(lh.table(T).inspect.files()) == 4  # several data files
    with _NoSparkJobs(lh.spark, "metaprofile-exact") as probe:
        prof, basis = metadata_profile(
            lh.table(T), T, snap, lh.spark, lh.spark_name(T), scan_max_rows=0, sample_rows=400, sample_files=2
        )
    assert probe.jobs == []  # manifests + a PyArrow read of a bounded sample: no Spark job, no full scan
    assert prof is not None and prof["source"] == "metadata" and "manifests of 4 data files" in basis
    assert (
        prof["sample"]["files"] == 2
        and prof["sample"]["files_total"] == 4
        and 0 < prof["sample"]["rows"] <= 400
    )

    truth = profile_frame(lh.read_snapshot(T, snap))  # one exact Spark aggregate over every row
    assert prof["rows"] == truth["rows"] == 3000
    for name, t in truth["columns"].items():
        m = prof["columns"][name]
        assert (m["type"], m["kind"], m["rows"]) == (t["type"], t["kind"], t["rows"]), name
        assert m["accuracy"]["rows"] == m["accuracy"]["nulls"] == "exact", name
        assert (m["nulls"], m["null_pct"]) == (t["nulls"], t["null_pct"]), name
        assert t["nulls"] > 0 or name == "id", name  # every column but the key has NULLs
        for f in ("min", "max"):
            if m["accuracy"][f] == "exact":
                assert m[f] == t[f], (name, f, m[f], t[f])
        for f in ("mean", "quantiles", "distinct"):  # from the sample: estimates, and marked so
            if m[f] is not None:
                assert m["accuracy"][f] == "approximate", (name, f)
        assert set(m["approximate"]) == {f for f, a in m["accuracy"].items() if a == "approximate"}
        assert m.hll is None and "hll" in m.to_json()  # stored with its (absent) sketch

    exact_bounds = {
        n
        for n, c in prof["columns"].items()
        if c["accuracy"]["min"] == c["accuracy"]["max"] == "exact" and c["min"] is not None
    }
    # label: long strings under truncate(16) -> truncated bounds; q: metrics mode 'counts' keeps no bounds
    assert exact_bounds == {"id", "grp", "val", "amount", "day", "ts", "note"}
    label, q = prof["columns"]["label"], prof["columns"]["q"]
    assert label["accuracy"]["min"] == label["accuracy"]["max"] == "approximate"
    assert (
        label["min"] <= truth["columns"]["label"]["min"] and label["max"] >= truth["columns"]["label"]["max"]
    )  # still bounds
    assert len(label["min"]) == 16 and truth["columns"]["label"]["min"].startswith(label["min"])  # a prefix
    assert q["accuracy"]["min"] == "approximate" and q["accuracy"]["nulls"] == "exact"
    assert "min" in q["approximate"] and "min" not in prof["columns"]["note"]["approximate"]
    val = prof["columns"]["val"]
    assert (
        val["quantiles"]["0.0"] == truth["columns"]["val"]["min"]
        and val["quantiles"]["1.0"] == truth["columns"]["val"]["max"]
    )
    assert val["mean"] == pytest.approx(truth["columns"]["val"]["mean"], rel=0.5)
    tv = prof["columns"]["grp"]["top_values"]
    assert tv and prof["columns"]["grp"]["accuracy"]["top_values"] == "approximate"
    assert {d["value"] for d in tv} <= {d["value"] for d in truth["columns"]["grp"]["top_values"]} | {
        f"g{i}" for i in range(7)
    } | {None}
    assert prof["columns"]["flag"]["top_values"] is not None  # booleans are categorical too


def test_puffin_ndv_gives_distinct_counts(wide: tuple[Any, int]) -> None:
    lh, snap = wide
    lh.spark.sql(
        f"CALL {lh.settings.catalog_name}.system.compute_table_stats(table => '{T}', columns => array('id', 'grp'))"
    )
    stats = lh.table(T).metadata.statistics
    assert stats and stats[0].snapshot_id == snap
    prof, basis = metadata_profile(
        lh.table(T), T, snap, lh.spark, lh.spark_name(T), scan_max_rows=0, sample_rows=300, sample_files=1
    )
    assert prof is not None and "Puffin NDV sketches for 2 column(s)" in basis
    assert prof["columns"]["id"]["distinct"] == pytest.approx(3000, rel=0.05)  # the sample alone saw 300 ids
    assert prof["columns"]["grp"]["distinct"] == 7
    assert prof["columns"]["id"]["accuracy"]["distinct"] == "approximate"  # a sketch's estimate


def test_delete_files_fall_back_to_an_exact_scan(
    make_lakehouse: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lh = make_lakehouse()
    snap = _create_wide(lh, props=", 'format-version'='2', 'write.delete.mode'='merge-on-read'")
    lh.spark.sql(f"DELETE FROM {lh.sql_name(T)} WHERE id % 10 = 1")
    after = int(lh.table(T).current_snapshot().snapshot_id)
    assert after != snap
    prof, basis = metadata_profile(lh.table(T), T, after, lh.spark, lh.spark_name(T), scan_max_rows=0)
    assert prof is None and "delete file" in basis
    import wap_core.lake.metaprofile as mp

    monkeypatch.setattr(mp, "SCAN_MAX_ROWS", 0)
    full = main_profile(lh, T, after)
    assert full is not None and full["source"] == "scan" and "delete file" in full["basis"]
    assert full["rows"] == 2700 and full["columns"]["id"]["nulls"] == 0  # the deleted rows are not counted
    assert main_profile(lh, T, snap)["source"] == "metadata"  # type: ignore[index]  # before the delete: no delete files


def test_first_diff_profiles_main_from_metadata_and_merges_after_publish(
    make_lakehouse: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wap_core.analysis.diff as diff_mod
    import wap_core.lake.metaprofile as mp

    monkeypatch.setattr(mp, "SCAN_MAX_ROWS", 0)
    monkeypatch.setattr(mp, "SAMPLE_ROWS", 50)
    t = TableId("demo", "m")
    header = ["id", "grp", "val"]
    lh = make_lakehouse("demo.m:\n  checks:\n    - row_count: {min: 1}\n")
    rows = [(i, f"g{i % 7}", None if i % 10 == 0 else i * 1.5) for i in range(1, 301)]
    r = ingest(lh, t, [write_csv(tmp_path / "a.csv", header, rows)], create=True)
    publish(lh, t, r.branch)
    fork = lh.table(t).metadata.refs["main"].snapshot_id
    ingest(
        lh,
        t,
        [write_csv(tmp_path / "b.csv", header, [(i, f"g{i % 3}", i * 2.0) for i in range(301, 501)])],
        branch="b",
    )
    d = compute_diff(lh, t, "b")
    assert d.main_profile["source"] == "metadata" and d.main_profile["sample"]["rows"] <= 50
    cached = lh.profiles.load_profile(str(t), fork)
    assert cached is not None and cached["source"] == "metadata"
    m = {c["name"]: c["main"] for c in d.columns}
    assert (m["id"]["min"], m["id"]["max"], m["val"]["nulls"]) == (1, 300, 30)
    assert m["id"]["accuracy"]["min"] == "exact" and "mean" in m["val"]["approximate"]
    assert "hll" not in m["id"]  # sketches never leave the core

    publish(lh, t, "b")
    new_main = lh.table(t).metadata.refs["main"].snapshot_id

    def no_profile(*_a: object, **_k: object) -> None:
        raise AssertionError("main was profiled again although its profile can be merged")

    monkeypatch.setattr(diff_mod, "profile_frame", no_profile)
    monkeypatch.setattr(mp, "metadata_profile", no_profile)
    merged = main_profile(lh, t, new_main)
    monkeypatch.undo()
    assert merged is not None and merged["source"].startswith("merged") and "(metadata)" in merged["basis"]
    ids, grp = merged["columns"]["id"], merged["columns"]["grp"]
    assert (ids["rows"], ids["min"], ids["max"], ids["nulls"]) == (500, 1, 500, 0)
    assert ids["accuracy"]["min"] == ids["accuracy"]["max"] == ids["accuracy"]["rows"] == "exact"
    # no sketch of main: the batch's ids lie above main's exact range, so the distinct counts add up ...
    assert (
        ids["distinct"]
        == prof_distinct(cached, "id") + next(c for c in d.columns if c["name"] == "id")["batch"]["distinct"]
    )
    # ... while overlapping categories give the larger count as a lower bound; both marked approximate
    assert (
        grp["distinct"] == max(prof_distinct(cached, "grp"), 3)
        and grp["accuracy"]["distinct"] == "approximate"
    )
    assert "distinct" in ids["approximate"] and ids.hll is None


def prof_distinct(profile: dict[str, Any], column: str) -> int:
    return int(profile["columns"][column]["distinct"])


def test_sample_follows_schema_evolution_by_field_id(wide: tuple[Any, int]) -> None:
    lh, _ = wide
    name = lh.sql_name(T)
    lh.spark.sql(f"ALTER TABLE {name} RENAME COLUMN grp TO team")
    lh.spark.sql(f"ALTER TABLE {name} ADD COLUMN extra int")
    lh.spark.sql(f"INSERT INTO {name} VALUES (5000, 'g1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 7)")
    snap = int(lh.table(T).current_snapshot().snapshot_id)
    prof, _ = metadata_profile(
        lh.table(T), T, snap, lh.spark, lh.spark_name(T), scan_max_rows=0, sample_rows=1000, sample_files=5
    )
    truth = profile_frame(lh.read_snapshot(T, snap))
    assert prof is not None and set(prof["columns"]) == set(truth["columns"]) and "team" in prof["columns"]
    team, extra = prof["columns"]["team"], prof["columns"]["extra"]
    # the renamed column is read from the old files by its field id: its sample has values
    assert {d["value"] for d in team["top_values"]} & {f"g{i}" for i in range(7)}
    assert (team["nulls"], team["min"], team["max"]) == (truth["columns"]["team"]["nulls"], "g0", "g6")
    # the added column has no stats in the files written before it: its nulls come from the sample, marked
    assert (
        extra["accuracy"]["nulls"] == "approximate"
        and extra["nulls"] >= 0.9 * truth["columns"]["extra"]["nulls"]
    )
    assert extra["accuracy"]["min"] == "approximate"
