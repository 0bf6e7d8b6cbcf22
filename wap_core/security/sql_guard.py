"""The guard of the read-only SQL box: one query over ``ref_view``, judged by allowlist on Spark's plans.

Nothing here looks at the SQL text with patterns. A statement is decided in two stages:

1. **Parsed plan** (:func:`parse_query`), before anything is looked up, analysed or run. Spark's own parser
   (the session's, with the Iceberg extensions) turns the text into a logical plan. Every node of it must be
   one of :data:`PARSED_OPERATORS` (so commands, ``SET``, ``ADD JAR``, ``CACHE``, DDL, DML, ``CALL``,
   ``EXPLAIN``, script transforms, table-valued functions, ``VALUES``, hints, time travel and
   ``IDENTIFIER(...)`` never reach the analyzer), every relation it names must be ``ref_view`` or a CTE of
   the query (one-part names: no catalogs, namespaces, metadata tables, branches or file paths), and every
   function it calls must be one of :data:`ALLOWED_FUNCTIONS` (one-part names, so no persistent or
   temporary user functions). This stage exists because even *analysing* some statements has effects
   (a file source lists and samples the files to infer a schema; ``reflect`` loads a Java class).
2. **Analyzed plan** (:func:`check_analyzed`), the decisive stage: Spark resolves the parsed plan (no
   execution) and every operator of the resolved tree, subqueries included, must be one of
   :data:`PLAN_OPERATORS`; every leaf must be the very Iceberg relation bound to ``ref_view`` (the
   chosen table at the chosen snapshot: same JVM table object, same read options, under the temp view
   ``ref_view``) or a reference to a CTE; every expression node of every operator must be a class of an
   allowed built-in function (looked up in Spark's built-in function registry from
   :data:`ALLOWED_FUNCTIONS`) or one of :data:`SYNTAX_EXPRESSIONS`. Spark-internal invocation nodes
   (:data:`INTERNAL_EXPRESSIONS`) are accepted only inside the replacement of an allowed built-in function.

3. **Optimized plan** (:func:`check_joins`), on the plan that runs (Spark's optimizer has pushed ``WHERE``
   equalities into join conditions and folded ``ON true``/``ON 1=1`` away): every join must have an equality
   between the two sides (Spark's own ``ExtractEquiJoinKeys``, the test its planner uses to choose a hash or
   sort-merge join; or a one-column ``NOT IN``, a null-aware hash anti join). Any other join is a nested loop
   (a cartesian product, with or without a condition) and is refused unless one side is at most
   :data:`MAX_NESTED_LOOP_ROWS` rows by construction (an aggregate without ``GROUP BY``, a ``LIMIT``), all of
   them together multiplying rows by at most that much. So ``CROSS JOIN``, ``FROM a, b`` without a ``WHERE``
   equality, ``ON true``, ``ON 1=1`` and theta joins (``ON a.x < b.x``) of two unbounded sides are refused;
   ``a CROSS JOIN (SELECT sum(x) ...)`` (a share of a total) is allowed.

:func:`read_only_query` runs the three stages and returns a lazy DataFrame whose plan is exactly the one checked.

Function choices (default: refused; the lists below are the whole of what is allowed):

- refused because they reach outside the query: ``reflect``/``java_method`` (arbitrary Java methods),
  ``input_file_name``/``input_file_block_*`` (server paths), ``current_user``/``user``/
  ``current_database``/``current_schema``/``current_catalog``/``current_timezone``/``version``
  (environment), ``xpath*`` (an XML parser over user text), ``aes_*`` (keys would sit in query text and
  logs; not an analyst's need), ``assert_true``/``raise_error``, any UDF (Scala, Python, Hive, SQL).
- refused because they are random or expose execution: ``rand``/``randn``/``random``/``uuid``/
  ``shuffle``/``monotonically_increasing_id``/``spark_partition_id``.
- refused because they only amplify data (memory exhaustion of the shared driver): ``sequence``,
  ``array_repeat``, ``repeat``, ``space``.
- allowed with their size arguments bounded (:func:`_check_arguments`, on the analyzed plan: a literal
  over the bound is refused, and so is any argument that is not a literal): ``lpad``/``rpad`` length at
  most :data:`MAX_PAD_LENGTH`; ``format_string``/``printf`` only with a literal format whose widths and
  precisions are at most :data:`MAX_PAD_LENGTH`; ``format_number`` at most :data:`MAX_FORMAT_DECIMALS`
  decimals (or a literal pattern); ``approx_count_distinct`` relative error at least
  :data:`MIN_RELATIVE_SD`; ``approx_percentile``/``percentile_approx`` accuracy at most
  :data:`MAX_PERCENTILE_ACCURACY`; ``histogram_numeric`` at most :data:`MAX_HISTOGRAM_BINS` bins;
  ``array_insert`` position at most :data:`MAX_ARRAY_INSERT_POSITION` either way.
- higher-order functions (:func:`_check_higher_order`): never one inside another's lambda (sizes multiply),
  and an ``aggregate``/``reduce`` accumulator of a fixed-size type (a growing one can double per element).
- regular expressions whose subject and pattern are both constants, where the query is planned in a driver
  nothing may kill (``killable=False``): Spark's optimizer evaluates them before any job exists.
- allowed although Spark marks them time- or order-dependent: ``current_date``/``current_timestamp``/
  ``now``/``curdate``/``localtimestamp`` (one value per query, read nothing but the clock; analysts need
  "last 30 days") and the order-sensitive aggregates ``first``/``last``/``any_value``/``collect_*``.

Time is not bounded here: an equi-join on a key with few distinct values (``ON a.k % 2 = b.k % 2``) is still
quadratic, and generators (``LATERAL VIEW explode``) multiply rows by the size of their arrays. Every query
runs in its own Spark job group in the user's FAIR pool and is cancelled after ``WAP_QUERY_TIMEOUT``
(:mod:`wap_core.lake.jobs`); the row count of a result is bounded by the caller.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from wap_core.exceptions import ValidationError
from wap_core.lake.errors import spark_error_line

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_Node = TypeVar("_Node")

VIEW = "ref_view"
MAX_SQL_CHARS = 20_000
#: Depth bound of the plan walk (a statement this deep is refused rather than walked).
MAX_PLAN_NODES = 5_000
#: Bounds of the size arguments of the amplifying functions (see :func:`_check_arguments`).
MAX_PAD_LENGTH = 10_000  # lpad/rpad length; width and precision in a format_string/printf format
MAX_FORMAT_DECIMALS = 100  # format_number decimals
MIN_RELATIVE_SD = 0.01  # approx_count_distinct relative standard deviation (Spark's default 0.05)
MAX_PERCENTILE_ACCURACY = 100_000  # approx_percentile accuracy (Spark's default 10000)
MAX_HISTOGRAM_BINS = 1_000  # histogram_numeric bins
MAX_ARRAY_INSERT_POSITION = 10_000  # array_insert position, either way (past the end it pads with nulls)
#: A join without an equality condition runs as a nested loop (every row of one side against every row of
#: the other: Spark's BroadcastNestedLoopJoin or CartesianProduct). It is allowed only when one side is at
#: most this many rows by construction, and all such joins of a query together multiply rows by at most
#: this much (see :func:`check_joins`).
MAX_NESTED_LOOP_ROWS = 1_000

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
_EXPR = "org.apache.spark.sql.catalyst.expressions."
_V2_RELATION = "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation"

#: Relational operators both stages accept (JVM class names relative to the logical plan package).
_RELATIONAL = (
    "Project",
    "Filter",
    "Aggregate",
    "Sort",
    "GlobalLimit",
    "LocalLimit",
    "Offset",
    "Join",
    "Union",
    "Intersect",
    "Except",
    "Distinct",
    "SubqueryAlias",
    "Generate",
    "Sample",
)

#: Operators the parser may produce for an accepted statement (JVM classes). Everything else, among them
#: every Command, InsertIntoStatement, SetCommand, AddJarsCommand, CacheTableStatement, CreateFunction,
#: ScriptTransformation, UnresolvedTableValuedFunction, UnresolvedInlineTable (VALUES), OneRowRelation
#: (SELECT without FROM), UnresolvedHint, RelationTimeTravel, PlanWithUnresolvedIdentifier, LateralJoin,
#: WithWindowDefinition and RepartitionByExpression, is refused before analysis.
PARSED_OPERATORS: frozenset[str] = frozenset(
    {
        *(_LOGICAL + op for op in (*_RELATIONAL, "UnresolvedWith", "Pivot")),
        _ANALYSIS + "UnresolvedRelation",
        _ANALYSIS + "UnresolvedHaving",
        _ANALYSIS + "UnresolvedSubqueryColumnAliases",
    }
)

#: Operators of the analyzed plan (JVM classes). ``View`` and ``DataSourceV2Relation`` are further
#: restricted to the temp view ``ref_view`` and the relation bound to it.
PLAN_OPERATORS: frozenset[str] = frozenset(
    {
        *(
            _LOGICAL + op
            for op in (
                *_RELATIONAL,
                "Deduplicate",
                "Window",
                "WithCTE",
                "CTERelationDef",
                "CTERelationRef",
                "Expand",
                "View",
            )
        ),
        _V2_RELATION,
    }
)

#: Built-in SQL functions the box accepts, by their SQL name (lower case). The analyzed plan may hold
#: only the expression classes Spark's built-in registry binds to these names (plus SYNTAX_EXPRESSIONS).
ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    {
        # operators and predicates
        "!",
        "%",
        "&",
        "*",
        "+",
        "-",
        "/",
        "<",
        "<=",
        "<=>",
        "=",
        "==",
        ">",
        ">=",
        "^",
        "|",
        "~",
        "and",
        "or",
        "not",
        "in",
        "isnull",
        "isnotnull",
        "isnan",
        "equal_null",
        "like",
        "ilike",
        "rlike",
        "regexp",
        "regexp_like",
        "div",
        "mod",
        "pmod",
        "negative",
        "positive",
        # math
        "abs",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "bround",
        "cbrt",
        "ceil",
        "ceiling",
        "cos",
        "cosh",
        "cot",
        "csc",
        "sec",
        "degrees",
        "radians",
        "e",
        "pi",
        "exp",
        "expm1",
        "floor",
        "greatest",
        "least",
        "hypot",
        "ln",
        "log",
        "log10",
        "log1p",
        "log2",
        "pow",
        "power",
        "rint",
        "round",
        "sign",
        "signum",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "width_bucket",
        "bin",
        "hex",
        "unhex",
        "conv",
        "factorial",
        "shiftleft",
        "shiftright",
        "shiftrightunsigned",
        "bit_count",
        "bit_get",
        "getbit",
        "try_add",
        "try_subtract",
        "try_multiply",
        "try_divide",
        # conditional
        "coalesce",
        "if",
        "ifnull",
        "nullif",
        "nvl",
        "nvl2",
        "nanvl",
        "when",
        # casts
        "cast",
        "bigint",
        "binary",
        "boolean",
        "date",
        "decimal",
        "double",
        "float",
        "int",
        "smallint",
        "string",
        "timestamp",
        "tinyint",
        "typeof",
        # strings
        "ascii",
        "base64",
        "unbase64",
        "bit_length",
        "btrim",
        "char",
        "chr",
        "char_length",
        "character_length",
        "concat",
        "concat_ws",
        "contains",
        "startswith",
        "endswith",
        "decode",
        "encode",
        "elt",
        "find_in_set",
        "format_number",
        "format_string",
        "printf",
        "initcap",
        "instr",
        "lcase",
        "ucase",
        "lower",
        "upper",
        "left",
        "right",
        "len",
        "length",
        "levenshtein",
        "locate",
        "position",
        "lpad",
        "rpad",
        "ltrim",
        "rtrim",
        "trim",
        "octet_length",
        "overlay",
        "regexp_count",
        "regexp_extract",
        "regexp_extract_all",
        "regexp_instr",
        "regexp_replace",
        "regexp_substr",
        "replace",
        "reverse",
        "soundex",
        "split",
        "split_part",
        "substr",
        "substring",
        "substring_index",
        "translate",
        "to_char",
        "to_varchar",
        "to_number",
        "try_to_number",
        "to_binary",
        "try_to_binary",
        "mask",
        "url_decode",
        "url_encode",
        "parse_url",
        "sentences",
        # dates and times
        "add_months",
        "current_date",
        "current_timestamp",
        "now",
        "curdate",
        "localtimestamp",
        "date_add",
        "dateadd",
        "date_sub",
        "date_diff",
        "datediff",
        "date_format",
        "date_from_unix_date",
        "date_part",
        "datepart",
        "date_trunc",
        "day",
        "dayofmonth",
        "dayofweek",
        "dayofyear",
        "extract",
        "from_unixtime",
        "from_utc_timestamp",
        "to_utc_timestamp",
        "convert_timezone",
        "hour",
        "minute",
        "second",
        "last_day",
        "make_date",
        "make_timestamp",
        "make_interval",
        "make_dt_interval",
        "make_ym_interval",
        "month",
        "months_between",
        "next_day",
        "quarter",
        "timestamp_micros",
        "timestamp_millis",
        "timestamp_seconds",
        "to_date",
        "to_timestamp",
        "to_unix_timestamp",
        "trunc",
        "unix_date",
        "unix_micros",
        "unix_millis",
        "unix_seconds",
        "unix_timestamp",
        "weekday",
        "weekofyear",
        "year",
        # hashes
        "crc32",
        "hash",
        "md5",
        "sha",
        "sha1",
        "sha2",
        "xxhash64",
        # arrays, maps, structs, higher-order functions
        "array",
        "array_append",
        "array_compact",
        "array_contains",
        "array_distinct",
        "array_except",
        "array_insert",
        "array_intersect",
        "array_join",
        "array_max",
        "array_min",
        "array_position",
        "array_prepend",
        "array_remove",
        "array_size",
        "array_sort",
        "array_union",
        "arrays_overlap",
        "arrays_zip",
        "cardinality",
        "element_at",
        "try_element_at",
        "flatten",
        "get",
        "map",
        "map_concat",
        "map_contains_key",
        "map_entries",
        "map_from_arrays",
        "map_from_entries",
        "map_keys",
        "map_values",
        "named_struct",
        "struct",
        "size",
        "slice",
        "sort_array",
        "str_to_map",
        "transform",
        "filter",
        "exists",
        "forall",
        "aggregate",
        "reduce",
        "zip_with",
        "map_filter",
        "transform_keys",
        "transform_values",
        "map_zip_with",
        # JSON and CSV text
        "from_json",
        "to_json",
        "get_json_object",
        "json_tuple",
        "json_array_length",
        "json_object_keys",
        "schema_of_json",
        "from_csv",
        "to_csv",
        "schema_of_csv",
        # aggregates
        "any",
        "some",
        "every",
        "bool_and",
        "bool_or",
        "any_value",
        "approx_count_distinct",
        "approx_percentile",
        "percentile_approx",
        "percentile",
        "median",
        "mode",
        "array_agg",
        "collect_list",
        "collect_set",
        "avg",
        "mean",
        "count",
        "count_if",
        "corr",
        "covar_pop",
        "covar_samp",
        "first",
        "first_value",
        "last",
        "last_value",
        "max",
        "max_by",
        "min",
        "min_by",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "std",
        "sum",
        "var_pop",
        "var_samp",
        "variance",
        "kurtosis",
        "skewness",
        "histogram_numeric",
        "regr_avgx",
        "regr_avgy",
        "regr_count",
        "regr_intercept",
        "regr_r2",
        "regr_slope",
        "regr_sxx",
        "regr_sxy",
        "regr_syy",
        "bit_and",
        "bit_or",
        "bit_xor",
        "try_avg",
        "try_sum",
        "grouping",
        "grouping_id",
        # window functions
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "nth_value",
        # generators (they turn one row of ref_view into several; they read nothing else)
        "explode",
        "explode_outer",
        "posexplode",
        "posexplode_outer",
        "inline",
        "inline_outer",
        "stack",
    }
)

#: Expression classes (relative to org.apache.spark.sql.catalyst.expressions) that are not bound to a
#: function name: what the parser builds for SQL syntax (CASE, IN, LIKE ANY, subqueries, lambdas,
#: field access, interval arithmetic, window specs) and what the analyzer wraps around it.
SYNTAX_EXPRESSIONS: frozenset[str] = frozenset(
    {
        "Alias",
        "AttributeReference",
        "Literal",
        "SortOrder",
        "Cast",
        "OuterReference",
        "aggregate.AggregateExpression",
        "aggregate.PivotFirst",
        "WindowExpression",
        "WindowSpecDefinition",
        "SpecifiedWindowFrame",
        "UnspecifiedFrame$",
        "UnboundedPreceding$",
        "UnboundedFollowing$",
        "CurrentRow$",
        "ScalarSubquery",
        "Exists",
        "ListQuery",
        "InSubquery",
        "InSet",
        "LambdaFunction",
        "NamedLambdaVariable",
        "GetStructField",
        "GetArrayItem",
        "GetMapValue",
        "GetArrayStructFields",
        "LikeAny",
        "NotLikeAny",
        "LikeAll",
        "NotLikeAll",
        "DateAddInterval",
        "TimeAdd",
        "DatetimeSub",
        "SubtractDates",
        "SubtractTimestamps",
        "TimestampAddYMInterval",
        "DateAddYMInterval",
        "ExtractANSIIntervalDays",
        "ExtractANSIIntervalMonths",
        "ExtractANSIIntervalYears",
        "ExtractANSIIntervalHours",
        "ExtractANSIIntervalMinutes",
        "ExtractANSIIntervalSeconds",
        "MultiplyYMInterval",
        "MultiplyDTInterval",
        "DivideYMInterval",
        "DivideDTInterval",
        "TimestampAdd",
        "TimestampDiff",
        # classes the builder-style functions of ALLOWED_FUNCTIONS produce (their registry entry is a builder)
        "Ceil",
        "Floor",
        "RoundCeil",
        "RoundFloor",
        "Contains",
        "StartsWith",
        "EndsWith",
        "Explode",
        "StringLPad",
        "StringRPad",
        "BinaryPad",
        "DatePart",
        "Mask",
        "TryEval",
        "ParseToTimestamp",
        "aggregate.Sum",
        "aggregate.Average",
    }
)

#: Spark-internal invocation nodes: accepted only inside the replacement of an allowed built-in
#: (RuntimeReplaceable) function, where Spark itself put them; never elsewhere.
INTERNAL_EXPRESSIONS: frozenset[str] = frozenset(
    {
        "objects.StaticInvoke",
        "objects.Invoke",
    }
)

_RUNTIME_REPLACEABLE = _EXPR + "RuntimeReplaceable"
_INHERIT_ANALYSIS_RULES = _EXPR + "InheritAnalysisRules"
_SUBQUERY_EXPRESSION = _EXPR + "SubqueryExpression"
_UNRESOLVED_FUNCTION = _ANALYSIS + "UnresolvedFunction"
_UNRESOLVED_GENERATOR = _ANALYSIS + "UnresolvedGenerator"
_UNRESOLVED_RELATION = _ANALYSIS + "UnresolvedRelation"


@dataclass(frozen=True)
class CheckedQuery:
    """A statement that passed both stages: its text and the analyzed plan (JVM) that will run."""

    text: str
    analyzed: Any


def _one_line(exc: BaseException) -> str:

    return spark_error_line(exc)


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _class(obj: Any) -> str:
    return str(obj.getClass().getName())


JvmObject: TypeAlias = Any  # a py4j proxy of a JVM object (untyped on the Python side)


class _Classes:
    """JVM class objects for instance checks, loaded once per walk."""

    def __init__(self, session: SparkSession) -> None:
        self._jvm: Any = session._jvm
        self._cache: dict[str, JvmObject] = {}

    def isinstance(self, obj: Any, class_name: str) -> bool:
        klass = self._cache.get(class_name)
        if klass is None:
            klass = self._jvm.java.lang.Class.forName(class_name, False, obj.getClass().getClassLoader())
            self._cache[class_name] = klass
        return bool(klass.isInstance(obj))


def _refuse(what: str) -> ValidationError:
    return ValidationError(f"refused: {what} (the SQL box runs one read-only query over {VIEW})")


def _popped(stack: list[_Node]) -> Iterator[_Node]:
    """Pop ``stack`` until it is empty (the caller pushes children as it goes), at most MAX_PLAN_NODES items."""
    count = 0
    while stack:
        count += 1
        if count > MAX_PLAN_NODES:
            raise ValidationError(f"the statement is too large (more than {MAX_PLAN_NODES} plan nodes)")
        yield stack.pop()


# --------------------------------------------------------------------------- stage 1: the parsed plan
def parse_query(session: SparkSession, sql: str) -> Any:
    """Parse ``sql`` with the session's parser and accept it only as one plain query over ``ref_view``.

    Returns the parsed (unresolved) plan; nothing is looked up, analysed or executed. Raises
    ValidationError (one line) for empty or over-long text, a parse error, and any operator, relation
    or function outside the allowlists.
    """
    plan = _parse(session, sql)
    classes = _Classes(session)
    ctes: set[str] = set()
    relations: list[str] = []
    stack = [plan]
    for node in _popped(stack):
        name = _class(node)
        if name not in PARSED_OPERATORS:
            raise _refuse(f"{node.nodeName()} is not a read-only query operator")
        if name == _UNRESOLVED_RELATION:
            relations.append(_relation_name(node))
        elif name == _LOGICAL + "UnresolvedWith":
            for pair in _seq(node.cteRelations()):
                ctes.add(str(pair._1()).lower())
                stack.append(pair._2())
        # a Generate's generator is among the expressions checked here
        for expr in _seq(node.expressions()):
            _check_parsed_expression(expr, classes, stack)
        stack.extend(_seq(node.children()))
    allowed = {VIEW, *ctes}
    for rel in relations:
        if rel not in allowed:
            raise _refuse(f"the query may only read {VIEW} or its CTEs, not {rel}")
    return plan


def _parse(session: SparkSession, sql: str) -> Any:
    """The session parser's plan of ``sql`` (one statement, within the length limit); nothing resolved."""
    text = (sql or "").strip()
    if not text:
        raise ValidationError(f"the SQL box is empty: write one SELECT over {VIEW}")
    if len(text) > MAX_SQL_CHARS:
        raise ValidationError(f"the statement is longer than {MAX_SQL_CHARS} characters")
    jsession: Any = session._jsparkSession
    try:
        return jsession.sessionState().sqlParser().parsePlan(text)
    except Exception as exc:  # Spark's ParseException arrives as a Py4J/PySpark error
        raise ValidationError(f"SQL does not parse (one statement only): {_one_line(exc)}") from exc


def _relation_name(node: Any) -> str:
    """The one-part, option-free name an unresolved relation reads (lower case); anything else is refused."""
    parts = [str(p) for p in _seq(node.multipartIdentifier())]
    if node.isStreaming() or not node.options().isEmpty():
        raise _refuse(f"reading {'.'.join(parts)} with options")
    if len(parts) != 1:
        raise _refuse(f"the query may only read {VIEW} or its CTEs, not {'.'.join(parts)}")
    return parts[0].lower()


def _check_parsed_expression(expr: Any, classes: _Classes, plans: list[Any]) -> None:
    stack = [expr]
    while stack:
        e = stack.pop()
        name = _class(e)
        if name == _UNRESOLVED_FUNCTION:
            parts = [str(p) for p in _seq(e.nameParts())]
            fn = ".".join(parts)
            if len(parts) != 1 or parts[0].lower() not in ALLOWED_FUNCTIONS:
                raise _refuse(f"function {fn}() is not allowed")
            if parts[0].lower() == "approx_count_distinct":
                _check_parsed_relative_sd(e)
        elif name == _UNRESOLVED_GENERATOR:
            ident = e.name()
            fn = str(ident.funcName())
            if ident.database().isDefined() or fn.lower() not in ALLOWED_FUNCTIONS:
                raise _refuse(f"function {fn}() is not allowed")
        elif name.endswith("ExpressionWithUnresolvedIdentifier"):
            raise _refuse("IDENTIFIER(...) is not allowed: name the function directly")
        if classes.isinstance(e, _SUBQUERY_EXPRESSION):
            plans.append(e.plan())
        stack.extend(_seq(e.children()))


def _check_parsed_relative_sd(call: Any) -> None:
    """approx_count_distinct's relative error, before analysis: Spark sizes (allocates) the sketch while it
    analyses the call, so a tiny one would exhaust the driver before the analyzed plan could be judged."""
    args = _seq(call.arguments())
    if len(args) < 2:
        return
    arg = args[1]
    if _class(arg) != _LITERAL:
        raise _refuse("approx_count_distinct() needs a literal relative error (at least the bound)")
    value = arg.value()
    rsd = float(value if isinstance(value, (int, float)) else str(value.toString()))
    if not rsd >= MIN_RELATIVE_SD:
        raise _refuse(
            f"approx_count_distinct() relative error {rsd:g} is under the bound {MIN_RELATIVE_SD:g}"
        )


# --------------------------------------------------------------------------- stage 2: the analyzed plan
@lru_cache(maxsize=1)
def _registry_classes(jvm_id: int, jvm: Any) -> frozenset[str]:
    """Classes Spark's built-in registry binds to ALLOWED_FUNCTIONS (builders are listed in SYNTAX_EXPRESSIONS)."""
    del jvm_id  # cache key only
    registry = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    out: set[str] = set()
    for fn in ALLOWED_FUNCTIONS:
        info = registry.lookupFunction(jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(fn))
        if info.isEmpty():
            log.warning("allowed function %s is not a Spark built-in here; ignored", fn)
            continue
        klass = str(info.get().getClassName())
        if not klass.endswith("Builder"):
            out.add(klass)
    return frozenset(out)


def allowed_expression_classes(session: SparkSession) -> frozenset[str]:
    """Every expression class (full JVM name) an analyzed plan may contain outside internal replacements."""
    jvm: Any = session._jvm
    return _registry_classes(id(jvm), jvm) | frozenset(_EXPR + c for c in SYNTAX_EXPRESSIONS)


def check_analyzed(session: SparkSession, plan: Any, relation: Any, *, killable: bool = False) -> None:
    """Accept the analyzed ``plan`` only if it is built from allowed operators and expressions over ``relation``.

    ``relation`` is the DataSourceV2Relation (JVM) bound to the temp view ``ref_view``. ``killable``: the
    query is planned and run in a SQL-box worker that the time limit kills (:mod:`wap_core.analysis.sandbox`);
    otherwise it is planned in a driver nothing may kill, and a regular expression whose subject and pattern
    are both constants (Spark evaluates it while optimizing, where no cancel reaches) is refused too.
    Raises ValidationError naming the first thing outside the allowlists.
    """
    jvm: Any = session._jvm
    expressions = allowed_expression_classes(session)
    internal = frozenset(_EXPR + c for c in INTERNAL_EXPRESSIONS)
    classes = _Classes(session)
    bound_hash = int(jvm.java.lang.System.identityHashCode(relation.table()))
    bound_options = relation.options()
    stack: list[tuple[Any, bool]] = [(plan, False)]  # (node, inside the ref_view View)
    for node, in_view in _popped(stack):
        name = _class(node)
        if name not in PLAN_OPERATORS:
            raise _refuse(f"{node.nodeName()} is not a read-only query operator")
        if node.isStreaming():
            raise _refuse("streaming reads")
        if name == _LOGICAL + "View":
            ident = node.desc().identifier()
            if not (node.isTempView() and ident.database().isEmpty() and str(ident.table()).lower() == VIEW):
                raise _refuse(f"the query may only read {VIEW}, not the view {ident.unquotedString()}")
            in_view = True
        elif name == _V2_RELATION:
            table = node.table()
            same = (
                in_view
                and int(jvm.java.lang.System.identityHashCode(table)) == bound_hash
                and bool(table.equals(relation.table()))
                and bool(node.options().equals(bound_options))
            )
            if not same:
                raise _refuse(f"the query may only read {VIEW}, not {table.name()}")
        children = _seq(node.children())
        if not children and name not in (_V2_RELATION, _LOGICAL + "CTERelationRef"):
            raise _refuse(f"every relation must be {VIEW} (found {node.nodeName()})")
        for expr in _seq(node.expressions()):
            _check_expression(expr, expressions, internal, classes, stack, killable=killable)
        stack.extend((c, in_view) for c in children)


def _check_expression(
    expr: Any,
    allowed: frozenset[str],
    internal: frozenset[str],
    classes: _Classes,
    plans: list[tuple[Any, bool]],
    *,
    killable: bool = False,
) -> None:
    # (expression, inside an allowed function's replacement, inside the lambda of a higher-order function)
    stack: list[tuple[Any, bool, bool]] = [(expr, False, False)]
    while stack:
        e, in_replacement, in_lambda = stack.pop()
        name = _class(e)
        if not (name in allowed or (name in internal and in_replacement)):
            raise _refuse(
                f"function or expression {e.prettyName()} ({name.rsplit('.', 1)[-1]}) is not allowed"
            )
        _check_arguments(e, name)  # inside a replacement too: the user's arguments may sit there
        if classes.isinstance(e, _HIGHER_ORDER):
            _check_higher_order(e, name, in_lambda)
        if not killable and name in _REGEX and bool(e.foldable()):
            raise _refuse(
                f"{e.prettyName()}() on a constant subject and a constant pattern: Spark evaluates it while "
                "planning, where the time limit cannot stop it (WAP_QUERY_ISOLATION=driver); match a column"
            )
        if classes.isinstance(e, _SUBQUERY_EXPRESSION):
            plans.append((e.plan(), False))
        lambda_body = in_lambda or name == _LAMBDA
        if classes.isinstance(e, _INHERIT_ANALYSIS_RULES):
            # An allowed function whose replacement Spark built from its parameters: the parameters (the
            # user's arguments) are checked; the replacement is the function's own implementation.
            stack.extend((c, False, lambda_body) for c in _seq(e.parameters()))
            continue
        inside = in_replacement or classes.isinstance(e, _RUNTIME_REPLACEABLE)
        stack.extend((c, inside, lambda_body) for c in _seq(e.children()))


# --------------------------------------------------------------------------- higher-order functions, regexes
_HIGHER_ORDER = _EXPR + "HigherOrderFunction"
_LAMBDA = _EXPR + "LambdaFunction"
_ARRAY_AGGREGATE = _EXPR + "ArrayAggregate"
#: Regular-expression (and LIKE, compiled to one) expressions: evaluated while planning when their subject and
#: pattern are constants (Spark's constant folding), where no cancel reaches (see :func:`check_analyzed`).
_REGEX = frozenset(
    _EXPR + c
    for c in (
        "Like",
        "ILike",
        "RLike",
        "LikeAll",
        "NotLikeAll",
        "LikeAny",
        "NotLikeAny",
        "StringSplit",
        "StringToMap",
        "RegExpReplace",
        "RegExpExtract",
        "RegExpExtractAll",
        "RegExpCount",
        "RegExpSubStr",
        "RegExpInStr",
    )
)
#: Types of fixed size (Spark type names; ``decimal(p,s)`` and the interval types by prefix): what an
#: ``aggregate``/``reduce`` accumulator may be, alone or as the fields of a struct.
_FIXED_SIZE_TYPES = frozenset(
    {
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "boolean",
        "date",
        "timestamp",
        "timestamp_ntz",
        "void",
    }
)


def _fixed_size(dtype: Any) -> bool:
    """True for a type whose values cannot grow: numbers, booleans, dates, times, intervals, structs of them."""
    name = str(dtype.typeName())
    if name == "struct":
        return all(_fixed_size(f.dataType()) for f in dtype.fields())
    return name in _FIXED_SIZE_TYPES or name.startswith(("decimal", "interval"))


def _check_higher_order(e: Any, name: str, in_lambda: bool) -> None:
    """Refuse the growth a higher-order function can build beyond the data and the statement's text.

    - Nested (a higher-order function inside another's lambda): sizes multiply, ``transform(a, x ->
      transform(b, y -> ...))`` is ``size(a) * size(b)`` values per row, and each level multiplies again.
    - ``aggregate``/``reduce`` with an accumulator that can grow (a string, binary, array or map, or a struct
      holding one): ``(acc, x) -> concat(acc, acc)`` doubles it per element (2^n).
    """
    fn = e.prettyName()
    if in_lambda:
        raise _refuse(
            f"{fn}() inside the lambda of another higher-order function: their sizes multiply; "
            "compute the inner part in a subquery or use a plain function (sort_array, array_contains...)"
        )
    if name == _ARRAY_AGGREGATE and not _fixed_size(e.zero().dataType()):
        raise _refuse(
            f"{fn}() accumulating a {e.zero().dataType().simpleString()}: an accumulator that can grow "
            "(string, binary, array, map) may double per element; accumulate numbers, booleans, dates or a "
            "struct of them (build arrays and strings with transform, filter, array_join, collect_list)"
        )


# --------------------------------------------------------------------------- size arguments
_PAD = frozenset({_EXPR + "StringLPad", _EXPR + "StringRPad", _EXPR + "BinaryPad"})
_FORMAT_STRING = _EXPR + "FormatString"
_FORMAT_NUMBER = _EXPR + "FormatNumber"
_HLL = _EXPR + "aggregate.HyperLogLogPlusPlus"
_PERCENTILE_APPROX = _EXPR + "aggregate.ApproximatePercentile"
_HISTOGRAM = _EXPR + "aggregate.HistogramNumeric"
_ARRAY_INSERT = _EXPR + "ArrayInsert"
_LITERAL = _EXPR + "Literal"
_CAST = _EXPR + "Cast"
#: A width or precision in a java.util.Formatter format (the value of a literal argument, not SQL text).
_FORMAT_SPEC = re.compile(r"%(?:\d+\$|<)?[-#+ 0,(]*(\d+)?(?:\.(\d+))?[a-zA-Z%]")


def _literal(arg: Any, fn: str, what: str) -> Any:
    """The value of ``arg`` if it is a literal (or the cast Spark put around one); else refused."""
    name = _class(arg)
    if name == _CAST and _class(arg.child()) == _LITERAL:
        value = arg.eval(None)  # a cast of a constant: nothing but the constant is read
    elif name == _LITERAL:
        value = arg.value()
    else:
        raise _refuse(f"{fn}() needs a literal {what} (at most the bound), not an expression")
    return None if value is None else value


def _bounded(arg: Any, fn: str, what: str, most: int) -> None:
    value = _literal(arg, fn, what)
    if value is not None and int(value) > most:
        raise _refuse(f"{fn}() {what} {int(value):,} is over the bound {most:,}")


def _check_arguments(e: Any, name: str) -> None:
    """Refuse an amplifying function whose size argument is not a literal within its bound."""
    if name in _PAD:
        _bounded(e.len(), e.prettyName(), "length", MAX_PAD_LENGTH)
    elif name == _FORMAT_STRING:
        fn = e.prettyName()
        fmt = _literal(_seq(e.children())[0], fn, "format")
        for width, precision in _FORMAT_SPEC.findall(str(fmt) if fmt is not None else ""):
            for n in (width, precision):
                if n and int(n) > MAX_PAD_LENGTH:
                    raise _refuse(
                        f"{fn}() width or precision {int(n):,} is over the bound {MAX_PAD_LENGTH:,}"
                    )
    elif name == _FORMAT_NUMBER:
        d = e.d()
        value = _literal(d, "format_number", "number of decimals or pattern")
        if (
            value is not None
            and str(d.dataType().typeName()) != "string"
            and int(value) > MAX_FORMAT_DECIMALS
        ):
            raise _refuse(
                f"format_number() decimals {int(value):,} is over the bound {MAX_FORMAT_DECIMALS:,}"
            )
    elif name == _HLL:
        rsd = float(e.relativeSD())
        if rsd < MIN_RELATIVE_SD:
            raise _refuse(
                f"approx_count_distinct() relative error {rsd:g} is under the bound {MIN_RELATIVE_SD:g}"
            )
    elif name == _PERCENTILE_APPROX:
        _bounded(e.accuracyExpression(), "approx_percentile", "accuracy", MAX_PERCENTILE_ACCURACY)
    elif name == _HISTOGRAM:
        _bounded(e.nBins(), "histogram_numeric", "number of bins", MAX_HISTOGRAM_BINS)
    elif name == _ARRAY_INSERT:
        # A position past the end pads with nulls up to it (either end for a negative one): the array
        # array_insert(array(1), 1500000000, 1) is 1.5 billion values, built by the optimizer from a literal.
        value = _literal(e.posExpr(), "array_insert", "position")
        if value is not None and abs(int(value)) > MAX_ARRAY_INSERT_POSITION:
            raise _refuse(
                f"array_insert() position {int(value):,} is over the bound {MAX_ARRAY_INSERT_POSITION:,} "
                "(either way)"
            )


# --------------------------------------------------------------------------- stage 3: joins on the optimized plan
_JOIN = _LOGICAL + "Join"


def _extractor(jvm: Any, name: str) -> Any:
    """A Scala extractor object of Spark's planner (its ``unapply`` is what the planner matches on)."""
    return getattr(jvm.org.apache.spark.sql.catalyst.planning, name + "$").__getattr__("MODULE$")


def _plan_nodes(plan: Any, classes: _Classes) -> Iterator[Any]:
    """Every operator of ``plan``, the plans of its subquery expressions included (bounded walk)."""
    stack = [plan]
    for node in _popped(stack):
        yield node
        exprs = _seq(node.expressions())
        while exprs:
            e = exprs.pop()
            if classes.isinstance(e, _SUBQUERY_EXPRESSION):
                stack.append(e.plan())
            exprs.extend(_seq(e.children()))
        stack.extend(_seq(node.children()))


def _max_rows(plan: Any) -> int | None:
    """Spark's structural bound on the rows of ``plan`` (a LIMIT, an aggregate without GROUP BY), if any."""
    bound = plan.maxRows()
    return None if bound.isEmpty() else int(bound.get())


def check_joins(session: SparkSession, plan: Any) -> None:
    """Refuse a join without an equality condition (a nested loop) unless one side is small by construction.

    ``plan`` is the optimized plan (JVM) of an accepted query. A join passes if Spark's planner can run it
    as a hash or sort-merge join (``ExtractEquiJoinKeys``: an equality between an expression of each side)
    or as a null-aware hash anti join (a one-column ``NOT IN``). Any other join (cartesian product, theta
    join) needs a side of at most :data:`MAX_NESTED_LOOP_ROWS` rows by Spark's ``maxRows`` (a structural
    bound, not an estimate), and the product of those sides over the whole query stays within the bound.
    Raises ValidationError (one line) saying what to change.
    """
    jvm: Any = session._jvm
    equi = _extractor(jvm, "ExtractEquiJoinKeys")
    null_aware = _extractor(jvm, "ExtractSingleColumnNullAwareAntiJoin")
    classes = _Classes(session)
    factor = 1
    for node in _plan_nodes(plan, classes):
        if _class(node) != _JOIN or equi.unapply(node).isDefined() or null_aware.unapply(node).isDefined():
            continue
        sides = [n for n in (_max_rows(node.left()), _max_rows(node.right())) if n is not None]
        small = min(sides) if sides else None
        if small is None or factor * max(small, 1) > MAX_NESTED_LOOP_ROWS:
            kind = "cartesian product" if node.condition().isEmpty() else "nested loop"
            grows = "" if small is None else f" (together they multiply rows by {factor * max(small, 1):,})"
            raise ValidationError(
                f"refused: a join without an equality condition ({node.joinType()} join, a {kind}){grows} "
                f"is not allowed in the SQL box: join on equal keys (JOIN ... ON a.k = b.k, or a WHERE "
                f"a.k = b.k), or make one side at most {MAX_NESTED_LOOP_ROWS:,} rows (an aggregate "
                f"without GROUP BY, a LIMIT)"
            )
        factor *= max(small, 1)


def _optimized(jdf: Any) -> Any:
    try:
        return jdf.queryExecution().optimizedPlan()
    except Exception as exc:  # an optimizer error from the JVM, as one line
        raise ValidationError(f"SQL error: {_one_line(exc)}") from exc


# --------------------------------------------------------------------------- both stages
def bound_relation(frame: DataFrame) -> Any:
    """The DataSourceV2Relation (JVM) of the frame bound to ``ref_view``."""
    plan = frame._jdf.queryExecution().analyzed()
    if _class(plan) != _V2_RELATION:  # pragma: no cover - explore binds a plain Iceberg read
        raise ValidationError(f"{VIEW} must be bound to a plain Iceberg read, not {plan.nodeName()}")
    return plan


def check_query(session: SparkSession, sql: str, relation: Any, *, killable: bool = False) -> CheckedQuery:
    """Both stages: parse and gate ``sql``, analyse it (nothing runs) and judge the analyzed plan
    (``killable``: see :func:`check_analyzed`)."""
    parsed = parse_query(session, sql)
    jvm: Any = session._jvm
    jsession: Any = session._jsparkSession
    skip = getattr(jvm.org.apache.spark.sql.execution, "CommandExecutionMode$").__getattr__("MODULE$").SKIP()
    qe = jsession.sessionState().executePlan(parsed, skip)
    try:
        analyzed = qe.analyzed()
    except Exception as exc:  # AnalysisException (unknown column, type error) from the JVM
        raise ValidationError(f"SQL error: {_one_line(exc)}") from exc
    check_analyzed(session, analyzed, relation, killable=killable)
    return CheckedQuery(text=(sql or "").strip(), analyzed=analyzed)


def read_only_query(session: SparkSession, sql: str, relation: Any, *, killable: bool = False) -> DataFrame:
    """A lazy DataFrame of ``sql`` whose plan is the analyzed plan judged by :func:`check_analyzed`.

    Its optimized plan (the one that runs) is judged by :func:`check_joins`. Nothing runs until the caller
    collects it (with a row limit). ``killable``: the caller is a SQL-box worker the time limit kills.
    """
    from pyspark.sql import DataFrame

    checked = check_query(session, sql, relation, killable=killable)
    jvm: Any = session._jvm
    jdf = jvm.org.apache.spark.sql.Dataset.ofRows(session._jsparkSession, checked.analyzed)
    runs = jdf.queryExecution().analyzed()
    identity = jvm.java.lang.System.identityHashCode
    if identity(runs) != identity(checked.analyzed):  # pragma: no cover - Spark keeps an analyzed plan as is
        check_analyzed(session, runs, relation, killable=killable)
    check_joins(session, _optimized(jdf))
    return DataFrame(jdf, session)
