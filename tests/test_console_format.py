"""Console formatting and ranking helpers (pure functions: no Spark, no server)."""

from __future__ import annotations

import json

import pandas as pd

from pages import _common as ui
from pages._review_parts import _changed_frame, sample_order
from wap_core.analysis.diff import SchemaChange, rank_changes
from wap_core.analysis.keyed_diff import CellChange, ChangedRow
from wap_core.cli.output import format_cell as _cell
from wap_core.cli.output import json_default as _json_default
from wap_core.cli.output import n_rows as _cli_rows
from wap_core.values import to_jsonable
from wap_core.workflow.status import TableInfo

BIG = 4887153865992560141  # a real 64-bit snapshot id that a float/JavaScript number rounds


def test_ids_stay_exact_text_even_next_to_none() -> None:
    df = ui.frame(
        [{"snapshot_id": BIG, "parent_id": None}, {"snapshot_id": BIG + 1, "parent_id": BIG}],
        ["snapshot_id", "parent_id"],
    )
    assert list(df["snapshot_id"]) == [str(BIG), str(BIG + 1)]
    assert list(df["parent_id"]) == ["", str(BIG)]
    assert float(BIG) != BIG  # the failure mode this guards against


def test_times_blanks_and_details() -> None:
    text = ui.local_time("2026-11-22T05:06:04.399748+00:00")
    assert text.startswith("2026-11-22 ") and len(text.split()) == 3 and "T05" not in text and "." not in text
    assert ui.local_time(None) == "" and ui.blank(None) == "" and ui.blank(float("nan")) == ""
    assert (
        ui.details_text({"rows": 5, "files": ["a.csv", "b.csv"], "none": None})
        == "rows: 5 · files: a.csv, b.csv"
    )
    assert ui.details_text({}) == ""


def test_row_counts_read_as_people_write_them() -> None:
    assert [_cli_rows(n) for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]  # the CLI: "wrote 1 row"
    assert [ui.n_rows(n) for n in (1, 2000)] == ["1 row", "2,000 rows"]  # the console


def test_cli_cells_and_json() -> None:
    import datetime as dt
    from decimal import Decimal

    assert _cell(None) == "" and _cell(["a", "b"]) == "a, b" and _cell({"k": 1, "n": None}) == "k=1"
    out = json.loads(
        json.dumps(
            {"d": Decimal("1.5"), "i": Decimal("3"), "t": dt.date(2026, 1, 2), "id": BIG},
            default=_json_default,
        )
    )
    assert out == {"d": 1.5, "i": 3, "t": "2026-01-02", "id": BIG}


def test_failing_row_sample_leads_with_failing_columns_then_key() -> None:
    cols = ["year", "month", "flight", "carrier", "air_time", "dest", "__problem"]
    assert sample_order(cols, ["air_time"], ["flight", "carrier"])[:4] == [
        "__problem",
        "air_time",
        "flight",
        "carrier",
    ]
    assert sample_order(["a", "b", "__check"], ["b"], []) == ["b", "a"]


def _col(name: str, main_null: float, batch_null: float, **extra: object) -> dict[str, object]:
    base = {
        "rows": 1000,
        "distinct": 50,
        "min": 0,
        "max": 100,
        "mean": 50.0,
        "quantiles": {"0.05": 5.0, "0.25": 25.0, "0.5": 50.0, "0.75": 75.0, "0.95": 95.0},
    }
    return {
        "name": name,
        "kind": "numeric",
        "main": {**base, "null_pct": main_null},
        "batch": {**base, "null_pct": batch_null, **extra},
    }


def test_rank_changes_standardizes_null_rate_and_distribution() -> None:
    ranked = rank_changes(
        [
            _col("steady", 1.0, 1.2),
            _col("nulls", 1.6, 16.1),
            _col("shifted", 0.0, 0.0, mean=53.0, quantiles={"0.05": 8.0, "0.95": 98.0}),
        ]
    )
    assert [r.column for r in ranked] == ["nulls", "shifted", "steady"]
    assert ranked[0].aspect == "null_rate" and 0.5 < ranked[0].score < 0.7
    assert ranked[1].aspect == "distribution"
    assert ranked[2].score < 0.05
    cat = {
        "name": "dest",
        "kind": "categorical",
        "main": {
            "null_pct": 0.0,
            "distinct": 3,
            "top_values": [{"value": "A", "pct": 50.0}, {"value": "B", "pct": 50.0}],
        },
        "batch": {
            "null_pct": 0.0,
            "distinct": 3,
            "top_values": [{"value": "A", "pct": 10.0}, {"value": "C", "pct": 90.0}],
        },
    }
    top = rank_changes([cat])[0]
    assert top.aspect == "top_values" and top.score > 0.8


def test_profile_frame_has_units_and_ids_as_text() -> None:
    df = ui.texts_for_ids(pd.DataFrame({"snapshot_id": [BIG], "x": [1]}))
    assert df["snapshot_id"][0] == str(BIG)


def test_content_hash_is_sha256_of_the_bytes_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    from wap_core.workflow.ingest import content_hash

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_bytes(b"id\n1\n")
    b.write_bytes(b"id\n2\n")
    assert content_hash([str(a), str(b)]) == hashlib.sha256(b"id\n1\nid\n2\n").hexdigest()


def test_find_duplicate_names_the_earlier_branch_and_progress_steps(make_lakehouse, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from helpers import write_csv

    from wap_core import TableId
    from wap_core.workflow.ingest import content_hash, find_duplicate, ingest

    lh = make_lakehouse(name="dup")
    t = TableId("demo", "dups")
    src = write_csv(tmp_path / "one.csv", ["id", "name"], [(1, "ann"), (2, "bob")])
    steps: list[tuple[str, int | None]] = []
    first = ingest(
        lh, t, [src], branch="first", create=True, progress=lambda step, rows: steps.append((step, rows))
    )
    assert [s for s, _ in steps] == ["reading", "writing", "auditing", "done"] and steps[-1][1] == 2
    dup = find_duplicate(lh, t, content_hash([src]))
    assert (
        dup is not None and dup.branch == "first" and dup.snapshot_id == first.snapshot_id and dup.open_branch
    )
    other = write_csv(tmp_path / "two.csv", ["id", "name"], [(3, "cy")])
    assert find_duplicate(lh, t, content_hash([other])) is None


def test_cli_broken_pipe_ends_quietly() -> None:
    """A reader that goes away (``| head -1``) ends the CLI with exit 0 and no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = (
        "import wap_core.cli.runner as c\n"
        "def run(args):\n    [print('{\"row\": %d}' % i) for i in range(200000)]\n    return 0\n"
        "c._run = run\nraise SystemExit(c.main(['branches', '--json']))\n"
    )
    p = subprocess.run(
        f'{sys.executable} -c "$CODE" | head -1; exit ${{PIPESTATUS[0]}}',
        shell=True,
        executable="/bin/bash",
        cwd=root,
        capture_output=True,
        text=True,
        env={"CODE": code, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert p.stdout == '{"row": 0}\n'
    assert p.returncode == 0 and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_spark_log_options_point_at_the_quiet_log4j2_file() -> None:
    from wap_core.lake import spark

    spark.set_spark_log_level("error")  # what the CLI sets without --debug
    opts = spark.java_log_options()
    assert (
        f"-Dlog4j2.configurationFile=file:{spark.LOG4J2_PROPERTIES}" in opts
        and "-Dwap.spark.log.level=error" in opts
    )
    assert "rootLogger.level = ${sys:wap.spark.log.level:-error}" in spark.LOG4J2_PROPERTIES.read_text()


def test_display_helpers_zone_blank_counts_ticks_and_latest_table() -> None:
    """The one look of every grid and chart (issue 19, 8); the Chromium test checks them on the pages."""
    df = pd.DataFrame({"t": pd.to_datetime(["2013-02-08 05:00:00", None]), "n": [1, None], "s": ["a", None]})
    shown = ui.zoned_times(df)
    assert shown["t"][0].startswith("2013-02-08 ") and len(shown["t"][0].split()) == 3  # date, time, zone
    assert shown["t"][1] == "" and shown["n"].dtype == df["n"].dtype and df["t"].dtype != object
    assert ui.COUNT_FORMAT == "%,d" and ui.NULL_TEXT == ""
    # ticks on whole units fitted to the span, formatted to that unit: 40 s of commits -> seconds
    times = pd.Series(pd.to_datetime(["2026-11-24 13:00:01", "2026-11-24 13:00:41"], utc=True))
    axis = ui.time_axis(times, "commit time").to_dict()
    assert axis["format"] == "%H:%M:%S" and axis["tickCount"] == ui.TICKS
    days = pd.Series(pd.to_datetime(["2026-11-01", "2026-11-11"], utc=True))  # ticks may fall every 12 hours
    assert ui.time_axis(days, "t").to_dict()["format"] == "%b %d %H:%M"
    days = pd.Series(pd.to_datetime(["2026-11-01", "2026-11-20"], utc=True))  # every day at the finest
    assert ui.time_axis(days, "t").to_dict()["format"] == "%b %d"
    assert ui.time_axis(times[:1], "t").to_dict()["format"] == "%H:%M:%S.%L"

    def info(table: str, last_updated: str | None) -> TableInfo:
        return TableInfo(table, 0, 0, 0, 0, None, last_updated, 0, (), 2, "")

    infos = [
        info("demo.airlines", "2026-11-24T13:00:00+00:00"),
        info("demo.flights", "2026-11-24T13:05:00+00:00"),
        info("demo.empty", None),
    ]
    assert ui.latest_table(infos, ["demo.airlines", "demo.empty", "demo.flights"]) == "demo.flights"
    assert ui.latest_table([], ["demo.a"]) == "demo.a" and ui.latest_table([], []) is None


def test_unlinked_breaks_every_literal_autolink_and_nothing_else() -> None:
    wj = ui.WORD_JOINER
    assert ui.unlinked("http://a.example") == f"http:{wj}//a.example"
    assert ui.unlinked("WWW.a.example") == f"WWW{wj}.a.example"
    assert ui.unlinked("ann@corp.example") == f"ann@{wj}corp.example"
    assert ui.unlinked("plain text, 3.5 % of rows: ok") == "plain text, 3.5 % of rows: ok"


# ----------------------------------------------------------------------------- issue 28, items 5, 6 and 8
def _profile(nulls: int, rows: int = 1000, **extra: object) -> dict[str, object]:
    return {
        "rows": rows,
        "nulls": nulls,
        "null_pct": 100.0 * nulls / rows,
        "distinct": 50,
        "min": 0,
        "max": 100,
        "mean": 50.0,
        "quantiles": {"0.05": 5.0, "0.25": 25.0, "0.5": 50.0, "0.75": 75.0, "0.95": 95.0},
        **extra,
    }


def _moved(name: str, main_nulls: int, batch_nulls: int, **batch: object) -> dict[str, object]:
    return {
        "name": name,
        "type": "int",
        "kind": "numeric",
        "main": _profile(main_nulls),
        "batch": _profile(batch_nulls, **batch),
    }


def _diff(columns: list[dict[str, object]], overlaps: list[tuple[str, str, int]]):  # type: ignore[no-untyped-def]
    from wap_core.analysis.diff import DiffResult
    from wap_core.lake.catalog import MetadataDiff

    meta = MetadataDiff("demo.t", "b", 1, 3, 1, False, 2, 10, 0, 2, 0, 100, 0, True, ("append",))
    return DiffResult.from_dict(
        {
            "metadata": to_jsonable(meta),
            "rows_added": 1000,
            "rows_deleted": 0,
            "columns": columns,
            "null_overlaps": [{"columns": [a, b], "rows": n} for a, b, n in overlaps],
        }
    )


def test_change_groups_order_by_stated_score_group_same_rows_and_chart_failed_checks_by_their_measure() -> (
    None
):
    from wap_core.analysis.diff import change_groups
    from wap_core.checks import CheckResult, Level
    from wap_core.states import CheckStatus

    diff = _diff(
        [
            # the cancelled flights: NULL on (nearly) the same 160 rows in three columns
            _moved("dep_time", 10, 160),
            _moved("arr_time", 10, 165),
            _moved("air_time", 10, 168),
            # as many new NULLs, on other rows: another cause
            _moved("tailnum", 10, 160),
            # a shift far larger than any null-rate move
            _moved("day", 0, 0, mean=90.0, quantiles={"0.05": 80.0, "0.95": 100.0}, min=80),
            # a failing not_null column whose distribution moved more than its null rate
            _moved("amount", 0, 3, mean=80.0, quantiles={"0.05": 60.0, "0.95": 99.0}),
            _moved("steady", 10, 10),
        ],
        [
            ("air_time", "arr_time", 165),
            ("air_time", "dep_time", 160),
            ("arr_time", "dep_time", 160),
            ("dep_time", "tailnum", 20),
            ("arr_time", "tailnum", 20),
            ("air_time", "tailnum", 20),
        ],
    )
    failed = CheckResult("not_null(amount)", "not_null", ["amount"], Level.FAIL, CheckStatus.FAILED, 3, "", 3)
    unique = CheckResult("unique(day)", "unique", ["day"], Level.FAIL, CheckStatus.FAILED, {}, "", 1)
    groups = change_groups(diff, [failed, unique])
    scores = [g.score for g in groups]
    assert scores == sorted(scores, reverse=True)  # by the score each chart states, largest first
    assert groups[0].columns == ("day",) and groups[0].aspect == "distribution"
    cancelled = next(g for g in groups if "dep_time" in g.columns)
    assert set(cancelled.columns) == {"dep_time", "arr_time", "air_time"} and cancelled.same_rows
    assert cancelled.aspect == "null_rate" and cancelled.columns[0] == "air_time"  # largest move first
    assert next(g for g in groups if "tailnum" in g.columns).columns == ("tailnum",)  # other rows
    amount = next(g for g in groups if "amount" in g.columns)
    assert amount.aspect == "null_rate" and amount.checks == ("not_null(amount)",)  # never its quantiles
    assert amount.score < 0.2 and amount is groups[-1]  # placed by the null-rate score it states
    assert all("steady" not in g.columns for g in groups)
    # without the failed check, amount is charted by what moved most in it: its distribution
    assert next(g for g in change_groups(diff) if "amount" in g.columns).aspect == "distribution"
    # an equal null count is not the same rows: without their overlap the columns stay apart
    apart = _diff([_moved("a", 0, 160), _moved("b", 0, 160)], [("a", "b", 40)])
    assert [g.columns for g in change_groups(apart)] == [("a",), ("b",)]


def test_values_read_as_values_and_computed_sql_columns_as_counts() -> None:
    assert [ui.number_text(v) for v in (1.0, 2400.0, 1348.331, 1348.331000, 16.14286, 2013, 0.0001)] == [
        "1",
        "2400",
        "1348.331",
        "1348.331",
        "16.143",
        "2013",
        "0.0001",
    ]
    assert ui.number_text(None) == "" and ui.number_text(float("nan")) == "" and ui.number_text("N1") == "N1"
    # a profile's means read alike down their column: two decimals each
    assert [ui.mean_text(v) for v in (1348.331, 12.5, 3, 2013.0, None, float("nan"))] == [
        "1348.33",
        "12.50",
        "3.00",
        "2013.00",
        "",
        "",
    ]
    df = pd.DataFrame({"year": [2013], "total": [594933341], "avg": [1.5], "origin": ["JFK"]})
    config = ui.computed_counts(df, ["year", "origin", "distance"])
    assert set(config) == {"total", "avg"}  # the table's own columns show as stored
    assert config["total"]["type_config"]["format"] == ui.COUNT_FORMAT


def test_times_never_wrap_and_time_bins_name_each_bin_once() -> None:
    text = ui.unbroken(ui.md("2026-11-26 17:21:02 UTC"))
    assert " " not in text and "-\u2060" in text  # no break at a space, nor after a hyphen
    # a few minutes of audits: 10-second bins, one label per bin start, each bar a bin wide
    times = ui.to_datetime(
        pd.Series(
            ["2026-11-26T16:52:01Z", "2026-11-26T16:52:03Z", "2026-11-26T16:53:40Z", "2026-11-26T16:55:05Z"]
        )
    )
    bins = ui.time_bins(times)
    assert bins.label == "10 seconds" and bins.format == "%H:%M:%S"
    assert list((bins.ends - bins.starts).dt.total_seconds()) == [10.0] * 4
    stamps = [tuple(sorted(t.items())) for t in bins.ticks]
    assert len(set(stamps)) == len(stamps) <= ui.MAX_TIME_LABELS + 1 and bins.ticks[0]["seconds"] == 0
    assert bins.domain == (pd.Timestamp("2026-11-26T16:52:00Z"), pd.Timestamp("2026-11-26T16:55:10Z"))
    days = ui.time_bins(ui.to_datetime(pd.Series(["2026-11-01T10:00:00Z", "2026-11-20T10:00:00Z"])))
    assert days.label == "day" and days.format == "%b %d"


def test_docs_name_each_text_dialogs_submit_button() -> None:
    """docs/console.md names the submit button of every dialog built by text_form as the page labels it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    labels = set()
    for page in (root / "pages").glob("*.py"):
        for node in ast.walk(ast.parse(page.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "text_form"
            ):
                labels |= {
                    k.value.value
                    for k in node.keywords
                    if k.arg == "submit" and isinstance(k.value, ast.Constant)
                }
    assert labels >= {"Confirm", "Roll back"}, labels
    docs = (root / "docs" / "console.md").read_text()
    assert not [label for label in labels if f"**{label}**" not in docs], labels


def test_changed_rows_and_schema_changes_render_from_their_types() -> None:
    rows = [
        ChangedRow({"id": 1}, (CellChange("name", "ann", "anne"),)),
        ChangedRow({"id": 2}, (CellChange("age", None, 30), CellChange("name", "bo", "bob"))),
    ]
    df, cols = _changed_frame(rows, ["id"])
    assert cols == ["name", "age"] and list(df.columns) == ["id", "name", "age"]
    assert df.to_dict("records") == [
        {"id": "1", "name": "ann → anne", "age": ""},
        {"id": "2", "name": "bo → bob", "age": " → 30"},
    ]
    changes = (
        SchemaChange("note", "added", None, "string"),
        SchemaChange("v", "type_changed", "int", "long"),
    )
    grid = pd.DataFrame(list(changes))
    assert list(grid.columns) == ["column", "kind", "old_type", "new_type"]
    assert grid.to_dict("records")[1] == {
        "column": "v",
        "kind": "type_changed",
        "old_type": "int",
        "new_type": "long",
    }
    assert to_jsonable(changes[0]) == {
        "column": "note",
        "kind": "added",
        "old_type": None,
        "new_type": "string",
    }
