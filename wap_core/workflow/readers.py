"""Source readers of an ingest: the batch's files (local paths, globs, object-store URLs) read with Spark into
the table's schema, exactly or not at all.

Each format (CSV, JSON lines, Parquet) has a reader; rows that cannot be parsed are never turned into NULLs:
they are located (file and line), counted and sampled, and kept out of the batch. Every value is stored
exactly or its row is malformed: a cast that would change it (overflow, lost fraction, out of range,
infinity from finite text, bytes that are not UTF-8, a JSON object in a string column) counts like a value
that does not parse (see :func:`_exactness` and docs/workflow.md, "Exact or malformed").
:mod:`wap_core.workflow.ingest` writes what :func:`read_source` returns into a fresh branch.
"""

from __future__ import annotations

import codecs
import csv
import glob
import io
import logging
import os
import re
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wap_core.exceptions import (
    SchemaMismatchError,
    SourceError,
    ValidationError,
    WapError,
)
from wap_core.security.paths import (
    SourcePolicy,
    confine,
    expand_confined,
)
from wap_core.values import Record

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

    from wap_core.lakehouse import Lakehouse

FORMATS = ("csv", "parquet", "json")
_EXT = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
CORRUPT = "_corrupt_record"
SAMPLE = 5
_LINE_SCAN_LIMIT = 256 * 1024 * 1024  # bytes scanned in Python to find line numbers of bad rows
CSV_MAX_FIELD_CHARS = (
    1024 * 1024
)  # longest CSV field (characters), for Spark (maxCharsPerColumn) and Python's csv alike
log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- sources


def resolve_sources(
    sources: Sequence[str],
    fmt: str | None = None,
    *,
    policy: SourcePolicy = SourcePolicy.CONFINED,
    roots: Sequence[Path] = (),
) -> tuple[list[str], str]:
    """Expand files and globs; every file must exist, be readable and non-empty; one format.

    Under ``SourcePolicy.CONFINED`` (the default) every path, and every match of a glob, must resolve
    (through symlinks) under one of ``roots`` (see :func:`wap_core.security.paths.allowed_roots`); anything
    else is refused with the roots named. ``SourcePolicy.ANY`` reads any path the OS user can read.
    """
    if not sources:
        raise SourceError("no source given")
    if fmt is not None and fmt not in FORMATS:
        raise ValidationError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    confined = policy is not SourcePolicy.ANY
    files = [_readable_file(p) for src in sources for p in _expand(src, confined, roots)]
    if fmt is None:
        fmt = _format_of(files)
    assert fmt is not None
    return files, fmt


def _expand(src: str, confined: bool, roots: Sequence[Path]) -> list[Path]:
    """A source's files: a glob's matches (confined: each under a root) or the path itself."""
    if not any(ch in src for ch in "*?["):
        return [confine(src, roots)] if confined else [Path(src)]
    if confined:
        return expand_confined(src, roots)
    matched = [Path(m) for m in sorted(glob.glob(src))]
    if not matched:
        raise SourceError(f"source pattern {src!r} matches no file")
    return matched


def _readable_file(p: Path) -> str:
    """``p`` resolved, once it is known to be an existing, readable, non-empty file."""
    f = str(p)
    if not p.exists():
        raise SourceError(f"source {f} does not exist")
    if p.is_dir():
        raise SourceError(f"source {f} is a directory; give files or a glob such as {f}/*.csv")
    if not os.access(p, os.R_OK):
        raise SourceError(f"source {f} is not readable")
    if p.stat().st_size == 0:
        raise SourceError(f"source {f} is empty")
    return str(p.resolve())


def _format_of(files: list[str]) -> str:
    """The one format the files' extensions name."""
    kinds = {_EXT.get(Path(f).suffix.lower()) for f in files}
    if None in kinds:
        raise SourceError("cannot tell the format from the file name(s); pass --format csv|parquet|json")
    if len(kinds) > 1:
        raise SourceError(
            f"sources mix formats ({', '.join(sorted(k for k in kinds if k))}); ingest one format at a time"
        )
    kind = kinds.pop()
    assert kind is not None
    return kind


# --------------------------------------------------------------------------- type compatibility


def _castable(src: DataType, dst: DataType) -> bool:
    from pyspark.sql import types as T

    if src == dst:
        return True
    numeric = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
    temporal = (T.DateType, T.TimestampType, T.TimestampNTZType)
    if isinstance(src, T.NullType):
        return True
    if isinstance(src, T.StringType):
        return isinstance(dst, (*numeric, *temporal, T.BooleanType, T.StringType, T.BinaryType))
    if isinstance(dst, T.StringType):
        return isinstance(src, (*numeric, *temporal, T.BooleanType))
    if isinstance(src, numeric) and isinstance(dst, numeric):
        return True
    return bool(isinstance(src, temporal) and isinstance(dst, temporal))


_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}  # digits of the largest value
_NON_FINITE_TEXT = r"(?i)^\s*[+-]?(inf|infinity|nan)\s*$"  # what Spark reads as a non-finite double
_ZERO_TEXT = r"^\s*[+-]?(0+\.?0*|\.0+)([eE][+-]?\d+)?\s*$"  # a number written as zero
_DATE_ONLY_TEXT = r"^\s*\d{4}-\d{1,2}-\d{1,2}\s*$"  # a whole date (year, month, day) with no time part
_YEAR_TEXT = (
    r"^\s*(?!0000)\d{4}-"  # a date or timestamp of year 0001..9999 (what every reader of it can hold)
)
_PLAIN_NUMBER_TEXT = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"  # no 'd'/'f' suffix, no hex float
_INTEGER_TEXT = r"^\s*[+-]?\d+\s*$"
_ZONED_TEXT = (
    r":\d{2}(\.\d*)?\s*(Z|[+-]\d{1,2}(:?\d{2})?|[A-Za-z][\w/+-]*)$"  # a time with a zone (offset or id)
)
_SUB_MICRO_TEXT = r":\d{1,2}\.\d{6}\d*[1-9]"  # fractional seconds beyond microseconds that are not zero


def _digits(t: DataType) -> tuple[int, int] | None:
    """(integer digits, fraction digits) an exact numeric type holds, or None (float, double, other)."""
    from pyspark.sql import types as T

    if isinstance(t, T.DecimalType):
        return t.precision - t.scale, t.scale
    if t.simpleString() in _INTEGRAL_DIGITS:
        return _INTEGRAL_DIGITS[t.simpleString()], 0
    return None


def _narrowing(src: DataType, dst: DataType) -> bool:
    """True if ``dst`` cannot hold every value of the typed ``src`` exactly (a string source is parsed,
    not narrowed: each value is checked on its own)."""
    from pyspark.sql import types as T

    if src == dst or isinstance(src, (T.NullType, T.StringType)) or isinstance(dst, T.StringType):
        return False
    if isinstance(src, T.TimestampType | T.TimestampNTZType) and isinstance(dst, T.DateType):
        return True
    s, d = _digits(src), _digits(dst)
    if s is not None and d is not None:
        return d[0] < s[0] or d[1] < s[1]
    if isinstance(dst, T.DoubleType):  # 15 significant digits survive a double
        return s is not None and sum(s) > 15
    if isinstance(dst, T.FloatType):  # 6 survive a float
        return isinstance(src, T.DoubleType) or (s is not None and sum(s) > 6)
    return isinstance(src, T.FloatType | T.DoubleType) and d is not None  # fraction, range, NaN, inf


def _exactness(
    src: Column, cast: Column, s: DataType, t: DataType, text_numbers: bool
) -> list[tuple[Column, str]]:
    """(condition, why) pairs under which a non-null ``src`` whose ``cast`` to ``t`` is not null was CHANGED
    by the cast (Spark 3.5 with ANSI off casts silently: overflow wraps, fractions are dropped, text
    too large for a double becomes infinity). The rule (docs/workflow.md, "Exact or malformed"):

    - identical types need no check;
    - a typed source (Parquet, JSON numbers) must survive the cast back: ``cast(cast(v as t) as s) = v``
      (Spark's ``=`` holds for NaN = NaN); a double into a float column keeps the nearest float, only
      overflow to infinity and underflow to zero count as changes;
    - text (CSV, JSON strings) is compared as the value it writes: an integer or decimal equals the
      text read as a wide decimal (``'007'`` is 7, ``'1.50'`` is 1.5, ``'1.9'`` is not an int); a double
      is finite unless the text names infinity or NaN, and zero only if the text is zero; a date has no
      time part; a timestamp no non-zero digit beyond microseconds;
    - ``text_numbers``: the typed source's numbers were text (JSON): a non-finite double is malformed
      (JSON has no infinity or NaN; a number too large for a double reads as infinity).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    inf = [F.lit(float("inf")), F.lit(float("-inf"))]
    non_finite = F.isnan(cast) | cast.isin(*inf)
    checks: list[tuple[Column, str]] = []
    if text_numbers and isinstance(s, T.FloatType | T.DoubleType):
        checks.append((F.isnan(src) | src.isin(*inf), "is not a finite number"))
    if s == t or isinstance(s, T.NullType) or isinstance(t, T.StringType | T.BooleanType | T.BinaryType):
        return checks
    if isinstance(s, T.StringType):
        text = F.trim(src)
        digits = _digits(t)
        if digits is not None:
            scale = 38 - digits[0]
            wide = text.cast(T.DecimalType(38, scale))
            # more fraction digits than the wide decimal keeps would be rounded by it before the comparison
            fraction = F.regexp_extract(text, r"^[+-]?\d*\.(\d*[1-9])0*$", 1)
            checks.append(
                (
                    ~cast.eqNullSafe(wide) | (F.length(fraction) > scale),
                    f"is not exactly a {t.simpleString()} (overflow or fraction)",
                )
            )
        elif isinstance(t, T.FloatType | T.DoubleType):
            checks.append(
                (
                    ~text.rlike(_PLAIN_NUMBER_TEXT) & ~text.rlike(_NON_FINITE_TEXT),
                    f"is not a plain decimal number ({t.simpleString()}: no suffix, no hexadecimal)",
                )
            )
            checks.append((non_finite & ~text.rlike(_NON_FINITE_TEXT), f"overflows {t.simpleString()}"))
            checks.append(((cast == 0) & ~text.rlike(_ZERO_TEXT), f"underflows {t.simpleString()} to zero"))
            # an integer the double cannot hold exactly (beyond 2^53) is changed by it, as from JSON or Parquet
            exact = T.DecimalType(38, 0)
            checks.append(
                (
                    text.rlike(_INTEGER_TEXT) & ~cast.cast(exact).eqNullSafe(text.cast(exact)) & ~non_finite,
                    f"is not exactly a {t.simpleString()} (an integer beyond its precision)",
                )
            )
        elif isinstance(t, T.DateType):
            checks.append(
                (~text.rlike(_DATE_ONLY_TEXT), "is not a whole date alone (year-month-day, no time part)")
            )
            checks.append((~text.rlike(_YEAR_TEXT), "is outside the years 0001-9999"))
        elif isinstance(t, T.TimestampType | T.TimestampNTZType):
            checks.append((text.rlike(_SUB_MICRO_TEXT), "has digits beyond microseconds"))
            checks.append((~text.rlike(_YEAR_TEXT), "is outside the years 0001-9999"))
        return checks
    if isinstance(s, T.DoubleType) and isinstance(t, T.FloatType):
        checks.append((non_finite & ~(F.isnan(src) | src.isin(*inf)), "overflows float"))
        checks.append(((cast == 0) & (src != 0), "underflows float to zero"))
        return checks
    checks.append((~(cast.cast(s) == src), f"does not fit {t.simpleString()} exactly"))
    return checks


@dataclass
class Prepared:
    """A batch read and cast to the table's schema: its good rows, their count, the malformed rows' count and
    sample, and the schema check's notes."""

    df: DataFrame  # good rows only, cast to the target schema, in target column order
    rows: int
    malformed: int
    sample: list[Record]
    narrowing: list[str] = field(default_factory=list)  # the schema check's notes (see _narrowing)


def match_columns(table: str, source_cols: Sequence[str], target: StructType) -> dict[str, str]:
    """target column -> source column (case-insensitive); SchemaMismatchError listing every problem."""
    by_lower: dict[str, str] = {}
    problems: list[str] = []
    for c in source_cols:
        if c.lower() in by_lower:
            problems.append(f"source has column {c!r} twice")
        by_lower[c.lower()] = c
    mapping: dict[str, str] = {}
    for f in target.fields:
        src = by_lower.pop(f.name.lower(), None)
        if src is None:
            problems.append(f"missing column {f.name} ({f.dataType.simpleString()})")
        else:
            mapping[f.name] = src
    problems += [
        f"unexpected column {c} (not in the table; schema changes are not made by ingest)"
        for c in by_lower.values()
    ]
    if problems:
        raise SchemaMismatchError(table, problems)
    return mapping


@dataclass(frozen=True)
class _SourceTraits:
    """What ``_prepare`` must know of the source beyond its schema to tell an exact value from a changed one."""

    text_numbers: bool = False  # typed numbers that were text (JSON): a non-finite double is malformed
    invalid_bytes: bool = False  # the files hold bytes that are not UTF-8: a string with U+FFFD is malformed
    nested: Callable[[str], Column] | None = None  # JSON: source column -> "this row holds an object/array"
    checks: Callable[[str], list[tuple[Column, str]]] | None = None  # source column -> more (malformed, why)
    hidden: tuple[str, ...] = ()  # columns of ``raw`` that locate a row (file, row, text), not source columns


def _cast(src: Column, s: DataType, t: DataType) -> Column:
    """``src`` (of source type ``s``) cast to ``t``: Spark's cast, except that text with a zone names an
    instant, which a zoneless column holds as its UTC time (as a Parquet timestamp with a zone becomes),
    never as its local digits with the zone dropped."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(s, T.StringType) and isinstance(t, T.TimestampNTZType):
        zoned = F.trim(src).rlike(_ZONED_TEXT)
        return F.when(zoned, src.cast(T.TimestampType()).cast(t)).otherwise(src.cast(t))
    return src.cast(t)


def _prepare(
    table: str,
    raw: DataFrame,
    target: StructType,
    mapping: dict[str, str],
    locate: Callable[[list[Record]], None],
    unreadable: int = 0,
    unreadable_sample: Sequence[Record] = (),
    traits: _SourceTraits = _SourceTraits(),
) -> Prepared:
    """Cast ``raw`` to ``target``; count and sample rows that do not parse or that a cast would change (one pass).

    A value is kept only if it is stored exactly (see :func:`_exactness`); otherwise its row is malformed.
    ``unreadable``: how many CSV records could not even be read (kept out of ``raw`` already, see
    :func:`_unreadable_records`); they count as malformed rows, ``unreadable_sample`` first in the sample.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    source_type = {f.name: raw.schema[mapping[f.name]].dataType for f in target.fields}
    problems = [
        f"column {f.name}: source type {source_type[f.name].simpleString()} cannot become {f.dataType.simpleString()}"
        for f in target.fields
        if not _castable(source_type[f.name], f.dataType)
    ]
    if problems:
        raise SchemaMismatchError(table, problems)
    narrowing = [
        f"column {f.name}: source type {source_type[f.name].simpleString()} narrows to {f.dataType.simpleString()}"
        " (values that do not fit exactly are malformed rows)"
        for f in target.fields
        if _narrowing(source_type[f.name], f.dataType)
    ]
    has_corrupt = CORRUPT in raw.columns
    corrupt = F.col(CORRUPT).isNotNull() if has_corrupt else F.lit(False)
    casts: list[Column] = []
    bads: list[Column] = []  # per column: a value present on a well-formed line that does not cast exactly
    whys: list[Column] = []  # per column: what is wrong with it (for the sample)
    present: list[Column] = []
    for f in target.fields:
        s = source_type[f.name]
        src = F.col(_q(mapping[f.name]))
        cast = _cast(src, s, f.dataType)
        casts.append(cast.alias(f.name))
        conds = [(cast.isNull(), f"does not parse as {f.dataType.simpleString()}")]
        if isinstance(s, T.StringType) and _digits(f.dataType) is not None:
            # a number too large for the column reads as NULL: say so, as for a fraction (not "does not parse")
            number = F.trim(src).cast(T.DoubleType()).isNotNull()
            conds = [
                (
                    cast.isNull() & number,
                    f"is not exactly a {f.dataType.simpleString()} (overflow or fraction)",
                ),
                (cast.isNull(), f"does not parse as {f.dataType.simpleString()}"),
            ]
        conds += _exactness(src, cast, s, f.dataType, traits.text_numbers)
        if isinstance(s, T.StringType) and traits.invalid_bytes:
            conds.append((F.instr(src, "\ufffd") > 0, "holds bytes that are not UTF-8"))
        if isinstance(s, T.StringType) and traits.nested is not None:
            conds.append((traits.nested(mapping[f.name]), "is a JSON object or array, not a scalar"))
        if traits.checks is not None:
            conds += traits.checks(mapping[f.name])
        wrong = conds[0][0]
        why = F.when(conds[0][0], F.lit(conds[0][1]))
        for c, w in conds[1:]:
            wrong = wrong | c
            why = why.when(c, F.lit(w))
        present.append(~corrupt & src.isNotNull())
        bads.append(~corrupt & src.isNotNull() & wrong)
        whys.append(why)
    any_bad = corrupt
    for b in bads:
        any_bad = any_bad | b
    flagged = raw.withColumn("__bad", any_bad)
    stats = flagged.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.col("__bad").cast("int")).alias("bad"),
        *[F.sum(b.cast("int")).alias(f"bad{i}") for i, b in enumerate(bads)],
        *[F.sum(p.cast("int")).alias(f"nn{i}") for i, p in enumerate(present)],
    ).collect()[0]
    rows, bad = _parsed_counts(table, target, stats, unreadable)
    sample: list[Record] = [dict(u) for u in unreadable_sample[:SAMPLE]]
    if bad:
        located = _bad_rows(flagged, raw.columns, bads, whys, target, mapping)
        locate(located)
        for d in located:
            for h in traits.hidden:
                if h in d and h not in ("__file", "__row"):
                    del d[h]
        sample += located
    good = flagged.where(~F.col("__bad")).select(*casts)
    return Prepared(good, rows - bad, bad + unreadable, sample[:SAMPLE], narrowing)


def _parsed_counts(table: str, target: StructType, stats: Any, unreadable: int) -> tuple[int, int]:
    """(rows, bad rows) of the one-pass counts; refuses a source with nothing usable in it."""
    rows, bad = int(stats["rows"]), int(stats["bad"] or 0)
    if rows == 0 and not unreadable:
        raise SourceError("the source has no data rows")
    hopeless = [
        f"column {f.name}: no value casts to {f.dataType.simpleString()}"
        for i, f in enumerate(target.fields)
        if int(stats[f"nn{i}"] or 0) > 0 and int(stats[f"bad{i}"] or 0) == int(stats[f"nn{i}"] or 0)
    ]
    if hopeless:
        raise SchemaMismatchError(table, hopeless)
    if bad == rows:
        raise SourceError(f"none of the {rows + unreadable} source rows could be parsed")
    return rows, bad


def _bad_rows(
    flagged: DataFrame,
    columns: Sequence[str],
    bads: Sequence[Column],
    whys: Sequence[Column],
    target: StructType,
    mapping: dict[str, str],
) -> list[Record]:
    """Up to SAMPLE malformed rows as the source's text, each with what was wrong with it: ``__problem``
    in words, ``__columns`` the table's columns whose value was bad."""
    from pyspark.sql import functions as F

    bad_cols = F.array_compact(
        F.array(*[F.when(b, F.lit(f.name)) for b, f in zip(bads, target.fields, strict=False)])
    )
    bad_whys = F.array_compact(
        F.array(
            *[
                F.when(b, F.concat(F.lit(f"{f.name} "), w))
                for b, w, f in zip(bads, whys, target.fields, strict=False)
            ]
        )
    )
    located: list[Record] = []
    for r in (
        flagged.where(F.col("__bad"))
        .select(*[F.col(_q(c)) for c in columns], bad_cols.alias("__cols"), bad_whys.alias("__whys"))
        .limit(SAMPLE)
        .collect()
    ):
        d: Record = {
            k: (v if v is None or (k.startswith("__") and isinstance(v, int)) else str(v))
            for k, v in r.asDict().items()
            if k not in ("__cols", "__whys")
        }
        if d.get(CORRUPT):
            d["__problem"] = "ragged or unparsable line"
        else:
            d["__problem"] = f"bad value in {', '.join(r['__cols'])}: {'; '.join(r['__whys'])}"
            d["__columns"] = ", ".join(r["__cols"])
        located.append(d)
    return located


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _allow_long_csv_fields() -> None:
    """Python's csv module stops at 131,072 characters per field; ours is CSV_MAX_FIELD_CHARS, as Spark's."""
    if csv.field_size_limit() < CSV_MAX_FIELD_CHARS:
        csv.field_size_limit(CSV_MAX_FIELD_CHARS)


def _records(fh: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """RFC 4180 records of an open file with the physical line each one STARTS on (1-based).

    A quoted field may span lines, so a record's first line is the line after the previous record's
    last one (``reader.line_num`` counts the lines read so far). Raises csv.Error (e.g. a field
    longer than the limit).
    """
    _allow_long_csv_fields()
    reader = csv.reader(fh)
    while True:
        start = reader.line_num + 1
        row = next(reader, None)
        if row is None:
            return
        yield start, row


def _csv_problem(exc: csv.Error) -> str:
    """What is wrong with a record Python's strict RFC 4180 reader refused, in words."""
    text = str(exc)
    if "field larger than field limit" in text:
        return f"a field longer than {CSV_MAX_FIELD_CHARS:,} characters (an unterminated quote?)"
    if "unexpected end of data" in text:
        return "unterminated quote: the file ends inside a quoted field"
    if "expected after" in text:
        return "text after a closing quote (an unterminated quote?)"
    return f"unreadable record ({text})"


def _strict_records(fh: Iterable[str]) -> Iterator[tuple[int, list[str] | str]]:
    """Every record of an open CSV file (after none skipped), read as strict RFC 4180, with the
    physical line it starts on (1-based).

    A record that cannot be read (an unterminated quote, text after a closing quote, a field longer
    than CSV_MAX_FIELD_CHARS) is yielded as the problem (a str) instead of its fields, and reading
    resumes on the line after its first: the lines an unterminated quote swallowed are records again.
    """
    _allow_long_csv_fields()
    source = iter(fh)
    replay: deque[str] = deque()
    taken: list[str] = []  # the physical lines of the record being read

    def lines() -> Iterator[str]:
        while True:
            if replay:
                line = replay.popleft()
            else:
                nxt = next(source, None)
                if nxt is None:
                    return
                line = nxt
            taken.append(line)
            yield line

    reader = csv.reader(lines(), strict=True)
    start = 1
    while True:
        taken.clear()
        try:
            row = next(reader, None)
            if row is not None and any(len(v) > CSV_MAX_FIELD_CHARS for v in row):
                raise csv.Error(f"field larger than field limit ({CSV_MAX_FIELD_CHARS})")
        except csv.Error as exc:
            replay.extendleft(reversed(taken[1:]))
            yield start, _csv_problem(exc)
            start += 1
            reader = csv.reader(lines(), strict=True)  # a fresh reader (and feed) from the next line
            continue
        if row is None:
            return
        yield start, row
        start += len(taken)


def _strictly_readable(path: str) -> bool:
    """True if every record of the CSV file reads as strict RFC 4180 (one pass at the csv module's C speed)."""
    _allow_long_csv_fields()
    if csv.field_size_limit() > CSV_MAX_FIELD_CHARS:  # raised elsewhere in the process: check each field
        return False
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
        try:
            for _ in csv.reader(fh, strict=True):
                pass
        except csv.Error:
            return False
    return True


@dataclass(frozen=True)
class _Unreadable:
    """The CSV records of one file that cannot be read at all (see :func:`_strict_records`)."""

    file: str
    records: list[tuple[int, str]]  # (line the record starts on, problem)

    def sample(self, header: Sequence[str]) -> list[Record]:
        """The malformed-row sample form of the first records (their first line as the raw text)."""
        wanted = dict(self.records[:SAMPLE])
        out: list[Record] = []
        with open(self.file, newline="", encoding="utf-8-sig", errors="replace") as fh:
            for n, line in enumerate(fh, start=1):
                if n in wanted:
                    d: Record = dict.fromkeys(header)
                    d.update(
                        {
                            CORRUPT: line.rstrip("\r\n"),
                            "__problem": wanted.pop(n),
                            "__file": Path(self.file).name,
                            "__line": n,
                        }
                    )
                    out.append(d)
                    if not wanted:
                        break
        return out


def _unreadable_records(files: Sequence[str]) -> list[_Unreadable]:
    """The files (of those small enough to scan) with records that cannot be read, and those records.

    Spark's CSV reader would read an unterminated quote as a field running on into the next records
    (silently swallowing them) and stop the whole read at a field longer than CSV_MAX_FIELD_CHARS.
    """
    found: list[_Unreadable] = []
    for f in files:
        if Path(f).stat().st_size > _LINE_SCAN_LIMIT or _strictly_readable(f):
            continue
        with open(f, newline="", encoding="utf-8-sig", errors="replace") as fh:
            records = _strict_records(fh)
            next(records, None)  # the header (read and checked by _csv_header)
            bad = [(line, row) for line, row in records if isinstance(row, str)]
        if bad:
            found.append(_Unreadable(f, bad))
    return found


def _without_unreadable(files: Sequence[str], unreadable: Sequence[_Unreadable], into: Path) -> list[str]:
    """``files`` with a copy (same name, under ``into``) of each one that has unreadable records, in which
    the first line of each such record is blank: Spark (which skips blank lines) then reads exactly the
    records :func:`_strict_records` read, on the same line numbers."""
    blank = {u.file: {line for line, _ in u.records} for u in unreadable}
    out: list[str] = []
    for i, f in enumerate(files):
        if f not in blank:
            out.append(f)
            continue
        dst = into / str(i) / Path(f).name
        dst.parent.mkdir(parents=True)
        with (
            open(f, newline="", encoding="utf-8-sig", errors="replace") as src,
            open(dst, "w", newline="", encoding="utf-8") as copy,
        ):
            for n, line in enumerate(src, start=1):
                copy.write(line[len(line.rstrip("\r\n")) :] if n in blank[f] else line)
        out.append(str(dst))
    return out


def _invalid_utf8(files: Sequence[str]) -> bool:
    """True if a file holds bytes that are not UTF-8 (its decoder read them as U+FFFD), or is too large to scan
    (then every U+FFFD in a string value counts as such a byte: the two cannot be told apart after decoding)."""
    for f in files:
        if Path(f).stat().st_size > _LINE_SCAN_LIMIT:
            return True
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        with open(f, "rb") as fh:
            try:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    decoder.decode(chunk)
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                log.warning(
                    "%s holds bytes that are not UTF-8; the rows holding them are malformed", Path(f).name
                )
                return True
    return False


def _read_csv_header(path: str) -> list[str]:
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
        try:
            first = next(_records(fh), None)
        except csv.Error as exc:
            raise SourceError(f"source {path}: cannot read the header line: {exc}") from None
    if not first or not any(h.strip() for h in first[1]):
        raise SourceError(f"source {path} has no header line")
    return [h.strip() for h in first[1]]


def _csv_header(files: list[str]) -> list[str]:
    header = _read_csv_header(files[0])
    for f in files[1:]:
        other = _read_csv_header(f)
        if [h.lower() for h in other] != [h.lower() for h in header]:
            raise SourceError(f"CSV headers differ: {files[0]} has {header}, {f} has {other}")
    if any(not h for h in header):
        raise SourceError(f"source {files[0]} has an empty column name in its header")
    return header


def _iter_csv(files: list[str]) -> Iterator[tuple[str, int, list[str]]]:
    """(file name, first physical line, fields) of every data record; files too large to scan are skipped."""
    for f in files:
        if Path(f).stat().st_size > _LINE_SCAN_LIMIT:
            continue
        with open(f, newline="", encoding="utf-8-sig", errors="replace") as fh:
            records = _records(fh)
            try:
                next(records, None)  # the header
                for line, row in records:
                    yield Path(f).name, line, row
            except csv.Error as exc:  # Spark read the file; only the locating of samples stops here
                log.warning("%s: %s; malformed rows after this point are not located", Path(f).name, exc)


def _csv_key(fields: Sequence[str | None]) -> tuple[str, ...]:
    """Fields compared between Spark's parse and Python's: line breaks normalized, a trailing one dropped."""
    out = ["" if v is None else v.replace("\r\n", "\n").replace("\r", "\n") for v in fields]
    if out:
        out[-1] = out[-1].rstrip("\n")
    return tuple(out)


def _csv_locator(files: list[str], header: list[str]) -> Callable[[list[Record]], None]:
    def locate(sample: list[Record]) -> None:
        wanted: dict[tuple[str, ...], list[Record]] = {}
        for d in sample:
            if d.get(CORRUPT):
                try:
                    fields: list[str] = next(csv.reader(io.StringIO(d[CORRUPT], newline="")), [])
                except csv.Error:
                    continue
                key = _csv_key(fields)
            else:
                key = _csv_key([d.get(h) for h in header])
            wanted.setdefault(key, []).append(d)
        for fname, line, row in _iter_csv(files):
            if not wanted:
                break
            key = _csv_key(row)
            if key in wanted:
                d = wanted[key].pop(0)
                d["__file"], d["__line"] = fname, line
                if not wanted[key]:
                    del wanted[key]

    return locate


def _csv_reader(reader: DataFrameReader) -> DataFrameReader:
    """Spark's CSV reader set to RFC 4180: a quoted field may hold separators, line breaks and doubled
    quotes (``""``); a field may not exceed CSV_MAX_FIELD_CHARS (an unterminated quote fails clearly
    instead of swallowing the rest of the file into one field)."""
    return (
        reader.option("header", "true")
        .option("mode", "PERMISSIVE")
        .option("multiLine", "true")
        .option("quote", '"')
        .option("escape", '"')
        .option("maxCharsPerColumn", str(CSV_MAX_FIELD_CHARS))
    )


def _is_field_too_long(exc: BaseException) -> bool:
    text = str(exc)
    return "TextParsingException" in text and "exceeds the maximum number of characters" in text


def _field_too_long(files: list[str]) -> SourceError:
    """The error for a CSV field longer than CSV_MAX_FIELD_CHARS, naming file and line (found with Python's csv)."""
    limit = f"{CSV_MAX_FIELD_CHARS:,}"
    _allow_long_csv_fields()
    for f in files:
        if Path(f).stat().st_size > _LINE_SCAN_LIMIT:
            continue
        with open(f, newline="", encoding="utf-8-sig", errors="replace") as fh:
            reader = csv.reader(fh)
            start = 1
            try:
                while True:
                    start = reader.line_num + 1
                    if next(reader, None) is None:
                        break
            except csv.Error as exc:
                if "field larger than field limit" in str(exc):
                    return SourceError(
                        f"source {f}: the record starting on line {start} has a field longer than {limit} characters "
                        "(an unterminated quote?); such a field cannot be ingested"
                    )
                return SourceError(f"source {f}: line {start}: {exc}")
    return SourceError(
        f"a field is longer than {limit} characters (an unterminated quote?) in one of: {', '.join(files)}"
    )


def _json_locator(files: list[str]) -> Callable[[list[Record]], None]:
    """Locate sampled JSON rows by their line's text (``__text``, or the corrupt record's)."""

    def key(text: str) -> str:
        return text.strip().lstrip("\ufeff").strip()

    def locate(sample: list[Record]) -> None:
        wanted: dict[str, list[Record]] = {}
        for d in sample:
            text = d.get("__text") or d.get(CORRUPT)
            if text:
                wanted.setdefault(key(text), []).append(d)
        for f in files:
            if not wanted or Path(f).stat().st_size > _LINE_SCAN_LIMIT:
                continue
            with open(f, encoding="utf-8-sig", errors="replace") as fh:
                for n, line in enumerate(fh, start=1):
                    found = wanted.get(key(line))
                    if found:
                        d = found.pop(0)
                        d["__file"], d["__line"] = Path(f).name, n
                        if not found:
                            del wanted[key(line)]

    return locate


def read_source(
    lh: Lakehouse, table: str, files: list[str], fmt: str, target: StructType | None
) -> tuple[Prepared, StructType]:
    """Read, validate and cast the source. ``target`` None means: infer (table creation)."""
    readers = {"csv": _read_csv, "json": _read_json, "parquet": _read_parquet}
    return readers[fmt](lh.spark, table, files, target)


_QUOTED_EMPTY = "\ue000wap-quoted-empty\ue000"  # what Spark reads a quoted empty field as, until told apart


def _quoted_empties(raw: DataFrame, columns: Sequence[str]) -> DataFrame:
    """A quoted empty CSV field (``""``) is the empty string, an empty field is no value (NULL); Spark reads
    both as NULL. The empty string is then judged as any text: stored in a string column, malformed in a
    column of another type (there is no empty number or date), as a JSON ``""`` is."""
    from pyspark.sql import functions as F

    def field(name: str) -> Column:
        col = F.col(_q(name))
        return F.when(col == _QUOTED_EMPTY, F.lit("")).otherwise(col).alias(name)

    return raw.select(*[field(c) if c in columns else F.col(_q(c)) for c in raw.columns])


def _read_csv(
    spark: SparkSession, table: str, files: list[str], target: StructType | None
) -> tuple[Prepared, StructType]:
    """CSV as RFC 4180; records Python's strict reader cannot read are malformed rows kept out of the batch."""
    from pyspark.sql import types as T

    header = _csv_header(files)
    traits = _SourceTraits(invalid_bytes=_invalid_utf8(files))
    unreadable = _unreadable_records(files)
    copies: Path | None = None
    if unreadable:  # Spark reads copies without them (removed with the prepared batch)
        copies = Path(tempfile.mkdtemp(prefix="wap-csv-"))
        files = _without_unreadable(files, unreadable, copies)
        log.warning(
            "%d CSV record(s) cannot be read (e.g. %s line %d: %s); they are kept out of the batch",
            sum(len(u.records) for u in unreadable),
            Path(unreadable[0].file).name,
            *unreadable[0].records[0],
        )
    try:
        if target is None:
            inferred = _csv_reader(spark.read).option("inferSchema", "true").csv(files).schema
            target = T.StructType(
                [
                    T.StructField(f.name.strip(), f.dataType, True)
                    for f in inferred.fields
                    if f.name != CORRUPT
                ]
            )
        mapping = match_columns(table, header, target)
        schema = T.StructType(
            [T.StructField(h, T.StringType(), True) for h in header]
            + [T.StructField(CORRUPT, T.StringType(), True)]
        )
        raw = (
            _csv_reader(spark.read)
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("emptyValue", _QUOTED_EMPTY)
            .schema(schema)
            .csv(files)
        )
        raw = _quoted_empties(raw, header)
        prepared = _prepare(
            table,
            raw,
            target,
            mapping,
            _csv_locator(files, header),
            sum(len(u.records) for u in unreadable),
            [d for u in unreadable for d in u.sample(header)],
            traits,
        )
        if copies is not None:
            weakref.finalize(prepared, shutil.rmtree, copies, True)
        return prepared, target
    except WapError:
        if copies is not None:
            shutil.rmtree(copies, ignore_errors=True)
        raise
    except Exception as exc:
        if copies is not None:
            shutil.rmtree(copies, ignore_errors=True)
        if _is_field_too_long(exc):
            raise _field_too_long(files) from None
        raise


def json_fields(spark: SparkSession, files: list[str]) -> list[StructField]:
    """The fields of JSON lines ``files`` as Spark's JSON reader infers them (the ingest's schema of the
    source; :mod:`wap_core.workflow.source_lines` reads them the same way); SourceError when none parses."""
    inferred = (
        spark.read.option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(files)
        .schema
    )
    fields = [f for f in inferred.fields if f.name != CORRUPT]
    if not fields:
        raise SourceError("no JSON object could be parsed from the source")
    return fields


_JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"  # RFC 8259's number, as written


def _number_text(name: str) -> str:
    """A Java regex whose group 1 is the text of the JSON number under key ``name`` on a line."""
    return '"' + re.escape(name) + r'"\s*:\s*(' + _JSON_NUMBER + r")\s*[,}]"


def _read_json(
    spark: SparkSession, table: str, files: list[str], target: StructType | None
) -> tuple[Prepared, StructType]:
    """JSON lines; a record that does not parse is a malformed row, and so is a value a cast would change.

    The schema is inferred as Spark's JSON reader does; the rows are then parsed line by line
    (``from_json`` over the text) so that each row keeps its line's text: it locates a malformed row, and
    tells a JSON object or array (which Spark would store in a string column as its JSON text) from a string.

    A JSON number into a ``string`` or ``decimal`` column is read as its text on the line, never through a
    double (Spark's reader would store ``1.50`` as ``"1.5"`` and ``1234567890.123456789`` as
    ``1234567890.1234567``): the text is then judged by the rules of text (``1.50`` into a string is
    ``"1.50"``; into a ``decimal`` it is exact or malformed). A number whose text cannot be found on its
    line (a key written with escapes, or one a nested object shares) is malformed, never guessed.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = json_fields(spark, files)
    if target is None:
        target = T.StructType([T.StructField(f.name, f.dataType, True) for f in fields])
    mapping = match_columns(table, [f.name for f in fields], target)
    wanted = {src: target[col].dataType for col, src in mapping.items()}
    as_text = [
        f.name
        for f in fields
        if isinstance(wanted.get(f.name), T.StringType | T.DecimalType)
        and isinstance(f.dataType, T.StringType | T.LongType | T.DoubleType | T.DecimalType)
    ]
    fields = [T.StructField(f.name, T.StringType(), True) if f.name in as_text else f for f in fields]
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    schema = T.StructType([*fields, T.StructField(CORRUPT, T.StringType(), True)])
    strings = [f.name for f in fields if isinstance(f.dataType, T.StringType)]

    def shaped(
        kind: DataType, names: Sequence[str]
    ) -> Column:  # ``names`` read as ``kind``: not null = that shape
        return F.from_json("__text", T.StructType([T.StructField(c, kind, True) for c in names]), options)

    lines = spark.read.text(files).select(F.col("value").alias("__text"))
    lines = lines.where(F.trim(F.regexp_replace("__text", "^\ufeff", "")) != "")
    parsed = F.from_json("__text", schema, options)
    numbers = shaped(T.DoubleType(), as_text) if as_text else None  # not null: a JSON number (or NaN)

    def value(name: str) -> Column:
        if numbers is None or name not in as_text:
            return parsed[name]
        text = F.regexp_extract("__text", _number_text(name), 1)
        return F.when(numbers[name].isNotNull() & (text != ""), text).otherwise(parsed[name])

    raw = lines.select(
        *[value(f.name).alias(f.name) for f in fields],
        F.coalesce(parsed[CORRUPT], F.when(parsed.isNull(), F.col("__text"))).alias(CORRUPT),
        "__text",
        *(
            [
                shaped(T.MapType(T.StringType(), T.StringType()), strings).alias("__nm"),
                shaped(T.ArrayType(T.StringType()), strings).alias("__na"),
            ]
            if strings
            else []
        ),
        *([numbers.alias("__nd")] if numbers is not None else []),
    )

    def number_checks(name: str) -> list[tuple[Column, str]]:
        if name not in as_text:
            return []
        number = F.col("__nd")[name]
        text = F.regexp_extract("__text", _number_text(name), 1)
        quoted = F.col("__text").rlike('"' + re.escape(name) + r'"\s*:\s*"')  # a string, e.g. "NaN"
        return [
            (
                number.isNotNull() & ~quoted & ((text == "") | ~text.cast(T.DoubleType()).eqNullSafe(number)),
                "is a JSON number whose text could not be read from its line (NaN or Infinity, which JSON"
                " has not; a key written with escapes; or a nested object holding the same key)",
            )
        ]

    traits = _SourceTraits(
        text_numbers=True,
        invalid_bytes=_invalid_utf8(files),
        nested=(lambda c: F.col("__nm")[c].isNotNull() | F.col("__na")[c].isNotNull()) if strings else None,
        checks=number_checks if as_text else None,
        hidden=("__text", "__nm", "__na", "__nd"),
    )
    return _prepare(table, raw, target, mapping, _json_locator(files), traits=traits), target


def _read_parquet(
    spark: SparkSession, table: str, files: list[str], target: StructType | None
) -> tuple[Prepared, StructType]:
    """Parquet: every file must share one schema (read from footers, no data)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    try:
        schemas = [pq.read_schema(f) for f in files]
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise SourceError(f"cannot read Parquet footer: {exc}") from exc
    for f, s in zip(files[1:], schemas[1:], strict=False):
        if s.names != schemas[0].names:
            raise SourceError(
                f"Parquet files differ in columns: {files[0]} has {schemas[0].names}, {f} has {s.names}"
            )
    raw = spark.read.parquet(*files)
    if target is None:
        target = T.StructType([T.StructField(f.name, f.dataType, True) for f in raw.schema.fields])
    mapping = match_columns(table, raw.columns, target)
    nanos = _int96_nanos(files)  # rows whose INT96 time has nanoseconds Spark would drop
    if not nanos and all(raw.schema[mapping[f.name]].dataType == f.dataType for f in target.fields):
        # Typed source whose types already are the table's: nothing can fail to parse or cast,
        # so the row count comes from the Parquet footers and no extra pass over the data is made.
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        if rows == 0:
            raise SourceError("the source has no data rows")
        cols = [raw[mapping[f.name]].alias(f.name) for f in target.fields]
        return Prepared(raw.select(*cols), rows, 0, []), target
    located = raw.select(
        "*",
        F.col("_metadata.file_name").alias("__file"),
        (F.col("_metadata.row_index") + 1).alias("__row"),  # the row's position in its file, from 1
    )

    def sub_micro(name: str) -> list[tuple[Column, str]]:
        if name not in nanos:
            return []
        where = F.concat_ws(":", F.col("__file"), F.col("__row").cast("string"))
        return [
            (where.isin(nanos[name]), "has nanoseconds (an INT96 time) a microsecond timestamp cannot hold")
        ]

    traits = _SourceTraits(hidden=("__file", "__row"), checks=sub_micro if nanos else None)
    return _prepare(table, located, target, mapping, lambda s: None, traits=traits), target


_INT96_ROWS_MAX = 10_000  # rows with nanoseconds named one by one; more refuse the source


def _int96_nanos(files: Sequence[str]) -> dict[str, list[str]]:
    """Per top-level INT96 column (Parquet's legacy nanosecond timestamp), the rows (``file:row``, the row
    counted from 1 as ``__row``) whose value has nanoseconds: Spark reads INT96 as microseconds and drops
    them silently. Read with Arrow (which keeps nanoseconds), one column at a time; SourceError when there
    are more than ``_INT96_ROWS_MAX``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out: dict[str, list[str]] = {}
    for f in files:
        pf = pq.ParquetFile(f)
        cols = [
            pf.schema.column(i).name
            for i in range(len(pf.schema))
            if pf.schema.column(i).physical_type == "INT96" and "." not in pf.schema.column(i).path
        ]
        for c in cols:
            ns = pq.read_table(f, columns=[c]).column(c).cast(pa.int64())
            rest = pc.subtract(ns, pc.multiply(pc.divide(ns, 1000), 1000))
            rows = pc.indices_nonzero(pc.fill_null(pc.not_equal(rest, 0), False)).to_pylist()
            keys = out.setdefault(c, [])
            keys += [f"{Path(f).name}:{r + 1}" for r in rows]
            if len(keys) > _INT96_ROWS_MAX:
                raise SourceError(
                    f"column {c}: more than {_INT96_ROWS_MAX:,} INT96 times have nanoseconds, which a timestamp"
                    f" column (microseconds) cannot hold (e.g. {keys[0].replace(':', ' row ')}): write them as"
                    " microseconds, or round them on purpose before the ingest"
                )
    return {c: keys for c, keys in out.items() if keys}
