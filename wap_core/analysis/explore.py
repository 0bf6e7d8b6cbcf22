"""Read-only browsing of any table at any ref: resolve refs, filter rows, run scoped SQL.

Nothing here writes. The SQL box runs one query over the temp view ``ref_view`` (the chosen ref's
rows) in a fresh Spark session; :mod:`wap_core.security.sql_guard` decides, by allowlist on Spark's parsed
and analyzed plans, whether the query may run (only relational operators over ``ref_view`` and
built-in functions it lists).

:func:`failing_rows` reads ALL the rows of a branch's batch that fail one check of the table's suite
(Explore's "failing rows of a check", beyond the audit's 20-row samples): the check is looked up by
its exact name in the checks file and builds its own filter (:meth:`CheckSpec.failing_frame`), so no
text of the request ever becomes SQL.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from wap_core.analysis import sandbox
from wap_core.analysis.batch_reads import batch_reads
from wap_core.checks import CheckSpec, MainContext, suite_for
from wap_core.exceptions import NotFoundError, ValidationError, WapError
from wap_core.identifiers import MAIN, TableId, quote_column, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake import jobs
from wap_core.lake.batch import CHANGE, batch_frame, changed_rows, read_method
from wap_core.lake.errors import spark_job_error
from wap_core.lake.spark import catalog_conf
from wap_core.security import sql_guard
from wap_core.security.access import Permission
from wap_core.session import session_of
from wap_core.values import JsonObject

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from wap_core.lake.jobs import QueryHandle
    from wap_core.lakehouse import Lakehouse

VIEW = sql_guard.VIEW
REF_KINDS = ("branch", "tag", "snapshot", "time")
FILTER_OPS = ("=", "!=", "<", "<=", ">", ">=", "contains", "is null", "is not null")
MAX_SQL_CHARS = sql_guard.MAX_SQL_CHARS
MAX_ROWS = 10_000
#: The SQL box reads ``ref_view`` as one split (one task), so one query holds one task slot at a time.
ONE_SPLIT = 1 << 60
_T = TypeVar("_T")


@dataclass(frozen=True)
class ResolvedRef:
    """A ref resolved to one immutable snapshot."""

    kind: str
    value: str
    snapshot_id: int
    at: str

    @property
    def label(self) -> str:
        """The ref as shown: kind, value, snapshot id and time."""
        return f"{self.kind} {self.value} (snapshot {self.snapshot_id}, {self.at})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def refs_of(tbl: Table) -> dict[str, list[str]]:
    """Branch names (main first) and tag names of a table."""
    branches = [MAIN] if MAIN in tbl.metadata.refs else []
    return {"branch": branches + cat.branch_names(tbl), "tag": cat.tag_names(tbl)}


def resolve_ref(tbl: Table, table: TableId, kind: str, value: str | int | datetime) -> ResolvedRef:
    """Resolve a branch, tag, snapshot id or point in time (on main) to a snapshot."""
    if kind not in REF_KINDS:
        raise ValidationError(f"unknown ref kind {kind!r}: use one of {', '.join(REF_KINDS)}")
    if kind in ("branch", "tag"):
        name = str(value)
        ref = tbl.metadata.refs.get(name)
        if ref is None or ref.snapshot_ref_type != kind:
            raise NotFoundError(f"{kind} {name!r} does not exist on {table}")
        snap_id = ref.snapshot_id
    elif kind == "snapshot":
        try:
            snap_id = int(str(value).strip())
        except ValueError as exc:
            raise ValidationError(f"snapshot id must be an integer, got {value!r}") from exc
        if tbl.metadata.snapshot_by_id(snap_id) is None:
            raise NotFoundError(f"snapshot {snap_id} does not exist on {table}")
    else:
        if not isinstance(value, datetime):
            try:
                value = datetime.fromisoformat(str(value))
            except ValueError as exc:
                raise ValidationError(
                    f"time must be ISO 8601 (e.g. 2024-01-31T12:00:00), got {value!r}"
                ) from exc
        when = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        ms = int(when.timestamp() * 1000)
        found = next(
            (s for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN)) if s.timestamp_ms <= ms), None
        )
        if found is None:
            raise NotFoundError(f"main of {table} has no snapshot at or before {when.isoformat()}")
        snap_id = found.snapshot_id
        value = when.isoformat(timespec="seconds")
    snap = tbl.metadata.snapshot_by_id(snap_id)
    if snap is None:  # pragma: no cover - refs always point at existing snapshots
        raise NotFoundError(f"snapshot {snap_id} does not exist on {table}")
    return ResolvedRef(kind, str(value), snap_id, _iso(snap.timestamp_ms))


def schema_rows(tbl: Table, snapshot_id: int) -> list[JsonObject]:
    """The schema in force at ``snapshot_id`` (from metadata)."""
    schema = cat.schema_at(tbl, snapshot_id)
    return [
        {
            "id": f.field_id,
            "column": f.name,
            "type": str(f.field_type),
            "required": f.required,
            "doc": f.doc or "",
        }
        for f in schema.fields
    ]


def rows(
    lh: Lakehouse,
    table: TableId,
    snapshot_id: int,
    filters: list[tuple[str, str, Any]] | None = None,
    limit: int = 200,
    *,
    user: str | None = None,
) -> pd.DataFrame:
    """Rows of ``table`` at ``snapshot_id``, filtered by (column, op, value) triples; values are literals."""
    from pyspark.sql import functions as F

    session_of(lh, user).authorize(Permission.READ, table=table)

    df = lh.read_snapshot(table, snapshot_id)
    columns = set(df.columns)
    for column, op, value in filters or []:
        if column not in columns:
            raise ValidationError(f"unknown column {column!r}")
        if op not in FILTER_OPS:
            raise ValidationError(f"unknown filter operator {op!r}: use one of {', '.join(FILTER_OPS)}")
        c = F.col(quote_column(column))
        if op == "is null":
            cond = c.isNull()
        elif op == "is not null":
            cond = c.isNotNull()
        elif op == "contains":
            cond = c.cast("string").contains(str(value))
        else:
            lit = F.lit(value).cast(df.schema[column].dataType)
            cond = {
                "=": c == lit,
                "!=": c != lit,
                "<": c < lit,
                "<=": c <= lit,
                ">": c > lit,
                ">=": c >= lit,
            }[op]
        df = df.where(cond)
    return df.limit(max(0, min(int(limit), MAX_ROWS))).toPandas()


def check_read_only(spark: SparkSession, sql: str) -> str:
    """Return the stripped statement if Spark parses it as one plain query over ``ref_view``; else ValidationError.

    This is the first stage of :mod:`wap_core.security.sql_guard` (the parsed plan, before anything is looked up);
    :func:`run_sql` and :func:`query_rows` add the decisive check of the analyzed plan.
    """
    sql_guard.parse_query(spark, sql)
    return (sql or "").strip()


def resolve_any_ref(tbl: Table, table: TableId, ref: str) -> ResolvedRef:
    """Resolve a branch or tag name, else an integer snapshot id, to a snapshot (``main`` is a branch)."""
    text = str(ref).strip()
    if not text:
        raise ValidationError("ref must not be empty: give a branch, a tag or a snapshot id")
    found = tbl.metadata.refs.get(text)
    if found is not None:
        return resolve_ref(tbl, table, str(found.snapshot_ref_type), text)
    try:
        int(text)
    except ValueError:
        raise NotFoundError(f"{table} has no branch or tag {text!r} (and it is not a snapshot id)") from None
    return resolve_ref(tbl, table, "snapshot", text)


def ref_session(lh: Lakehouse) -> SparkSession:
    """A fresh session (own temp views) on the shared SparkContext, with this lakehouse's catalog."""

    session = lh.spark.newSession()
    for k, v in catalog_conf(lh.settings).items():
        session.conf.set(k, v)
    # Defence in depth: no `format`.`path` relations in this session (the guard refuses them anyway).
    session.conf.set("spark.sql.runSQLOnFiles", "false")
    # One task per stage (with the one-split read of ref_view): a user's query holds one task slot of the
    # shared driver, however long its tasks run; FAIR pools cannot preempt a running task.
    session.conf.set("spark.sql.shuffle.partitions", "1")
    return session


def _with_ref_view(
    lh: Lakehouse,
    table: TableId,
    snapshot_id: int,
    sql: str,
    run: Callable[[DataFrame], _T],
    *,
    killable: bool = False,
) -> _T:
    """Bind ``ref_view`` to ``table`` at ``snapshot_id`` in a fresh session, guard ``sql`` and ``run`` it
    (``killable``: in a SQL-box worker the time limit kills; see :func:`sql_guard.check_analyzed`)."""
    shared = lh.spark
    session = ref_session(lh)
    jvm: Any = shared._jvm
    # The query's session must be the thread's active one (catalog lookups go through it).
    jvm.SparkSession.setActiveSession(session._jsparkSession)
    try:
        sql_guard.parse_query(session, sql)  # refuse before loading anything
        frame: DataFrame = (
            session.read.format("iceberg")
            .option("snapshot-id", str(snapshot_id))
            .option("split-size", str(ONE_SPLIT))  # every file in one scan task (see ref_session)
            .option("file-open-cost", "1")
            .load(lh.spark_name(table))
        )
        frame.createOrReplaceTempView(VIEW)
        df = sql_guard.read_only_query(session, sql, sql_guard.bound_relation(frame), killable=killable)
        try:
            return run(df)
        except WapError:
            raise
        except (
            Exception
        ) as exc:  # a runtime SQL error (bad cast, division) from the JVM: ERROR_CLASS: message
            raise spark_job_error(exc) from exc
    finally:
        jvm.SparkSession.setActiveSession(shared._jsparkSession)


@dataclass(frozen=True)
class QueryRequest:
    """One authorized read-only query: ``sql`` with ``ref_view`` bound to ``table`` at ``snapshot_id``, run
    as ``user``, at most ``cap`` rows (what a SQL-box worker receives, pickled)."""

    table: TableId
    snapshot_id: int
    sql: str
    cap: int
    user: str

    @property
    def what(self) -> str:
        """The query as its job group, time-out and busy messages name it."""
        return f"the query on {self.table} at snapshot {self.snapshot_id}"

    def rows(self, lh: Lakehouse, *, killable: bool = False) -> pd.DataFrame:
        """Run it on ``lh``'s Spark (the caller sets up its job group); ``killable``: in a SQL-box worker."""
        return _with_ref_view(
            lh,
            self.table,
            self.snapshot_id,
            self.sql,
            lambda df: df.limit(self.cap).toPandas(),
            killable=killable,
        )

    def result(self, lh: Lakehouse, *, killable: bool = False) -> SqlResult:
        """Run it on ``lh``'s Spark and return exact Python rows (the caller sets up its job group)."""

        def collect(df: DataFrame) -> SqlResult:
            got = df.limit(self.cap + 1).collect()
            types = [f.dataType for f in df.schema.fields]
            rows = tuple(tuple(_utc(v, t) for v, t in zip(r, types, strict=False)) for r in got[: self.cap])
            return SqlResult(tuple(df.columns), rows, len(got) > self.cap)

        return _with_ref_view(lh, self.table, self.snapshot_id, self.sql, collect, killable=killable)


def _authorized(
    lh: Lakehouse, table: TableId, snapshot_id: int, sql: str, limit: int, user: str | None
) -> QueryRequest:
    """The request, once ``user`` (default: the lakehouse's) may READ ``table``; ``limit`` capped at MAX_ROWS."""
    s = session_of(lh, user)
    who = s.user
    s.authorize(Permission.READ, table=table)
    return QueryRequest(table, snapshot_id, sql, max(1, min(int(limit), MAX_ROWS)), who)


def run_sql(
    lh: Lakehouse, table: TableId, snapshot_id: int, sql: str, limit: int = 1000, *, user: str | None = None
) -> pd.DataFrame:
    """Run one read-only query with ``ref_view`` bound to ``table`` at ``snapshot_id`` (at most ``limit`` rows).

    Its Spark jobs run in their own job group in the user's FAIR pool and are cancelled after
    ``WAP_QUERY_TIMEOUT`` seconds (:class:`~wap_core.exceptions.QueryTimeoutError`); see :mod:`wap_core.lake.jobs`.
    """
    q = _authorized(lh, table, snapshot_id, sql, limit, user)
    with jobs.user_jobs(lh.spark, q.user, q.what, timeout=lh.settings.query_timeout):
        return q.rows(lh)


def submit_query(
    lh: Lakehouse,
    table: TableId,
    snapshot_id: int,
    sql: str,
    limit: int = 1000,
    *,
    user: str | None = None,
    alive: Callable[[], bool] | None = None,
    isolation: Literal["process", "driver"] | None = None,
) -> QueryHandle[pd.DataFrame] | sandbox.SandboxQuery[pd.DataFrame]:
    """The console's SQL box: :func:`run_sql` started in the background; ``.cancel()`` it, ``.result(timeout)``
    waits for its rows.

    Authorization and the guard's parse stage are decided here, before anything starts; the guard's
    refusals and SQL errors come from ``result()``. The time limit (``WAP_QUERY_TIMEOUT``) holds as for
    :func:`run_sql`, and the query is cancelled as soon as ``alive()`` returns false (the console: the
    browser session is gone). Where it runs, ``isolation`` (default ``WAP_QUERY_ISOLATION``) says:

    * ``process`` (default): in a worker process with its own small Spark driver
      (:mod:`wap_core.analysis.sandbox`), killed on time-out, Cancel or the end of the session, so no
      query can hold the console's task slots;
    * ``driver``: in a thread on the console's shared driver, in the user's FAIR pool.
    """
    q = _authorized(lh, table, snapshot_id, sql, limit, user)
    if (isolation or lh.settings.query_isolation) == "driver":
        run = partial(q.rows, lh)
        return jobs.start(lh.spark, q.user, q.what, run, timeout=lh.settings.query_timeout, alive=alive)
    sql_guard.parse_query(lh.spark, sql)  # refuse at once, without a worker
    return sandbox.submit(lh, answer_in_worker, q.user, q.what, q, alive=alive)


def answer_in_worker(lh: Lakehouse, q: QueryRequest) -> pd.DataFrame:
    """A SQL-box worker's answer to one request of :func:`submit_query` (runs in the worker process)."""
    with jobs.user_jobs(lh.spark, q.user, q.what):
        return q.rows(lh, killable=True)


def result_in_worker(lh: Lakehouse, q: QueryRequest) -> SqlResult:
    """A SQL-box worker's answer to one request of :func:`bounded_query_rows` (runs in the worker process)."""
    with jobs.user_jobs(lh.spark, q.user, q.what):
        return q.result(lh, killable=True)


@dataclass(frozen=True)
class SqlResult:
    """Rows of a read-only query as Python values (exact: ints stay ints, decimals stay Decimals)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool  # more rows than the limit existed

    def json_rows(self) -> list[JsonObject]:
        """One object per row; dates, times and decimals as ISO/plain strings, binary as base64, NaN/inf as strings."""
        if len(set(self.columns)) != len(self.columns):
            dup = sorted({c for c in self.columns if self.columns.count(c) > 1})
            raise ValidationError(f"column names must be unique for JSON rows: alias {', '.join(dup)}")
        return [{c: json_value(v) for c, v in zip(self.columns, r, strict=False)} for r in self.rows]


def json_value(value: Any) -> Any:
    """A JSON-safe value that loses nothing: ints and bools as they are, the rest as exact strings."""
    from pyspark.sql import Row

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Row):
        return {k: json_value(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(json_value(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)


def _utc(value: Any, dtype: Any) -> Any:
    """PySpark hands TIMESTAMP (with local time zone) values over as naive local times: make them aware, in UTC."""
    from pyspark.sql.types import ArrayType, MapType, StructType, TimestampType

    if value is None:
        return None
    if isinstance(dtype, TimestampType) and isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    if isinstance(dtype, ArrayType):
        return [_utc(v, dtype.elementType) for v in value]
    if isinstance(dtype, MapType):
        return {_utc(k, dtype.keyType): _utc(v, dtype.valueType) for k, v in value.items()}
    if isinstance(dtype, StructType):
        from pyspark.sql import Row

        return Row(**{f.name: _utc(v, f.dataType) for f, v in zip(dtype.fields, value, strict=False)})
    return value


def query_rows(
    lh: Lakehouse, table: TableId, snapshot_id: int, sql: str, limit: int = 1000, *, user: str | None = None
) -> SqlResult:
    """Run one read-only query like :func:`run_sql` (in this driver) and return exact Python rows."""
    q = _authorized(lh, table, snapshot_id, sql, limit, user)
    with jobs.user_jobs(lh.spark, q.user, q.what, timeout=lh.settings.query_timeout):
        return q.result(lh)


def bounded_query_rows(
    lh: Lakehouse,
    table: TableId,
    snapshot_id: int,
    sql: str,
    limit: int = 1000,
    *,
    user: str | None = None,
    isolation: Literal["process", "driver"] | None = None,
) -> SqlResult:
    """The CLI's ``query``: :func:`query_rows` under a time limit that holds while Spark *plans* the query too.

    Spark's optimizer evaluates constant expressions (a regular expression on a literal) before any job
    exists, where cancelling the job group stops nothing. Where it runs, ``isolation`` (default
    ``WAP_QUERY_ISOLATION``) says, as for the console's SQL box (:func:`submit_query`):

    * ``process`` (default): in a SQL-box worker (:mod:`wap_core.analysis.sandbox`), killed at the time
      limit whatever it is doing; this process starts no Spark of its own (the worker runs the whole guard);
    * ``driver``: in this process's driver; the guard refuses a regular expression on constants, and the wait
      ends :data:`~wap_core.lake.jobs.STUCK_SECONDS` after the time limit even if Spark has not stopped (the
      CLI then exits, which ends its JVM).
    """
    q = _authorized(lh, table, snapshot_id, sql, limit, user)
    if (isolation or lh.settings.query_isolation) == "driver":
        run = partial(q.result, lh)
        return jobs.start(lh.spark, q.user, q.what, run, timeout=lh.settings.query_timeout).result()
    return cast("SqlResult", sandbox.submit(lh, result_in_worker, q.user, q.what, q).result())


# --------------------------------------------------------------------------- failing rows of a check


@dataclass(frozen=True)
class CheckGuide:
    """What the console offers for one check of a table's suite (from the checks file, no Spark):
    whether its failing rows can be read (``opens_rows``), and the table whose rows fix a failure
    (``fixed_by``, e.g. a ``references`` check's referenced table)."""

    name: str
    type: str
    opens_rows: bool
    fixed_by: TableId | None


def check_guides(lh: Lakehouse, table: TableId) -> dict[str, CheckGuide]:
    """The checks of ``table``'s suite in the checks file, by name (ChecksFileError when the file is broken)."""
    suite = suite_for(lh.settings.checks_file, table)
    return {
        s.name: CheckGuide(
            s.name, s.type, s.selects_rows, TableId.parse(s.fixed_by) if s.fixed_by is not None else None
        )
        for s in suite.checks
    }


@dataclass(frozen=True)
class FailingRows:
    """Every row of a branch's batch that fails one check (at most ``cap``; ``truncated`` when more fail)."""

    table: TableId
    branch: str
    check: str
    head: int
    rows: pd.DataFrame
    truncated: bool
    zoned: tuple[
        str, ...
    ] = ()  # the columns of type timestamp (an instant: UTC in ``rows``), not timestamp_ntz

    def csv(self) -> bytes:
        """The rows as CSV (UTF-8, a header row, NULL as an empty field): what the console's download holds.
        An instant (a ``timestamp`` column) is written with its zone, ISO 8601 in UTC (``2013-01-01T05:17:00Z``),
        the instant the console shows in local time; a ``timestamp_ntz`` stays zoneless, as stored."""
        import pandas as pd

        out = self.rows.copy()
        for c in self.zoned:
            if c in out.columns and pd.api.types.is_datetime64_any_dtype(out[c]):
                stamps = pd.to_datetime(out[c])
                out[c] = [
                    "" if pd.isna(v) else v.isoformat().replace("+00:00", "Z")
                    for v in (
                        stamps.dt.tz_localize("UTC") if stamps.dt.tz is None else stamps.dt.tz_convert("UTC")
                    )
                ]
        return str(out.to_csv(index=False)).encode("utf-8")


def _zoned(frame: DataFrame) -> tuple[str, ...]:
    """The columns of ``frame`` of Spark type ``timestamp`` (instants, read in the session's zone: UTC)."""
    from pyspark.sql.types import TimestampType

    return tuple(f.name for f in frame.schema.fields if isinstance(f.dataType, TimestampType))


@dataclass(frozen=True)
class FailingRowsRequest:
    """One authorized read of a check's failing rows: the check's spec from the checks file, the branch's lineage."""

    table: TableId
    branch: str
    spec: CheckSpec
    lineage: cat.Lineage
    cap: int
    user: str

    @property
    def what(self) -> str:
        """The read as its job group, time-out and cancel messages name it."""
        return f"the failing rows of {self.spec.name} on {self.table} {self.branch}"

    def read(self, lh: Lakehouse) -> FailingRows:
        """Run it on ``lh``'s Spark (the caller sets up its job group)."""
        lin, table = self.lineage, self.table

        inside = batch_reads(lh, table, self.branch, self.spec.other_tables())

        def read_main(t: TableId) -> DataFrame | None:
            # as the audit reads: this table's main at the batch's fork, another table of the batch at its
            # head there, any other table's current main
            if t == table:
                return lh.read_snapshot(table, lin.fork) if lin.fork is not None else None
            if str(t) in inside:
                return lh.read_snapshot(t, inside[str(t)].snapshot_id)
            return lh.read_main(t)

        ctx = MainContext(
            lh.spark,
            read_main,
            table,
            fork_snapshot_id=lin.fork,
            head_snapshot_id=lin.head,
            batch_reads=inside,
            method=read_method(lin)[0],
            read_head=lambda: lh.read_snapshot(table, lin.head),
        )
        try:
            frame = self.spec.failing_frame(batch_frame(lh.spark, lh.spark_name(table), lin), ctx)
            if frame is None:  # pragma: no cover - refused by failing_rows_request (selects_rows)
                raise ValidationError(f"check {self.spec.name!r} judges no rows")
            got: pd.DataFrame = frame.limit(self.cap + 1).toPandas()
        except WapError:
            raise
        except Exception as exc:  # a Spark error of the read (a cancelled job too): one line
            raise spark_job_error(exc) from exc
        truncated = len(got) > self.cap
        rows = got.iloc[: self.cap].reset_index(drop=True) if truncated else got
        return FailingRows(table, self.branch, self.spec.name, lin.head, rows, truncated, _zoned(frame))


CHANGED_ROWS = (
    "(changed rows)"  # Explore's pseudo-check: every row the branch changed (no check has this name)
)


@dataclass(frozen=True)
class ChangedRowsRequest:
    """One authorized read of every row a branch changed since its fork (inserted, updated before and after,
    deleted: :func:`wap_core.lake.batch.changed_rows`), for Explore and its CSV."""

    table: TableId
    branch: str
    key: tuple[str, ...]
    lineage: cat.Lineage
    cap: int
    user: str

    @property
    def what(self) -> str:
        """The read as its job group, time-out and cancel messages name it."""
        return f"the changed rows of {self.table} {self.branch}"

    def read(self, lh: Lakehouse) -> FailingRows:
        """Run it on ``lh``'s Spark (the caller sets up its job group)."""
        from pyspark.sql import functions as F

        frame = changed_rows(lh.spark, lh.spark_name(self.table), self.lineage, self.key)
        order = [F.col(f"`{k}`") for k in self.key if k in frame.columns]
        got: pd.DataFrame = frame.orderBy(*order, F.col(CHANGE).desc()).limit(self.cap + 1).toPandas()
        cols = [CHANGE, *[c for c in got.columns if c != CHANGE]]
        return FailingRows(
            self.table,
            self.branch,
            CHANGED_ROWS,
            self.lineage.head,
            got[cols].head(self.cap),
            len(got) > self.cap,
            _zoned(frame),
        )


def failing_rows_request(
    lh: Lakehouse, table: TableId, branch: str, check: str, limit: int = MAX_ROWS, *, user: str | None = None
) -> FailingRowsRequest | ChangedRowsRequest:
    """The read of ``check``'s failing rows on ``branch``, once ``user`` may READ ``table``: the branch
    must be open and ``check`` the exact name of a check of the table's suite that selects rows."""
    s = session_of(lh, user)
    who = s.user
    s.authorize(Permission.READ, table=table)
    validate_branch(branch)
    tbl = lh.table(table)
    cat.require_branch(tbl, table, branch)
    cap = max(1, min(int(limit), MAX_ROWS))
    if check == CHANGED_ROWS:
        key = suite_for(lh.settings.checks_file, table).key
        return ChangedRowsRequest(table, branch, key, cat.lineage(tbl, branch), cap, who)
    specs = {s.name: s for s in suite_for(lh.settings.checks_file, table).checks}
    spec = specs.get(check)
    if spec is None:
        raise NotFoundError(f"{table} has no check named {check!r} in {lh.settings.checks_file}")
    if not spec.selects_rows:
        raise ValidationError(
            f"check {check!r} ({spec.type}) judges the batch as a whole: it has no failing rows"
        )
    return FailingRowsRequest(
        table, branch, spec, cat.lineage(tbl, branch), max(1, min(int(limit), MAX_ROWS)), who
    )


def failing_rows(
    lh: Lakehouse, table: TableId, branch: str, check: str, limit: int = MAX_ROWS, *, user: str | None = None
) -> FailingRows:
    """Every row (at most ``limit``, capped at MAX_ROWS) of ``branch``'s batch (its rows since the fork) that
    fails ``check``, as ``user`` (READ on ``table``).

    The filter is the check's own (:meth:`CheckSpec.failing_frame`, built from the checks file's spec).
    Its Spark jobs run in their own job group in the user's FAIR pool, cancelled after ``WAP_QUERY_TIMEOUT``
    (:class:`~wap_core.exceptions.QueryTimeoutError`), as the SQL box's.
    """
    req = failing_rows_request(lh, table, branch, check, limit, user=user)
    with jobs.user_jobs(lh.spark, req.user, req.what, timeout=lh.settings.query_timeout):
        return req.read(lh)


def submit_failing_rows(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    check: str,
    limit: int = MAX_ROWS,
    *,
    user: str | None = None,
    alive: Callable[[], bool] | None = None,
) -> QueryHandle[FailingRows]:
    """The console's read of :func:`failing_rows` started in the background: ``.cancel()`` it (Cancel, the
    end of the browser session through ``alive()``), ``.result(timeout)`` waits; ``WAP_QUERY_TIMEOUT`` holds.
    Authorization and the look-up of the check are decided here, before anything starts."""
    req = failing_rows_request(lh, table, branch, check, limit, user=user)
    return jobs.start(
        lh.spark, req.user, req.what, partial(req.read, lh), timeout=lh.settings.query_timeout, alive=alive
    )
