"""Errors a person can act on (issue 19 item 7): Spark's error class and message in one line, in the
core, the CLI and the console; never a Py4J object name (``o2209.collectToPython``), never Spark's log.

Real Spark on a real Iceberg table: a runtime SQL error raised in a task (``map(id, 'a', id, 'b')``: a
duplicate map key on every row, so it fails while running, not while planning), the real CLI in its own
process (its own JVM with wap_core's log4j2 file) and the Explore page under Streamlit's AppTest.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, Settings, TableId
from wap_core.analysis import explore
from wap_core.exceptions import SparkJobError, ValidationError
from wap_core.lake.errors import spark_error_line
from wap_core.values import to_jsonable
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
T = TableId("demo", "codes")
RUNTIME_ERROR_SQL = "SELECT map(id, 'a', id, 'b') AS m FROM ref_view"  # passes the guard, fails in a task
PY4J = re.compile(r"\bo\d+\.\w+|collectToPython|Py4J|py4j|An error occurred while calling")
_names = itertools.count(1)


@pytest.fixture(scope="module")
def codes(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("errors")
    src = home / "src"
    src.mkdir()
    (src / "codes.csv").write_text("id,label\n1,a\n2,b\n3,c\n")
    lh = Lakehouse(
        Settings(
            home=home,
            user="seeder",
            catalog_name=f"errs{next(_names)}",
            shuffle_partitions=2,
            ingest_roots=(src,),
        )
    )
    r = ingest(lh, T, [str(src / "codes.csv")], create=True, branch="seed")
    publish(lh, T, r.branch)
    return lh


def _head(lh: Lakehouse) -> int:
    head = lh.table(T).metadata.refs["main"].snapshot_id
    return int(head)


def test_a_failed_task_is_its_error_class_and_message_in_one_line(codes: Lakehouse) -> None:
    with pytest.raises(Exception) as info:  # whatever PySpark raises (a Py4JJavaError)
        codes.spark.range(3).selectExpr("map(id, 'a', id, 'b') AS m").collect()
    line = spark_error_line(info.value)
    assert line.startswith("DUPLICATED_MAP_KEY: Duplicate map key "), line
    assert len(line.splitlines()) == 1 and not PY4J.search(line), line

    with pytest.raises(SparkJobError) as err:
        explore.run_sql(codes, T, _head(codes), RUNTIME_ERROR_SQL)
    msg = str(err.value)
    assert msg.startswith("SQL error: DUPLICATED_MAP_KEY: Duplicate map key "), msg
    assert err.value.error_class == "DUPLICATED_MAP_KEY" and isinstance(err.value, ValidationError)
    assert len(msg.splitlines()) == 1 and not PY4J.search(msg), msg
    with pytest.raises(SparkJobError) as err:  # the CLI's path
        explore.query_rows(codes, T, _head(codes), RUNTIME_ERROR_SQL)
    assert str(err.value).startswith("SQL error: DUPLICATED_MAP_KEY: ") and not PY4J.search(str(err.value))


def test_an_analysis_error_keeps_its_class_too(codes: Lakehouse) -> None:
    with pytest.raises(ValidationError) as err:
        explore.run_sql(codes, T, _head(codes), "SELECT no_such_column FROM ref_view")
    msg = str(err.value)
    assert msg.startswith("SQL error: UNRESOLVED_COLUMN.WITH_SUGGESTION: "), msg
    assert "no_such_column" in msg and len(msg.splitlines()) == 1 and not PY4J.search(msg)


def test_cli_query_runtime_error_is_exactly_one_line_on_stderr(codes: Lakehouse) -> None:
    s = codes.settings
    env = {
        **os.environ,
        "WAP_HOME": str(s.home),
        "WAP_CATALOG_NAME": s.catalog_name,
        "WAP_USER": "cli-user",
        "WAP_SHUFFLE_PARTITIONS": "2",
    }
    for var in ("WAP_CONFIG", "WAP_CATALOG_URI", "WAP_CATALOG_JDBC_URI", "WAP_WAREHOUSE", "WAP_CHECKS"):
        env.pop(var, None)
    p = subprocess.run(
        [sys.executable, "-m", "wap_core", "query", str(T), RUNTIME_ERROR_SQL],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr  # no Executor / TaskSetManager ERROR lines, no stack trace
    assert lines[0].startswith("error: SQL error: DUPLICATED_MAP_KEY: Duplicate map key "), lines
    assert not PY4J.search(lines[0]), lines


@pytest.fixture
def console_env(codes: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lakehouse]:
    s = codes.settings
    monkeypatch.setenv("WAP_HOME", str(s.home))
    monkeypatch.setenv("WAP_CATALOG_NAME", s.catalog_name)
    monkeypatch.setenv("WAP_USER", "steward-anna")
    for var in ("WAP_CONFIG", "WAP_CATALOG_URI", "WAP_CATALOG_JDBC_URI", "WAP_WAREHOUSE", "WAP_CHECKS"):
        monkeypatch.delenv(var, raising=False)
    yield codes


def test_explore_sql_box_shows_the_error_class_and_message(console_env: Lakehouse) -> None:
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.switch_page("pages/explore.py").run()
    assert not at.exception, [e.value for e in at.exception]
    box = next(a for a in at.text_area if a.label == "SQL")
    box.input(RUNTIME_ERROR_SQL)
    next(b for b in at.button if b.label == "Run query").click().run()
    assert not at.exception, [e.value for e in at.exception]
    shown = "\n".join(str(e.value) for e in at.error)
    plain = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", shown).replace("\u2060", "")  # Markdown escapes undone
    assert "DUPLICATED_MAP_KEY: Duplicate map key " in plain, shown
    assert len(at.error) == 1 and len(plain.strip().splitlines()) == 1, shown
    assert not PY4J.search(plain), shown


def test_a_check_failing_at_run_time_reads_its_error_class_in_the_audit(
    make_lakehouse, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(
        "demo.codes:\n  checks:\n    - expression: {name: dup_keys, sql: \"cardinality(map_from_arrays(array(id, id), array('a', 'b'))) > 0\"}\n"
    )
    src = tmp_path / "codes.csv"
    src.write_text("id,label\n1,a\n2,b\n")
    r = ingest(lh, T, [str(src)], create=True, branch="b1")
    check = next(c for c in r.audit.checks if c.name == "dup_keys")
    assert check.status == "error", to_jsonable(r.audit)
    assert "DUPLICATED_MAP_KEY: Duplicate map key " in check.message, check.message
    assert len(check.message.splitlines()) == 1 and not PY4J.search(check.message), check.message


def test_task_failure_log_lines_are_off_unless_debug() -> None:
    from wap_core.lake import spark

    try:
        spark.set_spark_log_level("error")  # the CLI without --debug, and the console
        assert "-Dwap.spark.task.log.level=off" in spark.java_log_options()
        spark.set_spark_log_level("warn")  # --debug
        assert "-Dwap.spark.task.log.level=warn" in spark.java_log_options()
    finally:
        spark.set_spark_log_level("error")
    conf = spark.LOG4J2_PROPERTIES.read_text()
    for name, logger in (
        ("executor", "executor.Executor"),
        ("tasksetmanager", "scheduler.TaskSetManager"),
        ("taskscheduler", "scheduler.TaskSchedulerImpl"),
    ):
        assert f"logger.{name}.name = org.apache.spark.{logger}" in conf
        assert f"logger.{name}.level = ${{sys:wap.spark.task.log.level:-off}}" in conf
