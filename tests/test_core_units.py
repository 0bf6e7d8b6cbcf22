"""Pure-Python parts of the core: names, settings, checks YAML (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wap_core.checks import Level, parse_checks
from wap_core.config import Settings, sqlalchemy_to_jdbc
from wap_core.durations import parse_duration
from wap_core.exceptions import ChecksFileError, ValidationError
from wap_core.identifiers import TableId, validate_branch
from wap_core.workflow.demo import CHECKS_YML

# the issue's example suite is the demo's demo.flights suite (CHECKS_YML); a freshness check besides
FRESHNESS = "demo.flights:\n  checks:\n    - freshness: {column: time_hour, max_age: 36h}\n"
PATTERN = '    - pattern: {column: tailnum, regex: "^N[0-9A-Z]+$", level: warn}'


@pytest.mark.parametrize(
    "bad",
    ["", "flights", "a.b.c", "x; DROP TABLE y.t", "demo.'t'", "demo.t-1", "1ns.t", "demo.", ".t", "demo.t t"],
)
def test_table_names_outside_the_allowlist_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        TableId.parse(bad)


def test_table_name_round_trip_and_quoting() -> None:
    t = TableId.parse("demo.flights")
    assert str(t) == "demo.flights"
    assert t.sql("wap", "audit_1") == "`wap`.`demo`.`flights`.`branch_audit_1`"


@pytest.mark.parametrize(
    "bad", ["", "main", "MAIN", "x; DROP TABLE y", "a'b", 'a"b', "a b", "a.b", "x" * 129]
)
def test_branch_names_are_validated(bad: str) -> None:
    with pytest.raises(ValidationError):
        validate_branch(bad)
    assert validate_branch("audit_20260101_000000") == "audit_20260101_000000"


def test_settings_from_env_and_toml(tmp_path: Path) -> None:
    (tmp_path / "wap.toml").write_text('spark_master = "local[1]"\nshuffle_partitions = 3\n')
    s = Settings.from_env({"WAP_HOME": str(tmp_path), "WAP_USER": "alice", "WAP_SHUFFLE_PARTITIONS": "5"})
    assert s.home == tmp_path and s.user == "alice"
    assert s.spark_master == "local[1]"  # from TOML
    assert s.shuffle_partitions == 5  # env beats TOML
    assert s.checks_file == tmp_path / "checks.yml"
    assert s.sqlalchemy_uri == f"sqlite:///{tmp_path.resolve()}/catalog.db"
    assert s.jdbc_uri == f"jdbc:sqlite:{tmp_path.resolve()}/catalog.db"
    (tmp_path / "wap.toml").write_text("nonsense = 1\n")
    with pytest.raises(ValidationError, match="unknown setting"):
        Settings.from_env({"WAP_HOME": str(tmp_path)})


def test_postgres_uri_translates_to_jdbc() -> None:
    assert (
        sqlalchemy_to_jdbc("postgresql+psycopg2://u:p@localhost:5433/cat")
        == "jdbc:postgresql://localhost:5433/cat?user=u&password=p"
    )


def test_issue_example_checks_file_parses_into_typed_specs() -> None:
    suites = parse_checks(CHECKS_YML, "checks.yml")
    checks = suites["demo.flights"].checks
    names = [c.name for c in checks]
    assert names[:2] == ["not_null(carrier)", "not_null(dep_time)"]  # one result per column
    assert len(checks) == 10
    pattern = next(c for c in checks if c.type == "pattern")
    lines = CHECKS_YML.splitlines()
    assert (
        pattern.level is Level.WARN and pattern.line == lines.index(PATTERN, lines.index("demo.flights:")) + 1
    )
    (fresh,) = parse_checks(FRESHNESS, "checks.yml")["demo.flights"].checks
    assert fresh.args["max_age_seconds"] == 36 * 3600
    ref = next(c for c in checks if c.type == "references")
    assert ref.args == {"table": "demo.airports", "ref_column": "faa"}


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("demo.t:\n  checks:\n    - not_nul: [a]\n", 3, "unknown check type 'not_nul'"),
        ("demo.t:\n  checks:\n    - range: {column: a, min: 5, max: 1}\n", 3, "min is greater than max"),
        ("demo.t:\n  checks:\n    - pattern: {column: a, regex: '('}\n", 3, "invalid regex"),
        ("demo.t:\n  checks:\n    - freshness: {column: a, max_age: soon}\n", 3, "invalid duration"),
        ("demo.t:\n  checks:\n    - accepted_values: {column: a}\n", 3, "'values' must be"),
        ("demo.t:\n  checks:\n    - references: {column: a, table: 'x; drop'}\n", 3, "invalid table name"),
        ("demo.t:\n  checks:\n    - not_null: [a]\n      unique: [b]\n", 3, "one-key mapping"),
        ("demo.t:\n  checks:\n    - expression: {sql: 'a > 0; DROP TABLE x'}\n", 3, "single predicate"),
        ("demo.t:\n  checks:\n    - not_null: {column: a, level: fatal}\n", 3, "level must be"),
        ("demo.t:\n  checks:\n    - row_count: {min: 1, colour: red}\n", 3, "unknown argument"),
        ("bad name:\n  checks: []\n", 1, "invalid table name"),
        ("demo.t:\n  chekcs: []\n", 2, "unknown key"),
        ("demo.t:\n  checks:\n  - [unclosed\n", 4, "invalid YAML"),
        ("demo.t:\n  checks:\n    - unique: [a]\n    - unique: [a]\n", 3, "duplicate check name"),
    ],
)
def test_invalid_checks_files_name_file_and_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(ChecksFileError) as info:
        parse_checks(text, "suite.yml")
    assert info.value.path == "suite.yml"
    assert info.value.line == line, str(info.value)
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"suite.yml:{line}: ")


def test_durations() -> None:
    assert parse_duration("90s").total_seconds() == 90
    assert parse_duration("1.5h").total_seconds() == 5400
    assert parse_duration("2w").total_seconds() == 14 * 86400
    with pytest.raises(ValueError):
        parse_duration("36 hours")
