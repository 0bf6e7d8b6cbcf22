"""Read-only browsing of any table at any ref: resolve refs, filter rows, run scoped SQL.

Nothing here writes. The SQL box accepts one SELECT/WITH statement over the temp view
``ref_view`` (the chosen ref's rows) and nothing else: Spark's own parser decides whether
the text is a query, every relation it names must be ``ref_view`` (or a CTE of the query),
and functions that reach into the JVM are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from wap_core import catalog as cat
from wap_core.access import Permission, authorize
from wap_core.exceptions import NotFoundError, ValidationError
from wap_core.identifiers import MAIN, TableId, quote_column

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from wap_core.lakehouse import Lakehouse

VIEW = "ref_view"
REF_KINDS = ("branch", "tag", "snapshot", "time")
FILTER_OPS = ("=", "!=", "<", "<=", ">", ">=", "contains", "is null", "is not null")
MAX_SQL_CHARS = 20_000
MAX_ROWS = 10_000
# Functions that call arbitrary Java methods or read files are refused even in a SELECT.
_FORBIDDEN_FUNCTIONS = ("reflect", "java_method", "try_reflect", "input_file_name", "read_files")
_COMMAND_CLASSES = (
    "org.apache.spark.sql.catalyst.plans.logical.Command",
    "org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand",
    "org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement",
)
_WRITE_WORDS = re.compile(
    r"Insert|Command|Create|Drop|Alter|Delete|Update|Merge|Overwrite|Truncate|Replace|Refresh|Cache|Uncache|"
    r"Analyze|Repair|Set|Reset|Use|Load|Describe|Show|Explain|Comment|Rename|Call|Add",
)


@dataclass(frozen=True)
class ResolvedRef:
    """A ref resolved to one immutable snapshot."""

    kind: str
    value: str
    snapshot_id: int
    at: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.value} (snapshot {self.snapshot_id}, {self.at})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


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
                raise ValidationError(f"time must be ISO 8601 (e.g. 2024-01-31T12:00:00), got {value!r}") from exc
        when = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        ms = int(when.timestamp() * 1000)
        found = next((s for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN)) if s.timestamp_ms <= ms), None)
        if found is None:
            raise NotFoundError(f"main of {table} has no snapshot at or before {when.isoformat()}")
        snap_id = found.snapshot_id
        value = when.isoformat(timespec="seconds")
    snap = tbl.metadata.snapshot_by_id(snap_id)
    if snap is None:  # pragma: no cover - refs always point at existing snapshots
        raise NotFoundError(f"snapshot {snap_id} does not exist on {table}")
    return ResolvedRef(kind, str(value), snap_id, _iso(snap.timestamp_ms))


def schema_rows(tbl: Table, snapshot_id: int) -> list[dict[str, Any]]:
    """The schema in force at ``snapshot_id`` (from metadata)."""
    snap = tbl.metadata.snapshot_by_id(snapshot_id)
    sid = snap.schema_id if snap is not None and snap.schema_id is not None else tbl.metadata.current_schema_id
    schema = next(s for s in tbl.metadata.schemas if s.schema_id == sid)
    return [{"id": f.field_id, "column": f.name, "type": str(f.field_type), "required": f.required, "doc": f.doc or ""}
            for f in schema.fields]


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

    authorize(lh, user or lh.user, Permission.READ, table=table)

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
            cond = {"=": c == lit, "!=": c != lit, "<": c < lit, "<=": c <= lit, ">": c > lit, ">=": c >= lit}[op]
        df = df.where(cond)
    return df.limit(max(0, min(int(limit), MAX_ROWS))).toPandas()


def _is_instance(spark: SparkSession, class_name: str, obj: Any) -> bool:
    jvm: Any = spark._jvm
    try:
        klass = jvm.java.lang.Class.forName(class_name, False, obj.getClass().getClassLoader())
    except Exception:
        return False
    return bool(klass.isInstance(obj))


def _nodes(plan: Any) -> list[Any]:
    out, stack = [], [plan]
    while stack:
        node = stack.pop()
        out.append(node)
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return out


def check_read_only(spark: SparkSession, sql: str) -> str:
    """Return the stripped statement if it is one read-only query over ``ref_view``; else ValidationError."""
    text = (sql or "").strip()
    if not text:
        raise ValidationError("the SQL box is empty: write one SELECT over ref_view")
    if len(text) > MAX_SQL_CHARS:
        raise ValidationError(f"the statement is longer than {MAX_SQL_CHARS} characters")
    if ";" in text:
        raise ValidationError("only one statement is accepted: remove ';' (read-only SQL: one SELECT or WITH query)")
    if not re.match(r"^(select|with|\()", text, re.IGNORECASE):
        raise ValidationError("only read-only queries are accepted: start with SELECT or WITH")
    bad = re.search(r"\b(" + "|".join(_FORBIDDEN_FUNCTIONS) + r")\s*\(", text, re.IGNORECASE)
    if bad:
        raise ValidationError(f"function {bad.group(1)}() is not allowed in the read-only SQL box")
    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(text)  # type: ignore[attr-defined]
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValidationError(f"SQL does not parse: {msg[:500]}") from exc
    for node in _nodes(plan):
        name = node.getClass().getSimpleName()
        if any(_is_instance(spark, c, node) for c in _COMMAND_CLASSES) or (
            name not in ("UnresolvedWith", "UnresolvedRelation") and _WRITE_WORDS.match(name)
        ):
            raise ValidationError(f"refused: this console only runs read-only queries (the statement is a {name})")
    tree = plan.treeString()
    ctes = {n.strip().strip("`").lower() for m in re.finditer(r"CTE \[([^\]]*)\]", tree) for n in m.group(1).split(",") if n.strip()}
    allowed = {VIEW, *ctes}
    for m in re.finditer(r"UnresolvedRelation \[([^\]]*)\]", tree):
        parts = [p.strip().strip("`").lower() for p in m.group(1).split(",")]
        if len(parts) != 1 or parts[0] not in allowed:
            raise ValidationError(f"refused: queries may only read {VIEW} (the chosen ref), not {'.'.join(parts)}")
    if re.search(r"UnresolvedTableValuedFunction|UnresolvedInlineTable", tree) and "ref_view" not in tree.lower():
        raise ValidationError(f"refused: queries must read {VIEW}")
    return text


def ref_session(lh: Lakehouse) -> SparkSession:
    """A fresh session (own temp views) on the shared SparkContext, with this lakehouse's catalog."""
    from wap_core.spark import catalog_conf

    session = lh.spark.newSession()
    for k, v in catalog_conf(lh.settings).items():
        session.conf.set(k, v)
    return session


def run_sql(lh: Lakehouse, table: TableId, snapshot_id: int, sql: str, limit: int = 1000, *, user: str | None = None) -> pd.DataFrame:
    """Run one read-only query with ``ref_view`` bound to ``table`` at ``snapshot_id``."""
    authorize(lh, user or lh.user, Permission.READ, table=table)
    shared = lh.spark
    session = ref_session(lh)
    jvm: Any = shared._jvm
    # The query's session must be the thread's active one (catalog lookups go through it).
    jvm.SparkSession.setActiveSession(session._jsparkSession)
    try:
        text = check_read_only(session, sql)
        frame: DataFrame = (
            session.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(lh.spark_name(table))
        )
        frame.createOrReplaceTempView(VIEW)
        try:
            return session.sql(text).limit(max(1, min(int(limit), MAX_ROWS))).toPandas()
        except Exception as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValidationError(f"SQL error: {msg[:500]}") from exc
    finally:
        jvm.SparkSession.setActiveSession(shared._jsparkSession)
