"""The parts every check type shares: levels, the spec base class, the result, the context.

A check type is a frozen dataclass deriving from :class:`CheckSpec` (its YAML arguments are its
fields) that says

- which aggregates it needs from the single pass over the batch (:meth:`CheckSpec.aggregates`,
  SQL text keyed by a name local to the check; the engine keys them by the check's name),
- whether it needs the duplicate statistics of a key in that pass (:meth:`CheckSpec.key_columns`),
- what else it must measure outside the pass, e.g. a look-up in main (:meth:`CheckSpec.measure_more`),
- how to judge the measurement (:meth:`CheckSpec.judge`, pure Python, no Spark),
- how to describe its threshold (:attr:`CheckSpec.threshold`),
- which rows of the batch fail it, all of them (:meth:`CheckSpec.failing_frame`: Explore's
  "failing rows of a check"; a row-level check's :meth:`CheckSpec.fail_sql`, a look-up's join),
- which other table's rows fix a failure (:attr:`CheckSpec.fixed_by`, e.g. ``references``).

Measurements are JSON-able dicts; they are cached by (table, batch head, the check's measure
fingerprint), so a change of a threshold is judged again without any Spark job.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from wap_core import values
from wap_core.exceptions import ChecksFileError, first_line
from wap_core.identifiers import TableId
from wap_core.lake.batch import ChangeCounts
from wap_core.lake.errors import spark_error_line
from wap_core.states import BatchRead, CheckStatus, OnFail, overall_status
from wap_core.values import JsonObject, Record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Measurement = JsonObject  # a check's measured values (JSON-able), from the pass and its own look-ups


class Level(str, Enum):
    """How a failing check counts: ``fail`` blocks the publish, ``warn`` does not."""

    FAIL = "fail"
    WARN = "warn"


@dataclass
class CheckResult:
    """The outcome of one check, with diagnostics."""

    name: str
    type: str
    columns: list[str]
    level: Level
    status: CheckStatus
    observed: Any
    threshold: str
    failing_rows: int | None
    sample: list[JsonObject] = field(default_factory=list)
    message: str = ""

    @classmethod
    def from_dict(cls, d: JsonObject) -> CheckResult:
        """The result back from its JSON form (missing keys are None)."""
        values = {k: d.get(k) for k in cls.__dataclass_fields__}
        values["status"] = CheckStatus(d["status"])
        values["level"] = Level(d.get("level") or Level.FAIL.value)
        return cls(**values)  # type: ignore[arg-type]


def summarize(results: Sequence[CheckResult]) -> CheckStatus:
    """Overall status: failed if any fail-level check failed or any check errored, else warned/passed."""
    return overall_status(r.status for r in results)


@dataclass(frozen=True)
class OtherRead:
    """Where a check reads another table that is in the audited branch's batch: that table's branch of
    the batch's name at ``snapshot_id`` (its head), not its main. Plain values: the workflow layer
    computes them (``batch_reads``), the checks only show them."""

    snapshot_id: int
    batch: str  # the batch's name (the branch the table is read at)

    @property
    def label(self) -> str:
        """Where the read was, as a check's message says it: ``batch w2's head, snapshot 123``."""
        return f"batch {self.batch}'s head, snapshot {self.snapshot_id}"


@dataclass(frozen=True)
class MainContext:
    """What a check may read besides the batch: main (at the fork) and stored history.

    ``read_main`` returns main of this or another table (this table's main at the batch's fork);
    ``snapshot_of`` the snapshot id that read would see (part of the result-cache key). ``stored``
    gives the stored profiles and batch metrics the history-aware checks compare with (no scan).
    ``batch_reads``: the other tables of the audited branch's batch (``namespace.table`` -> where
    ``read_main`` reads them: their branch head in the batch); a table not in it is read at its main.
    Empty for a plain branch (a one-table batch).

    ``changes``: what a publish would do to main (inserted, updated, deleted rows, and how they were
    read); for a branch that updates, deletes or overwrites rows, the batch is its inserted and
    updated rows, and a key is judged against ``read_head`` (the branch's head: what main becomes),
    so an updated key is not a duplicate of its own old version.
    """

    spark: SparkSession
    read_main: Callable[[TableId], DataFrame | None]
    table: TableId
    snapshot_of: Callable[[TableId], int | None] | None = None
    fork_snapshot_id: int | None = None
    head_snapshot_id: int | None = None
    new_snapshot_summaries: tuple[Mapping[str, str], ...] = ()
    stored: Any = None  # wap_core.checks.history.StoredHistory (Any: keeps this module free of the journal)
    batch_reads: Mapping[str, OtherRead] = field(default_factory=dict)
    method: BatchRead = BatchRead.APPEND  # how the batch was read (lake.batch.read_method)
    changes: ChangeCounts | None = None
    read_head: Callable[[], DataFrame] | None = None

    @property
    def rewrites_main(self) -> bool:
        """True when the branch's commits update, delete or overwrite rows of main (not only appends): checks
        that compare with main judge what main becomes, the branch's head (:attr:`read_head`)."""
        return self.read_head is not None and self.method in (BatchRead.CHANGELOG, BatchRead.FULL_COMPARISON)

    def main_snapshot(self, table: TableId) -> int | None:
        """The snapshot of ``table``'s main the check would read (this table: the batch's fork; a table of
        the batch: its head in the batch)."""
        if table == self.table:
            return self.fork_snapshot_id
        inside = self.batch_read(table)
        if inside is not None:
            return inside.snapshot_id
        return self.snapshot_of(table) if self.snapshot_of is not None else None

    def batch_read(self, table: TableId) -> OtherRead | None:
        """Where ``table`` is read when it is another table of the audited branch's batch, else None (main)."""
        return None if table == self.table else self.batch_reads.get(str(table))


# --------------------------------------------------------------------------- values

jsonable = values.jsonable  # its home is wap_core.values; the check modules import it from here


def sql_literal(value: Any) -> str:
    """A Spark SQL literal for a value from the checks file (strings escaped, never pasted raw)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or value in (float("inf"), float("-inf")):
            raise ValueError(f"cannot use {value!r} in a check")
        return repr(value)
    if isinstance(value, _dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def short_error(exc: BaseException | str) -> str:
    """The first line of an error (at most 500 characters) for a check's message.

    A Spark error reads ``ERROR_CLASS: message`` (:mod:`wap_core.lake.errors`), never a Py4J object name.
    """
    if isinstance(exc, BaseException):
        return spark_error_line(exc)
    return first_line(exc)[:500]  # Spark analysis errors carry a long plan: the first informative line


def row_dict(row: Any) -> JsonObject:
    """A Spark row as a JSON-able dict."""
    return {k: jsonable(v) for k, v in row.asDict().items()}


# --------------------------------------------------------------------------- the spec base class

_BASE_FIELDS = ("name", "columns", "level", "line", "max_failing_rows", "on_fail")


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    """One validated check. Subclasses add their YAML arguments as fields and register a YAML key."""

    name: str
    columns: tuple[str, ...] = ()
    level: Level = Level.FAIL
    line: int | None = None
    max_failing_rows: int = 0
    # what its failure does to an ingest's batch (``on_fail:``; only row-level checks may quarantine):
    # not measured, not judged, so not part of the fingerprint (:attr:`args` leaves it out)
    on_fail: OnFail = OnFail.FAIL

    type: ClassVar[str] = ""  # the YAML key, set by each check type
    row_level: ClassVar[bool] = False  # a per-row predicate counted in the one pass (and sampled)
    builtin: ClassVar[bool] = False  # added by wap_core itself, not allowed in the checks file
    defines_key: ClassVar[bool] = False  # its columns are the table's key (review samples, keyed diff)
    # its failing rows can be read, all of them (failing_frame): Explore's "failing rows of a check"
    selects_rows: ClassVar[bool] = False
    # fields that only change how a measurement is judged: a change of them needs no new measurement
    judge_fields: ClassVar[tuple[str, ...]] = ()

    # ----- parsing ------------------------------------------------------------------
    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        """Build the spec(s) from the YAML arguments (``args`` raises with file and line)."""
        raise NotImplementedError

    @classmethod
    def for_batch(cls, summaries: Sequence[Mapping[str, str]]) -> list[CheckSpec]:
        """A built-in type's checks of a batch, from its snapshots' summaries (a type of the checks file: none)."""
        return []

    # ----- description --------------------------------------------------------------
    @property
    def args(self) -> Record:
        """The type-specific arguments (every field beyond the common ones)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BASE_FIELDS}

    @property
    def threshold(self) -> str:
        """The threshold as shown with the result, e.g. ``<= 0 failing rows``."""
        return f"<= {self.max_failing_rows} failing rows"

    # ----- measuring ------------------------------------------------------------------
    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        """Aggregates this check needs from the one pass over the batch: local name -> Spark SQL text."""
        return {}

    def key_columns(self) -> tuple[str, ...] | None:
        """Columns whose duplicate statistics (``dup_rows``, ``dup_keys``) the pass must compute."""
        return None

    def fail_sql(self) -> str | None:
        """For row-level checks: the SQL predicate TRUE for a failing row (counted and sampled)."""
        return None

    def failing_frame(self, batch: DataFrame, ctx: MainContext) -> DataFrame | None:
        """Every row of ``batch`` that fails this check (None: the check judges no rows).

        By default the rows :meth:`fail_sql` is TRUE for (the rows the pass counts and samples); a
        check measured by a look-up (:attr:`selects_rows` and :meth:`measure_more`) overrides it with
        the same look-up as a filter. Built from the spec alone, never from user text.
        """
        sql = self.fail_sql()
        return None if sql is None else batch.where(f"coalesce(({sql}), false)")

    @property
    def fixed_by(self) -> str | None:
        """The table (``namespace.table``) whose rows fix a failure of this check, if another table's (None)."""
        return None

    def history_metric(self, m: Measurement) -> tuple[str, float] | None:
        """The metric this check keeps in the batch history for later batches to compare with (None: none)."""
        return None

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        """What the measurement depends on besides the batch (snapshots of the tables it reads)."""
        return ()

    def other_tables(self) -> tuple[str, ...]:
        """The other tables (``namespace.table``) this check reads: inside a batch, a new commit on one of
        them makes this check's measurement stale (``references``: the referenced table)."""
        return ()

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        """Measure what the one pass cannot (a look-up in main); ``m`` holds the pass's values."""
        return m

    def fingerprint(self, ctx: MainContext) -> str:
        """Identifies the measurement: type, measured arguments and what it reads (not thresholds)."""
        measured = {k: v for k, v in self.args.items() if k not in self.judge_fields}
        key = [
            self.type,
            list(self.columns),
            measured,
            self.aggregates(ctx),
            self.key_columns(),
            list(self.reads(ctx)),
        ]
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]

    # ----- judging ---------------------------------------------------------------------
    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        """The verdict on a measurement. Pure Python: never runs Spark."""
        raise NotImplementedError

    def status(self, ok: bool) -> CheckStatus:
        """The status for a verdict: passed, else warned or failed by the check's level."""
        if ok:
            return CheckStatus.PASSED
        return CheckStatus.WARNED if self.level is Level.WARN else CheckStatus.FAILED

    def result(
        self,
        ok: bool,
        observed: Any,
        failing: int | None,
        message: str = "",
        sample: list[JsonObject] | None = None,
    ) -> CheckResult:
        """A result of this check with its status from ``ok`` and its threshold."""
        return CheckResult(
            name=self.name,
            type=self.type,
            columns=list(self.columns),
            level=self.level,
            status=self.status(ok),
            observed=observed,
            threshold=self.threshold,
            failing_rows=failing,
            sample=list(sample or []),
            message=message,
        )

    def error(self, exc: BaseException | str) -> CheckResult:
        """An ``error`` result: the check could not be measured or judged."""
        return CheckResult(
            name=self.name,
            type=self.type,
            columns=list(self.columns),
            level=self.level,
            status=CheckStatus.ERROR,
            observed=None,
            threshold=self.threshold,
            failing_rows=None,
            sample=[],
            message=short_error(exc),
        )


@dataclass(frozen=True, kw_only=True)
class RowCheck(CheckSpec):
    """A check of each row by a SQL predicate: one ``count_if`` in the pass, failing rows sampled."""

    row_level: ClassVar[bool] = True
    selects_rows: ClassVar[bool] = True
    judge_fields: ClassVar[tuple[str, ...]] = ()

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        return {"fail": f"count_if({self.fail_sql()})"}

    def observed(self, m: Measurement, failing: int) -> Any:
        """The observed value shown with the result (by default the failing-row count)."""
        return failing

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        failing = int(m.get("fail") or 0)
        rows = int(m.get("_rows") or 0)
        pct = f" ({100.0 * failing / rows:.2f}% of {rows:,})" if rows else ""
        msg = f"{failing:,} of {rows:,} rows fail{pct}" if failing else f"all {rows:,} rows pass"
        return self.result(
            failing <= self.max_failing_rows, self.observed(m, failing), failing, msg, m.get("sample")
        )


S = TypeVar("S", bound=CheckSpec)


class Args:
    """(Imported from :mod:`wap_core.checks.args`; it lives here so that ``CheckSpec.parse`` can name it
    without an import circle.) The arguments of one check in the file, consumed by its type's ``parse``; errors carry file and line."""

    def __init__(
        self,
        ctype: str,
        opts: JsonObject,
        source: str,
        line: int,
        name: str | None,
        level: Level,
        max_failing_rows: int,
    ) -> None:
        self.ctype = ctype
        self.opts = opts
        self.source = source
        self.line = line
        self.name = name
        self.level = level
        self.max_failing_rows = max_failing_rows

    def fail(self, msg: str) -> ChecksFileError:
        """A ChecksFileError at this check's file and line."""
        return ChecksFileError(self.source, self.line, msg)

    def pop(self, key: str, default: Any = None) -> Any:
        """Take an argument out (leftovers are errors, see :meth:`no_leftovers`)."""
        return self.opts.pop(key, default)

    def columns(self, required: bool = True, key_single: str = "column") -> tuple[str, ...]:
        """The ``columns`` (or ``column``) argument as a tuple of names; () when optional and absent."""
        val = self.opts.pop("columns", None)
        single = self.opts.pop(key_single, None)
        if val is None and single is not None:
            val = single
        if isinstance(val, str):
            val = [val]
        if val is None or (isinstance(val, list) and not val):
            if required:
                raise self.fail(f"{self.ctype}: name the column(s) to check")
            return ()
        if not isinstance(val, list) or not all(isinstance(c, str) and c for c in val):
            raise self.fail(f"{self.ctype}: columns must be strings")
        return tuple(val)

    def one_column(self, what: str = "column") -> str:
        """The single column of a check that takes exactly one."""
        cols = self.columns()
        if len(cols) != 1:
            raise self.fail(f"{self.ctype}: give exactly one {what}")
        return cols[0]

    def number(
        self, key: str, default: float | None = None, *, integer: bool = False, minimum: float | None = None
    ) -> Any:
        """A numeric argument (an integer if ``integer``), at least ``minimum``; ``default`` when absent."""
        v = self.opts.pop(key, default)
        if v is None:
            return None
        kinds = (int,) if integer else (int, float)
        if not isinstance(v, kinds) or isinstance(v, bool) or (minimum is not None and v < minimum):
            kind = "an integer" if integer else "a number"
            bound = f" >= {minimum:g}" if minimum is not None else ""
            raise self.fail(f"{self.ctype}: {key} must be {kind}{bound}")
        return v

    def no_leftovers(self) -> None:
        """Fail on arguments the check type does not know."""
        if self.opts:
            raise self.fail(f"{self.ctype}: unknown argument(s) {sorted(self.opts)}")

    def spec(self, cls: type[S], default_name: str, columns: tuple[str, ...] = (), **type_fields: Any) -> S:
        """The spec, once every argument was consumed (leftovers are an error)."""
        self.no_leftovers()
        return cls(
            name=self.name or default_name,
            columns=columns,
            level=self.level,
            line=self.line,
            max_failing_rows=self.max_failing_rows,
            **type_fields,
        )
