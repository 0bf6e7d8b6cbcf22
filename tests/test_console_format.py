"""Console formatting and ranking helpers (pure functions: no Spark, no server)."""

from __future__ import annotations

import json

import pandas as pd

from pages import _common as ui
from pages._review_parts import sample_order
from wap_core.analysis.diff import rank_changes
from wap_core.cli.output import format_cell as _cell
from wap_core.cli.output import json_default as _json_default
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
