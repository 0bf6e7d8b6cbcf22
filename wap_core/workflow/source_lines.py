"""``_wap_source_line``: the line of its source file each quarantined row came from, recomputed at quarantine.

A table holds no line numbers (its schema is never evolved by an ingest), so the line is recomputed when
the rows are quarantined, from the batch's provenance on its snapshot: ``wap.source`` (the files),
``wap.format`` and ``wap.content-hash`` (their sha256). When the files are still there, unchanged (the
same sha256), local and small enough to scan (as the malformed rows' sample locates its rows,
:data:`wap_core.workflow.readers._LINE_SCAN_LIMIT`), the source is read again as the ingest read it (the
same reader options, the same casts): the source records whose stored values equal a quarantined row's are
found by Spark, then located by Python's CSV reader exactly as the malformed rows' sample is (the physical
line a record STARTS on, 1-based, the header being line 1). Parquet: the row's position in its file, from 1
(as the sample's ``__row``). JSON lines: the lines are parsed as the ingest parses them (Spark's inferred
schema, ``from_json`` over each line's text, the same casts); the matching records' texts are located by a
Python scan of the files exactly as the malformed rows' sample is (:func:`wap_core.workflow.readers._json_locator`:
the text stripped of blanks and a byte order mark; the line numbered from 1, blank lines counted).
Otherwise (files moved, changed, fetched from an object store, several ingests with different sources on one
branch, too large): NULL, logged.

Identical rows cannot be told apart: of n identical source rows of which k are quarantined, the k get the
LAST k lines (the kept one of a ``unique`` key is the first read). With several source files the line is
within its file; which file is not recorded (the batch's sources are on its snapshot and in the journal).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import TYPE_CHECKING

from wap_core.exceptions import WapError
from wap_core.lake import catalog as cat
from wap_core.workflow import readers

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

LINE = "_wap_source_line"
SOURCE_KEYS = ("wap.source", "wap.format", "wap.content-hash")


def provenance(lin: cat.Lineage) -> tuple[list[str], str] | None:
    """The batch's source files and format, when every snapshot of the batch names the same, unchanged ones
    (None: the lines cannot be recomputed; :func:`with_source_lines` gives NULL)."""
    found = {
        tuple(cat.summary_get(s, k) for k in SOURCE_KEYS)
        for s in lin.new_snapshots
        if cat.summary_get(s, "wap.source")
    }
    if len(found) != 1:
        return None
    source, fmt, digest = found.pop()
    if not source or not fmt or not digest:
        return None
    files = source.split(", ")
    if not all(os.path.isfile(f) for f in files):
        return None
    if any(os.path.getsize(f) > readers._LINE_SCAN_LIMIT for f in files):
        return None
    if _sha256(files) != digest:
        return None
    return files, fmt


def _sha256(files: Sequence[str]) -> str:
    """sha256 over the files' bytes in order: the ingest's ``wap.content-hash`` (ingest.content_hash; not
    imported: the ingest runs quarantines)."""
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _same(left: DataFrame, right: DataFrame, columns: Sequence[str]) -> Column:
    conds = [left[readers._q(c)].eqNullSafe(right[readers._q(c)]) for c in columns]
    return reduce(lambda a, b: a & b, conds)


def with_ranks(rows: DataFrame, columns: Sequence[str], order: str) -> DataFrame:
    """``rows`` grouped by their values (``columns``) by one window, lazily: ``__grp`` (the group's first
    ``order``), ``__rank`` (the row's rank in its group by ``order``), ``__n`` (the group's size).

    :func:`with_source_lines` needs them; the caller adds them before it materializes the rows (the window
    then runs in that job, not in a job of its own)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    group = Window.partitionBy(*[F.col(readers._q(c)) for c in columns])
    return (
        rows.withColumn("__rank", F.row_number().over(group.orderBy(order)))
        .withColumn("__n", F.count(F.lit(1)).over(group))
        .withColumn("__grp", F.min(order).over(group))
    )


def with_source_lines(
    lh: Lakehouse,
    where: tuple[list[str], str] | None,
    rows: DataFrame,
    columns: Sequence[str],
    order: str,
) -> DataFrame:
    """``rows`` (the table's ``columns`` and the batch row number ``order``) with ``_wap_source_line`` added,
    from the batch's sources ``where`` (:func:`provenance`; None: NULL). When ``where`` is given, ``rows``
    carry :func:`with_ranks`'s columns and are materialized (a small part of the batch)."""
    from pyspark.sql import functions as F

    nulls = rows.withColumn(LINE, F.lit(None).cast("bigint"))
    if where is None:
        log.info("quarantine: the batch's source files are not at hand unchanged; %s is NULL", LINE)
        return nulls
    files, fmt = where
    schema = rows.select(*[F.col(readers._q(c)) for c in columns]).schema
    try:
        located = _located(lh, files, fmt, schema)
    except (WapError, OSError) as exc:
        log.warning("quarantine: the source lines cannot be recomputed (%s); %s is NULL", exc, LINE)
        return nulls
    if located is None:
        return nulls
    return _assign(lh, rows, columns, located, files, fmt)


def _located(lh: Lakehouse, files: list[str], fmt: str, schema: StructType) -> DataFrame | None:
    """The source's rows as stored (``schema``'s columns) with ``__line``; None: this format is not located."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    spark = lh.spark
    q = readers._q
    if fmt == "parquet":
        raw = spark.read.parquet(*files)
        mapping = readers.match_columns("source", raw.columns, schema)
        return raw.select(
            *[F.col(q(mapping[f.name])).cast(f.dataType).alias(f.name) for f in schema.fields],
            (F.col("_metadata.row_index") + 1).alias("__line"),
        )
    if fmt == "json":
        return _located_json(lh, files, schema)
    if fmt != "csv":
        return None
    header = readers._csv_header(files)
    mapping = readers.match_columns("source", header, schema)
    text = T.StructType(
        [T.StructField(h, T.StringType(), True) for h in header]
        + [T.StructField(readers.CORRUPT, T.StringType(), True)]
    )
    raw = (
        readers._csv_reader(spark.read)
        .option("columnNameOfCorruptRecord", readers.CORRUPT)
        .schema(text)
        .csv(files)
        .where(F.col(readers.CORRUPT).isNull())
    )
    cast = raw.select(
        *[F.col(q(h)) for h in header],
        *[F.col(q(mapping[f.name])).cast(f.dataType).alias(f"__v_{f.name}") for f in schema.fields],
    )
    return cast.select(
        *[F.col(f"__v_{f.name}").alias(f.name) for f in schema.fields],
        F.struct(*[F.col(q(h)) for h in header]).alias("__text"),
    )


def _located_json(lh: Lakehouse, files: list[str], schema: StructType) -> DataFrame:
    """JSON lines as the ingest reads them (``readers._read_json``): the stored values and each line's ``__text``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    spark = lh.spark
    corrupt = readers.CORRUPT
    fields = readers.json_fields(spark, files)
    mapping = readers.match_columns("source", [f.name for f in fields], schema)
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt}
    parsed = F.from_json(
        "__text", T.StructType([*fields, T.StructField(corrupt, T.StringType(), True)]), options
    )
    lines = spark.read.text(files).select(F.col("value").alias("__text"))
    lines = lines.where(F.trim(F.regexp_replace("__text", "^\ufeff", "")) != "")
    raw = lines.select(parsed.alias("__p"), "__text").where(
        F.col("__p").isNotNull() & F.col(f"__p.{corrupt}").isNull()
    )
    return raw.select(
        *[F.col("__p")[mapping[f.name]].cast(f.dataType).alias(f.name) for f in schema.fields],
        "__text",
    )


def _json_lines(files: list[str], wanted: dict[str, int]) -> Iterator[tuple[int, int]]:
    """(group, line) of each line whose text is wanted, read as the malformed rows' sample reads them."""
    for f in files:
        with open(f, encoding="utf-8-sig", errors="replace") as fh:
            for n, line in enumerate(fh, start=1):
                grp = wanted.get(_json_key(line))
                if grp is not None:
                    yield grp, n


def _json_key(text: str) -> str:
    """A JSON line's text as ``readers._json_locator`` compares it."""
    return text.strip().lstrip("\ufeff").strip()


def _assign(
    lh: Lakehouse,
    ranked: DataFrame,
    columns: Sequence[str],
    located: DataFrame,
    files: list[str],
    fmt: str,
) -> DataFrame:
    """Each quarantined row's line: its identical source rows' lines, the last ones to the quarantined.

    ``ranked`` are few (the quarantined part of a batch), grouped by their values (:func:`with_ranks`:
    each group's id = its first row's number, each row's rank, the group's size) and materialized; the
    groups' values are broadcast past the source's rows (one scan of the source, which also brings each
    group's size back); the lines found go back by (group, rank) through a broadcast join."""
    from pyspark.sql import functions as F

    cols = [F.col(readers._q(c)) for c in columns]
    values = ranked.where(F.col("__rank") == 1).select(*cols, "__grp", "__n")
    v, s = F.broadcast(values).alias("v"), located.alias("s")
    hits = s.join(v, _same(s, v, columns), "inner").select("s.*", "v.__grp", "v.__n")
    lines: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}  # the groups found in the source: their sizes
    if "__line" in located.columns:
        for r in hits.select("__grp", "__n", "__line").collect():
            sizes[int(r["__grp"])] = int(r["__n"])
            lines.setdefault(int(r["__grp"]), []).append(int(r["__line"]))
    elif fmt == "json":  # the records' text, located by a Python scan as the malformed rows' sample is
        texts = {}
        for r in hits.select("__text", "__grp", "__n").collect():
            texts[_json_key(r["__text"])] = int(r["__grp"])
            sizes[int(r["__grp"])] = int(r["__n"])
        for at, line in _json_lines(files, texts):
            lines.setdefault(at, []).append(line)
    else:  # CSV: the records' text, located by Python's reader as the malformed rows' sample is
        wanted: dict[tuple[str, ...], int] = {}
        for r in hits.select("__text", "__grp", "__n").collect():
            wanted[readers._csv_key(list(r["__text"]))] = int(r["__grp"])
            sizes[int(r["__grp"])] = int(r["__n"])
        for _name, line, fields in readers._iter_csv(files):
            grp = wanted.get(readers._csv_key(fields))
            if grp is not None:
                lines.setdefault(grp, []).append(line)
    given = []
    for grp, k in sizes.items():
        found = sorted(lines.get(grp, []))
        tail = found[max(len(found) - k, 0) :]
        given += [(grp, i + 1, line) for i, line in enumerate(tail)]
    if not given:
        return ranked.withColumn(LINE, F.lit(None).cast("bigint"))
    table = lh.spark.createDataFrame(given, "__grp bigint, __rank int, __line bigint")
    return (
        ranked.join(F.broadcast(table), on=["__grp", "__rank"], how="left")
        .withColumn(LINE, F.col("__line").cast("bigint"))
        .drop("__grp", "__rank", "__n", "__line")
    )
