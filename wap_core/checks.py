"""Data-quality checks: YAML parsed up front into typed specs, evaluated by Spark.

All row-level checks of a suite are evaluated in a single aggregation pass over
the new rows. Checks that must look at main (``unique`` against main,
``references``) push the batch's key range into the scan of main so that Iceberg
prunes main's data files by their column statistics. One broken check yields an
``error`` result; it never aborts the others.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import yaml

from wap_core.exceptions import ChecksFileError, ValidationError
from wap_core.identifiers import TableId, quote_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


class Level(str, Enum):
    FAIL = "fail"
    WARN = "warn"


class Outcome(str, Enum):
    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"
    ERROR = "error"


ROW_LEVEL = frozenset({"not_null", "accepted_values", "range", "pattern", "expression"})
CHECK_TYPES = frozenset(
    {*ROW_LEVEL, "unique", "row_count", "freshness", "references", "schema", "malformed_rows"}
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class CheckSpec:
    """One check, validated. ``args`` holds the type-specific, already-checked arguments."""

    type: str
    name: str
    columns: tuple[str, ...]
    level: Level = Level.FAIL
    args: Mapping[str, Any] = field(default_factory=dict)
    line: int | None = None
    max_failing_rows: int = 0

    @property
    def threshold(self) -> str:
        a = self.args
        if self.type == "row_count":
            parts = [f"min {a['min']}" if a.get("min") is not None else "", f"max {a['max']}" if a.get("max") is not None else ""]
            return ", ".join(p for p in parts if p)
        if self.type == "freshness":
            return f"newest within {a['max_age']}"
        if self.type == "schema":
            return "columns " + ", ".join(f"{k}:{v}" if v else k for k, v in a["columns"].items())
        base = f"<= {self.max_failing_rows} failing rows"
        if self.type == "range":
            base = f"[{a.get('min')}, {a.get('max')}], " + base
        return base


@dataclass(frozen=True)
class Suite:
    table: str
    checks: tuple[CheckSpec, ...]
    source: str | None = None


@dataclass
class CheckResult:
    """The outcome of one check, with diagnostics."""

    name: str
    type: str
    columns: list[str]
    level: str
    status: str
    observed: Any
    threshold: str
    failing_rows: int | None
    sample: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckResult:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- parsing


def parse_duration(text: str) -> float:
    """'36h' -> seconds. Units: s, m, h, d, w."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"invalid duration {text!r}: use a number and one of s, m, h, d, w (e.g. 36h)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def load_checks(path: str | Path) -> dict[str, Suite]:
    """Parse a whole checks file. Missing file -> no suites. Errors name file and line."""
    p = Path(path)
    if not p.exists():
        return {}
    try:
        text = p.read_text()
    except OSError as exc:
        raise ChecksFileError(str(p), None, f"cannot read: {exc.strerror}") from exc
    return parse_checks(text, str(p))


def parse_checks(text: str, source: str = "<checks>") -> dict[str, Suite]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ChecksFileError(source, line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ChecksFileError(source, _line(root), "the file must be a mapping from namespace.table to its suite")
    suites: dict[str, Suite] = {}
    for key_node, val_node in root.value:
        tname = _scalar(key_node, source)
        try:
            tid = TableId.parse(str(tname))
        except ValidationError as exc:
            raise ChecksFileError(source, _line(key_node), str(exc)) from exc
        if str(tid) in suites:
            raise ChecksFileError(source, _line(key_node), f"table {tid} is listed twice")
        if not isinstance(val_node, yaml.MappingNode):
            raise ChecksFileError(source, _line(val_node), f"{tid}: expected a mapping with a 'checks' list")
        body = {(_scalar(k, source)): v for k, v in val_node.value}
        unknown = set(body) - {"checks"}
        if unknown:
            raise ChecksFileError(source, _line(val_node), f"{tid}: unknown key(s) {sorted(unknown)}; expected 'checks'")
        checks_node = body.get("checks")
        if checks_node is None or not isinstance(checks_node, yaml.SequenceNode):
            raise ChecksFileError(source, _line(val_node), f"{tid}: 'checks' must be a list")
        specs: list[CheckSpec] = []
        for item in checks_node.value:
            specs.extend(_parse_check(item, source))
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ChecksFileError(source, _line(checks_node), f"{tid}: duplicate check name(s) {dup}; give each a 'name'")
        suites[str(tid)] = Suite(str(tid), tuple(specs), source)
    return suites


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar(node: yaml.Node, source: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise ChecksFileError(source, _line(node), "expected a plain value here")
    return yaml.safe_load(yaml.serialize(node))


def _plain(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def _parse_check(node: yaml.Node, source: str) -> list[CheckSpec]:
    line = _line(node)

    def fail(msg: str) -> ChecksFileError:
        return ChecksFileError(source, line, msg)

    if not isinstance(node, yaml.MappingNode) or len(node.value) != 1:
        raise fail("each check must be a one-key mapping {type: args}, e.g. '- not_null: [id]'")
    type_node, args_node = node.value[0]
    ctype = _scalar(type_node, source)
    if ctype not in CHECK_TYPES or ctype == "malformed_rows":
        allowed = ", ".join(sorted(CHECK_TYPES - {"malformed_rows"}))
        raise fail(f"unknown check type {ctype!r}; allowed: {allowed}")
    raw = _plain(args_node)
    opts: dict[str, Any]
    if isinstance(raw, Mapping):
        opts = dict(raw)
    elif isinstance(raw, (str, list)):
        opts = {"columns": raw}
    elif raw is None:
        opts = {}
    else:
        raise fail(f"{ctype}: arguments must be a column, a list of columns or a mapping")
    name = opts.pop("name", None)
    level_raw = opts.pop("level", "fail")
    try:
        level = Level(level_raw)
    except ValueError:
        raise fail(f"{ctype}: level must be 'fail' or 'warn', not {level_raw!r}") from None
    max_failing = opts.pop("max_failing_rows", 0)
    if not isinstance(max_failing, int) or isinstance(max_failing, bool) or max_failing < 0:
        raise fail(f"{ctype}: max_failing_rows must be a non-negative integer")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise fail(f"{ctype}: name must be a non-empty string")

    def columns(required: bool = True, key_single: str = "column") -> tuple[str, ...]:
        val = opts.pop("columns", None)
        single = opts.pop(key_single, None)
        if val is None and single is not None:
            val = single
        if isinstance(val, str):
            val = [val]
        if val is None or (isinstance(val, list) and not val):
            if required:
                raise fail(f"{ctype}: name the column(s) to check")
            return ()
        if not isinstance(val, list) or not all(isinstance(c, str) and c for c in val):
            raise fail(f"{ctype}: columns must be strings")
        return tuple(val)

    def done(args: dict[str, Any], cols: tuple[str, ...], default_name: str) -> CheckSpec:
        if opts:
            raise fail(f"{ctype}: unknown argument(s) {sorted(opts)}")
        return CheckSpec(ctype, name or default_name, cols, level, args, line, max_failing)

    if ctype == "not_null":
        cols = columns()
        if opts:
            raise fail(f"{ctype}: unknown argument(s) {sorted(opts)}")
        if len(cols) == 1 or name is None:
            return [CheckSpec(ctype, f"{name}[{c}]" if name and len(cols) > 1 else (name or f"not_null({c})"), (c,), level, {}, line, max_failing) for c in cols]
        return [CheckSpec(ctype, f"{name}[{c}]", (c,), level, {}, line, max_failing) for c in cols]
    if ctype == "unique":
        cols = columns()
        against_main = opts.pop("against_main", True)
        if not isinstance(against_main, bool):
            raise fail("unique: against_main must be true or false")
        return [done({"against_main": against_main}, cols, f"unique({', '.join(cols)})")]
    if ctype == "row_count":
        mn, mx = opts.pop("min", None), opts.pop("max", None)
        for label, v in (("min", mn), ("max", mx)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise fail(f"row_count: {label} must be a non-negative integer")
        if mn is None and mx is None:
            raise fail("row_count: give min and/or max")
        if mn is not None and mx is not None and mn > mx:
            raise fail("row_count: min is greater than max")
        return [done({"min": mn, "max": mx}, (), "row_count")]
    if ctype == "accepted_values":
        cols = columns()
        if len(cols) != 1:
            raise fail("accepted_values: give exactly one column")
        values = opts.pop("values", None)
        if not isinstance(values, list) or not values or any(isinstance(v, (list, dict)) for v in values):
            raise fail("accepted_values: 'values' must be a non-empty list of plain values")
        return [done({"values": values}, cols, f"accepted_values({cols[0]})")]
    if ctype == "range":
        cols = columns()
        if len(cols) != 1:
            raise fail("range: give exactly one column")
        mn, mx = opts.pop("min", None), opts.pop("max", None)
        for label, v in (("min", mn), ("max", mx)):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise fail(f"range: {label} must be a number")
        if mn is None and mx is None:
            raise fail("range: give min and/or max")
        if mn is not None and mx is not None and mn > mx:
            raise fail("range: min is greater than max")
        return [done({"min": mn, "max": mx}, cols, f"range({cols[0]})")]
    if ctype == "pattern":
        cols = columns()
        if len(cols) != 1:
            raise fail("pattern: give exactly one column")
        regex = opts.pop("regex", None)
        if not isinstance(regex, str) or not regex:
            raise fail("pattern: 'regex' must be a non-empty string")
        try:
            re.compile(regex)
        except re.error as exc:
            raise fail(f"pattern: invalid regex {regex!r}: {exc}") from exc
        return [done({"regex": regex}, cols, f"pattern({cols[0]})")]
    if ctype == "expression":
        sql = opts.pop("sql", None)
        if not isinstance(sql, str) or not sql.strip():
            raise fail("expression: 'sql' must be a SQL predicate, e.g. \"air_time > 0\"")
        if ";" in sql:
            raise fail("expression: 'sql' must be a single predicate (no ';')")
        return [done({"sql": sql}, (), name or f"expression({sql})")]
    if ctype == "freshness":
        cols = columns()
        if len(cols) != 1:
            raise fail("freshness: give exactly one timestamp column")
        max_age = opts.pop("max_age", None)
        try:
            seconds = parse_duration(str(max_age))
        except ValueError as exc:
            raise fail(f"freshness: {exc}") from exc
        return [done({"max_age": str(max_age), "max_age_seconds": seconds}, cols, f"freshness({cols[0]})")]
    if ctype == "references":
        cols = columns()
        if len(cols) != 1:
            raise fail("references: give exactly one column")
        ref_table = opts.pop("table", None)
        try:
            tid = TableId.parse(str(ref_table))
        except ValidationError as exc:
            raise fail(f"references: {exc}") from exc
        ref_col = opts.pop("ref_column", cols[0])
        if not isinstance(ref_col, str) or not ref_col:
            raise fail("references: ref_column must be a column name")
        return [done({"table": str(tid), "ref_column": ref_col}, cols, f"references({cols[0]} -> {tid}.{ref_col})")]
    if ctype == "schema":
        spec = opts.pop("columns", None)
        allow_extra = opts.pop("allow_extra", False)
        if isinstance(spec, list) and all(isinstance(c, str) for c in spec):
            spec = {c: None for c in spec}
        if not isinstance(spec, Mapping) or not spec:
            raise fail("schema: 'columns' must map column names to types (or list names)")
        spec = {str(k): (str(v).lower() if v is not None else None) for k, v in spec.items()}
        return [done({"columns": spec, "allow_extra": bool(allow_extra)}, tuple(spec), "schema")]
    raise fail(f"unsupported check type {ctype}")  # pragma: no cover


def suite_for(checks_file: Path, table: TableId) -> Suite:
    return load_checks(checks_file).get(str(table), Suite(str(table), (), str(checks_file)))


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class MainContext:
    """How checks reach main: a reader for a table's main (at a snapshot) and the batch's table."""

    spark: SparkSession
    read_main: Callable[[TableId], DataFrame | None]  # main of this or another table; None if no main
    table: TableId


def sql_literal(value: Any) -> str:
    """A Spark SQL literal for a value from the checks file (strings escaped, never pasted raw)."""
    import datetime as _dt

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"cannot use {value!r} in a check")
        return repr(value)
    if isinstance(value, _dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _fail_sql(spec: CheckSpec) -> str:
    """The SQL predicate that is TRUE for a row failing ``spec`` (names quoted, values as literals).

    Built as text so that a whole suite costs one round trip to the JVM per aggregate, not dozens.
    """
    a = spec.args
    c = quote_column(spec.columns[0])
    if spec.type == "not_null":
        return f"{c} IS NULL"
    if spec.type == "accepted_values":
        return f"{c} IS NOT NULL AND NOT ({c} IN ({', '.join(sql_literal(v) for v in a['values'])}))"
    if spec.type == "range":
        parts = [f"{c} < {sql_literal(a['min'])}" if a.get("min") is not None else "",
                 f"{c} > {sql_literal(a['max'])}" if a.get("max") is not None else ""]
        return f"{c} IS NOT NULL AND ({' OR '.join(p for p in parts if p)})"
    if spec.type == "pattern":
        return f"{c} IS NOT NULL AND NOT (CAST({c} AS STRING) RLIKE {sql_literal(a['regex'])})"
    raise ValueError(spec.type)  # pragma: no cover


def _fail_condition(spec: CheckSpec) -> Column:
    from pyspark.sql import functions as F

    if spec.type == "expression":
        # the user's SQL stays its own parsed expression, never spliced into a larger text
        return ~F.coalesce(F.expr(spec.args["sql"]).cast("boolean"), F.lit(False))
    return F.expr(_fail_sql(spec))


def _status(spec: CheckSpec, ok: bool) -> str:
    if ok:
        return Outcome.PASSED.value
    return Outcome.WARNED.value if spec.level is Level.WARN else Outcome.FAILED.value


def _result(spec: CheckSpec, ok: bool, observed: Any, failing: int | None, message: str = "", sample: list[dict[str, Any]] | None = None) -> CheckResult:
    return CheckResult(
        name=spec.name,
        type=spec.type,
        columns=list(spec.columns),
        level=spec.level.value,
        status=_status(spec, ok),
        observed=observed,
        threshold=spec.threshold,
        failing_rows=failing,
        sample=sample or [],
        message=message,
    )


def _error(spec: CheckSpec, exc: BaseException | str) -> CheckResult:
    return CheckResult(
        name=spec.name,
        type=spec.type,
        columns=list(spec.columns),
        level=spec.level.value,
        status=Outcome.ERROR.value,
        observed=None,
        threshold=spec.threshold,
        failing_rows=None,
        sample=[],
        message=_short_error(exc),
    )


def _short_error(exc: BaseException | str) -> str:
    text = str(exc)
    # Spark analysis errors carry a long plan; keep the first informative line.
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:500]


def jsonable(value: Any) -> Any:
    import datetime as _dt
    import decimal

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def _row_dict(row: Any) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in row.asDict().items()}


def _agg_sql(i: int, spec: CheckSpec) -> dict[str, str]:
    """The aggregates (output name -> SQL text) one check contributes to the single pass.

    Text, so a whole suite reaches Spark in one ``selectExpr`` call; names are backtick-quoted and
    values rendered as escaped literals (:func:`sql_literal`).
    """
    if spec.type == "expression":
        cond = f"NOT COALESCE(CAST(({spec.args['sql']}) AS BOOLEAN), FALSE)"
        return {f"c{i}_fail": f"count_if({cond})"}
    if spec.type in ROW_LEVEL:
        out = {f"c{i}_fail": f"count_if({_fail_sql(spec)})"}
        if spec.type == "range":
            c = quote_column(spec.columns[0])
            out.update({f"c{i}_min": f"min({c})", f"c{i}_max": f"max({c})"})
        return out
    if spec.type == "freshness":
        c = quote_column(spec.columns[0])
        return {
            f"c{i}_newest": f"CAST(max({c}) AS STRING)",
            f"c{i}_age": f"unix_timestamp(current_timestamp()) - unix_timestamp(CAST(max({c}) AS TIMESTAMP))",
        }
    if spec.type in ("unique", "references"):
        # the batch's key range, pushed into the scan of main so Iceberg prunes main's files
        c = quote_column(spec.columns[0])
        return {f"c{i}_lo": f"min({c})", f"c{i}_hi": f"max({c})"}
    return {}


def _named(aggs: dict[str, str]) -> list[str]:
    return [f"{text} AS `{name}`" for name, text in aggs.items()]


def _aggregate(batch: DataFrame, aggs: dict[int, dict[str, str]], results: dict[int, CheckResult], suite: Suite) -> dict[str, Any]:
    """One pass for every aggregate. Only if it fails (unknown column, bad SQL, a runtime error) are
    the checks run one by one, so a broken check becomes an ``error`` result and the others still run."""
    everything = {"_rows": "count(1)"}
    for texts in aggs.values():
        everything.update(texts)
    try:
        return batch.selectExpr(*_named(everything)).collect()[0].asDict()  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001
        values: dict[str, Any] = batch.selectExpr("count(1) AS _rows").collect()[0].asDict()
        for i, texts in list(aggs.items()):
            try:
                values.update(batch.selectExpr(*_named(texts)).collect()[0].asDict())
            except Exception as exc:  # noqa: BLE001
                results[i] = _error(suite.checks[i], exc)
                del aggs[i]
        return values


@dataclass
class Evaluation:
    results: list[CheckResult]
    rows: int


def observed_metrics(suite: Suite) -> list[Column]:
    """The suite's aggregates in a form ``DataFrame.observe`` can collect while the batch is written.

    Raises when any check cannot be built; callers then audit the written batch with its own pass.
    """
    from pyspark.sql import functions as F

    texts = {"_rows": "count(1)"}
    for i, spec in enumerate(suite.checks):
        texts.update(_agg_sql(i, spec))
    return [F.expr(t) for t in _named(texts)]


def evaluate(
    batch: DataFrame,
    suite: Suite,
    ctx: MainContext,
    sample_rows: int = 5,
    precomputed: Mapping[str, Any] | None = None,
) -> Evaluation:
    """Evaluate ``suite`` on the new rows ``batch``. Never raises for a broken check.

    ``precomputed`` holds the suite's aggregates observed while exactly these rows were written
    (see :func:`observed_metrics`); then the aggregate pass is not repeated.
    """
    from pyspark.sql import functions as F

    results: dict[int, CheckResult] = {}
    aggs: dict[int, dict[str, str]] = {}
    # 1. Each check's aggregates as SQL text (no Spark work yet).
    for i, spec in enumerate(suite.checks):
        try:
            texts = _agg_sql(i, spec)
            if texts:
                aggs[i] = texts
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            results[i] = _error(spec, exc)

    # 2. One pass for every aggregate (row count included), unless observed during the write.
    values: dict[str, Any] = {}
    wanted = {"_rows"} | {name for cols in aggs.values() for name in cols}
    if precomputed is not None and not results and wanted <= set(precomputed):
        values = dict(precomputed)
    else:
        values = _aggregate(batch, aggs, results, suite)
    for i, spec in enumerate(suite.checks):
        if spec.type in ("unique", "references") and i not in results:
            try:
                batch.select(*[F.col(quote_column(c)) for c in spec.columns])  # analysis only
            except Exception as exc:  # noqa: BLE001
                results[i] = _error(spec, exc)
    rows = int(values.get("_rows") or 0)

    # 3. Judge each check.
    failing_row_checks: list[int] = []
    for i, spec in enumerate(suite.checks):
        if i in results:
            continue
        try:
            results[i] = _judge(i, spec, values, rows, batch, ctx)
            if spec.type in ROW_LEVEL and (results[i].failing_rows or 0) > 0:
                failing_row_checks.append(i)
        except Exception as exc:  # noqa: BLE001
            results[i] = _error(spec, exc)

    # 4. Samples of failing rows: one job for all failing row-level checks.
    if failing_row_checks and sample_rows > 0:
        try:
            parts = [
                batch.where(_fail_condition(suite.checks[i])).limit(sample_rows).withColumn("__check", F.lit(i))
                for i in failing_row_checks
            ]
            union = parts[0]
            for p in parts[1:]:
                union = union.unionByName(p)
            for row in union.collect():
                d = _row_dict(row)
                idx = d.pop("__check")
                results[idx].sample.append(d)
        except Exception:  # noqa: BLE001 - samples are diagnostics; the verdicts stand
            pass
    return Evaluation([results[i] for i in range(len(suite.checks))], rows)


def _judge(i: int, spec: CheckSpec, v: Mapping[str, Any], rows: int, batch: DataFrame, ctx: MainContext) -> CheckResult:
    a = spec.args
    if spec.type in ROW_LEVEL:
        failing = int(v.get(f"c{i}_fail") or 0)
        observed: Any = failing
        if spec.type == "range":
            observed = {"failing_rows": failing, "min": jsonable(v.get(f"c{i}_min")), "max": jsonable(v.get(f"c{i}_max"))}
        pct = f" ({100.0 * failing / rows:.2f}% of {rows})" if rows else ""
        msg = f"{failing} of {rows} rows fail{pct}" if failing else f"all {rows} rows pass"
        return _result(spec, failing <= spec.max_failing_rows, observed, failing, msg)
    if spec.type == "row_count":
        ok = (a.get("min") is None or rows >= a["min"]) and (a.get("max") is None or rows <= a["max"])
        return _result(spec, ok, rows, None, f"batch has {rows} rows")
    if spec.type == "freshness":
        newest, age = v.get(f"c{i}_newest"), v.get(f"c{i}_age")
        if newest is None or age is None:
            return _result(spec, False, None, None, "no non-null value to measure freshness")
        ok = float(age) <= float(a["max_age_seconds"])
        return _result(spec, ok, {"newest": newest, "age_hours": round(float(age) / 3600.0, 2)}, None,
                       f"newest value {newest} is {float(age) / 3600.0:.1f} h old (max {a['max_age']})")
    if spec.type == "unique":
        return _judge_unique(i, spec, v, batch, ctx)
    if spec.type == "references":
        return _judge_references(i, spec, v, batch, ctx)
    if spec.type == "schema":
        return _judge_schema(spec, batch)
    raise ValueError(f"unknown check type {spec.type}")  # pragma: no cover


def _key_range_filter(df: DataFrame, column: str, lo: Any, hi: Any) -> DataFrame:
    from pyspark.sql import functions as F

    if lo is None or hi is None:
        return df.limit(0)
    c = F.col(quote_column(column))
    return df.where(c.isNotNull() & (c >= F.lit(lo)) & (c <= F.lit(hi)))


def _judge_unique(i: int, spec: CheckSpec, v: Mapping[str, Any], batch: DataFrame, ctx: MainContext) -> CheckResult:
    from pyspark.sql import functions as F

    keys = [F.col(quote_column(c)) for c in spec.columns]
    key_names = list(spec.columns)
    dup_groups = batch.groupBy(*keys).count().where(F.col("count") > 1)
    dup_stats = dup_groups.agg(F.coalesce(F.sum("count"), F.lit(0)).alias("rows"), F.count(F.lit(1)).alias("keys")).collect()[0]
    dup_rows = int(dup_stats["rows"])
    sample = [dict(_row_dict(r), __problem="duplicate in batch") for r in dup_groups.limit(3).collect()] if dup_rows else []
    in_main = 0
    a_main = bool(spec.args.get("against_main", True))
    if a_main:
        main = ctx.read_main(ctx.table)
        if main is not None:
            main_keys = _key_range_filter(main.select(*keys), key_names[0], v.get(f"c{i}_lo"), v.get(f"c{i}_hi"))
            clash = batch.select(*keys).join(main_keys.distinct(), on=key_names, how="left_semi")
            in_main = clash.count()
            if in_main:
                sample += [dict(_row_dict(r), __problem="already in main") for r in clash.limit(3).collect()]
    failing = dup_rows + in_main
    observed = {"duplicate_rows_in_batch": dup_rows, "rows_already_in_main": in_main}
    scope = "within the batch and against main" if a_main else "within the batch"
    msg = f"{dup_rows} rows share a key within the batch; {in_main} rows have a key already in main" if failing else f"keys unique {scope}"
    return _result(spec, failing <= spec.max_failing_rows, observed, failing, msg, sample)


def _judge_references(i: int, spec: CheckSpec, v: Mapping[str, Any], batch: DataFrame, ctx: MainContext) -> CheckResult:
    from pyspark.sql import functions as F

    col = spec.columns[0]
    ref_tid = TableId.parse(spec.args["table"])
    ref_col = spec.args["ref_column"]
    ref = ctx.read_main(ref_tid)
    if ref is None:
        return _result(spec, False, None, None, f"referenced table {ref_tid} has no data on main")
    ref_keys = _key_range_filter(ref.select(F.col(quote_column(ref_col)).alias("__ref")), "__ref", v.get(f"c{i}_lo"), v.get(f"c{i}_hi")).distinct()
    c = F.col(quote_column(col))
    missing = batch.where(c.isNotNull()).join(ref_keys, c == F.col("__ref"), "left_anti")
    stats = missing.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct(c).alias("values")).collect()[0]
    failing = int(stats["rows"])
    sample: list[dict[str, Any]] = []
    if failing:
        top = missing.groupBy(c.alias("value")).count().orderBy(F.desc("count")).limit(5).collect()
        sample = [{"value": jsonable(r["value"]), "rows": int(r["count"])} for r in top]
    msg = (
        f"{failing} rows ({int(stats['values'])} distinct values) of {col} are missing from {ref_tid}.{ref_col}"
        if failing
        else f"every {col} exists in {ref_tid}.{ref_col}"
    )
    return _result(spec, failing <= spec.max_failing_rows, {"missing_rows": failing, "missing_values": int(stats["values"])}, failing, msg, sample)


def _judge_schema(spec: CheckSpec, batch: DataFrame) -> CheckResult:
    actual = {f.name.lower(): f.dataType.simpleString().lower() for f in batch.schema.fields}
    expected: Mapping[str, str | None] = spec.args["columns"]
    problems: list[str] = []
    for name, typ in expected.items():
        got = actual.get(name.lower())
        if got is None:
            problems.append(f"missing column {name}")
        elif typ is not None and _norm_type(typ) != _norm_type(got):
            problems.append(f"column {name} is {got}, expected {typ}")
    if not spec.args.get("allow_extra"):
        extra = sorted(set(actual) - {k.lower() for k in expected})
        problems += [f"unexpected column {c}" for c in extra]
    msg = "; ".join(problems) if problems else "schema as expected"
    return _result(spec, not problems, problems or "as expected", None, msg)


_ALIASES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "str": "string", "text": "string", "bool": "boolean", "float64": "double", "real": "float"}


def _norm_type(t: str) -> str:
    t = t.strip().lower()
    return _ALIASES.get(t, t)


def summarize(results: Sequence[CheckResult]) -> str:
    """Overall status: failed if any fail-level check failed or any check errored, else warned/passed."""
    statuses = {r.status for r in results}
    if Outcome.FAILED.value in statuses or Outcome.ERROR.value in statuses:
        return Outcome.FAILED.value
    if Outcome.WARNED.value in statuses:
        return Outcome.WARNED.value
    return Outcome.PASSED.value
