"""Read what a quarantine kept: per table the batches, checks and counts, the rows, and their export.

The rows of ``<namespace>.<table>__quarantine`` (:func:`wap_core.workflow.quarantine.quarantine_table_id`)
live in two places: on the quarantine table's **main** once their batch was published, and on the
quarantine table's branch named like the batch while the batch is open. A reader takes main's rows plus,
for each open branch ``B``, the branch's rows whose ``_wap_batch`` is ``B`` (the branch also holds main's
rows at its fork: those are counted once, on main). ``published`` tells the two apart.

The columns are whatever the quarantine table holds now (its table's columns plus the ``_wap_*`` extra
columns: an older table may lack the newer ones; a snapshot read at an older schema gets them as NULL).

Exports (``wap quarantine export TABLE [--batch B] --format csv|parquet FILE``, the console's downloads)
collect the chosen rows to the driver and write one file: CSV (``_wap_checks`` joined with ``;``) or
Parquet (types kept, ``_wap_checks`` a list). A quarantine is a small fraction of a batch; the export of a
very large one is bounded by the driver's memory.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wap_core.exceptions import NotFoundError, ValidationError
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake import jobs
from wap_core.workflow.quarantine import quarantine_table_id

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

FORMATS = ("csv", "parquet")
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000
_PUBLISHED = "__wap_published"  # set while reading (never shown nor exported)
_CHECKS = "_wap_checks"
_BATCH = "_wap_batch"


@dataclass(frozen=True)
class QuarantineGroup:
    """The rows of one batch quarantined for one check (a row failing two checks counts in both)."""

    batch: str
    check: str
    rows: int
    published: bool  # on the quarantine table's main (its batch was published), else on the batch's branch


@dataclass(frozen=True)
class QuarantineBatch:
    """One batch's quarantined rows (each once) and whether they were published."""

    batch: str
    rows: int
    published: bool


@dataclass(frozen=True)
class QuarantineSummary:
    """What the quarantine table of ``table`` holds (JSON keys: table, quarantine_table, exists, rows,
    batches, groups)."""

    table: str
    quarantine_table: str
    exists: bool
    rows: int
    batches: tuple[QuarantineBatch, ...]
    groups: tuple[QuarantineGroup, ...]

    @property
    def checks(self) -> tuple[str, ...]:
        """Every check that quarantined rows, sorted."""
        return tuple(sorted({g.check for g in self.groups}))


@dataclass(frozen=True)
class QuarantineRows:
    """The first ``limit`` quarantined rows matching the filters (``total`` of them match)."""

    table: str
    quarantine_table: str
    batch: str | None
    check: str | None
    columns: tuple[str, ...]
    frame: pd.DataFrame
    total: int

    @property
    def truncated(self) -> bool:
        """Whether more rows match than the limit let through (``frame`` holds the first ``limit``)."""
        return self.total > len(self.frame)


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote (JSON keys: table, quarantine_table, batch, check, format, path, rows)."""

    table: str
    quarantine_table: str
    batch: str | None
    check: str | None
    format: str
    path: str
    rows: int


def _require_table(lh: Lakehouse, table: TableId) -> TableId:
    if not cat.table_exists(lh.catalog, table):
        raise NotFoundError(f"table {table} does not exist")
    return quarantine_table_id(table)


def _filters(batch: str | None, check: str | None) -> tuple[str | None, str | None]:
    if batch is not None:
        validate_branch(batch)
    if check is not None and not check.strip():
        check = None
    return batch, check


def _frame(
    lh: Lakehouse, table: TableId, batch: str | None = None, check: str | None = None
) -> DataFrame | None:
    """Every quarantined row of ``table`` (main's and each open batch branch's own), filtered; None when the
    table has no quarantine table yet."""
    from pyspark.sql import functions as F

    qid = _require_table(lh, table)
    batch, check = _filters(batch, check)
    if not cat.table_exists(lh.catalog, qid):
        return None
    qt = lh.table(qid)
    columns = lh.spark.table(lh.spark_name(qid)).columns
    parts: list[DataFrame] = []
    main = cat.ref_snapshot_id(qt, MAIN)
    if main is not None:
        parts.append(lh.read_snapshot(qid, main).withColumn(_PUBLISHED, F.lit(True)))
    for name in cat.branch_names(qt):
        if batch is not None and name != batch:
            continue
        head = cat.ref_snapshot_id(qt, name)
        if head is None or head == main:
            continue
        rows = lh.read_snapshot(qid, head).where(F.col(_BATCH) == F.lit(name))
        parts.append(rows.withColumn(_PUBLISHED, F.lit(False)))
    if not parts:
        return lh.spark.table(lh.spark_name(qid)).withColumn(_PUBLISHED, F.lit(True)).limit(0)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p, allowMissingColumns=True)
    out = out.select(*[F.col(f"`{c}`") for c in columns], _PUBLISHED)
    if batch is not None:
        out = out.where(F.col(_BATCH) == F.lit(batch))
    if check is not None:
        out = out.where(F.array_contains(F.col(_CHECKS), F.lit(check)))
    return out


def _bounded(lh: Lakehouse, user: str | None, what: str) -> AbstractContextManager[jobs.JobGroup]:
    """The user's Spark jobs for ``what``: their own group and pool, cancelled after WAP_QUERY_TIMEOUT."""
    return jobs.user_jobs(lh.spark, user or lh.user, what, timeout=lh.settings.query_timeout)


def quarantine_heads(lh: Lakehouse, table: TableId) -> tuple[tuple[str, int], ...]:
    """Every ref of the quarantine table of ``table`` with its snapshot id (metadata, no Spark): what the
    Spark reads above depend on, so a page may keep their results until it changes. Empty: no table yet."""
    qid = quarantine_table_id(table)
    if not cat.table_exists(lh.catalog, qid):
        return ()
    return tuple(sorted((name, ref.snapshot_id) for name, ref in lh.table(qid).metadata.refs.items()))


def quarantine_summary(lh: Lakehouse, table: TableId, *, user: str | None = None) -> QuarantineSummary:
    """Per batch and check, how many rows the quarantine table of ``table`` keeps (Spark, bounded)."""
    from pyspark.sql import functions as F

    qid = quarantine_table_id(table)
    frame = _frame(lh, table)
    if frame is None:
        return QuarantineSummary(str(table), str(qid), False, 0, (), ())
    with _bounded(lh, user, f"the quarantine summary of {table}"):
        frame = frame.localCheckpoint(eager=True)
        per_batch = frame.groupBy(_BATCH, _PUBLISHED).count().collect()
        per_check = (
            frame.select(_BATCH, _PUBLISHED, F.explode(F.col(_CHECKS)).alias("__wap_check"))
            .groupBy(_BATCH, _PUBLISHED, "__wap_check")
            .count()
            .collect()
        )
    batches = tuple(
        sorted(
            (QuarantineBatch(str(r[_BATCH]), int(r["count"]), bool(r[_PUBLISHED])) for r in per_batch),
            key=lambda b: (b.batch, b.published),
        )
    )
    groups = tuple(
        sorted(
            (
                QuarantineGroup(str(r[_BATCH]), str(r["__wap_check"]), int(r["count"]), bool(r[_PUBLISHED]))
                for r in per_check
            ),
            key=lambda g: (g.batch, g.check, g.published),
        )
    )
    return QuarantineSummary(str(table), str(qid), True, sum(b.rows for b in batches), batches, groups)


def quarantine_rows(
    lh: Lakehouse,
    table: TableId,
    *,
    batch: str | None = None,
    check: str | None = None,
    limit: int = DEFAULT_LIMIT,
    user: str | None = None,
) -> QuarantineRows:
    """The first ``limit`` quarantined rows of ``table`` (of ``batch``, failing ``check``), newest first."""
    import pandas as pd
    from pyspark.sql import functions as F

    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    qid = quarantine_table_id(table)
    frame = _frame(lh, table, batch, check)
    if frame is None:
        return QuarantineRows(str(table), str(qid), batch, check, (), pd.DataFrame(), 0)
    with _bounded(lh, user, f"the quarantined rows of {table}"):
        frame = frame.localCheckpoint(eager=True)
        total = frame.count()
        columns = tuple(c for c in frame.columns if c != _PUBLISHED)
        order = [F.col("_wap_quarantined_at").desc()] if "_wap_quarantined_at" in columns else []
        rows = frame.orderBy(*order, F.col(_BATCH)).limit(limit).select(*[F.col(f"`{c}`") for c in columns])
        got = rows.toPandas()
    return QuarantineRows(str(table), str(qid), batch, check, columns, got, total)


def _export_frame(
    lh: Lakehouse, table: TableId, batch: str | None, check: str | None, fmt: str, user: str | None = None
) -> pa.Table:
    """The rows to export as Arrow, each column in its table's type (Spark's own Arrow collection, never
    through pandas: an integer column with a NULL would become floats, a bigint above 2^53 a rounded double)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    if fmt not in FORMATS:
        raise ValidationError(f"unknown export format {fmt!r}: use {' or '.join(FORMATS)}")
    frame = _frame(lh, table, batch, check)
    if frame is None:
        raise NotFoundError(
            f"{table} has no quarantine table ({quarantine_table_id(table)}): nothing was quarantined"
        )
    frame = frame.drop(_PUBLISHED)
    if fmt == "csv":  # CSV has no lists: a list column is joined with ';'
        for f in frame.schema.fields:
            if isinstance(f.dataType, ArrayType):
                frame = frame.withColumn(f.name, F.concat_ws(";", F.col(f"`{f.name}`").cast("array<string>")))
    order = [F.col(_BATCH)] + (
        [F.col("_wap_quarantined_at")] if "_wap_quarantined_at" in frame.columns else []
    )
    with _bounded(lh, user, f"the export of the quarantined rows of {table}"):
        return _arrow(frame.orderBy(*order))


def _arrow(frame: DataFrame) -> pa.Table:
    """``frame`` collected as one Arrow table of its own schema's types (none lost on the way)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema)
    batches = frame._collect_as_arrow()  # Spark 3.5's own Arrow collection (public toArrow() from 4.0)
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def _write(rows: pa.Table, fmt: str, where: str | io.BytesIO) -> None:
    """``rows`` as CSV (each value's exact text: integers and decimals as written, NULL as an empty field,
    the empty string as ``""``, timestamps with their zone) or Parquet (the table's own types)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if fmt == "csv":
        pcsv.write_csv(rows, where)
    else:
        pq.write_table(rows, where)


def export_bytes(
    lh: Lakehouse,
    table: TableId,
    *,
    fmt: str,
    batch: str | None = None,
    check: str | None = None,
    user: str | None = None,
) -> bytes:
    """The quarantined rows of ``table`` (of ``batch``, failing ``check``) as one CSV or Parquet file's bytes."""
    rows = _export_frame(lh, table, batch, check, fmt, user)
    buf = io.BytesIO()
    _write(rows, fmt, buf)
    return buf.getvalue()


def export_quarantine(
    lh: Lakehouse,
    table: TableId,
    *,
    fmt: str,
    path: str | Path,
    batch: str | None = None,
    check: str | None = None,
    user: str | None = None,
) -> ExportResult:
    """Write the quarantined rows of ``table`` (of ``batch``, failing ``check``) to ``path`` as one CSV or
    Parquet file (replaced whole: written next to it, then renamed)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValidationError(f"{target} is a directory: name the file to write")
    if not target.parent.is_dir():
        raise ValidationError(f"{target.parent} does not exist: cannot write {target.name}")
    frame = _export_frame(lh, table, batch, check, fmt, user)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        _write(frame, fmt, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.info("exported %d quarantined rows of %s to %s", frame.num_rows, table, target)
    return ExportResult(
        str(table), str(quarantine_table_id(table)), batch, check, fmt, str(target), frame.num_rows
    )
