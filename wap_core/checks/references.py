"""``references: {column, table, ref_column}``: every non-NULL value exists in the other table's main.

When the other table is in the audited branch's batch (a batch that spans tables), it is read at its
head in the batch instead (:attr:`MainContext.batch_reads`): the airports added in the same batch as the
flights that go there count. The result's message and observed values say where it was read.

The batch's value range (from the one pass) is pushed into the scan of the referenced table, whose
column is then streamed past the batch's broadcast distinct values
(:func:`wap_core.checks.keys.values_missing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement, jsonable
from wap_core.checks.keys import values_missing
from wap_core.exceptions import ValidationError
from wap_core.identifiers import TableId, quote_column
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, kw_only=True)
class References(CheckSpec):
    """Every non-NULL value of the column exists in a column of another table's main (a foreign key)."""

    type: ClassVar[str] = "references"
    selects_rows: ClassVar[bool] = True
    table: str
    ref_column: str

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        col = args.one_column()
        ref_table = args.pop("table")
        try:
            tid = TableId.parse(str(ref_table))
        except ValidationError as exc:
            raise args.fail(f"references: {exc}") from exc
        ref_col = args.pop("ref_column", col)
        if not isinstance(ref_col, str) or not ref_col:
            raise args.fail("references: ref_column must be a column name")
        return [
            args.spec(
                cls, f"references({col} -> {tid}.{ref_col})", (col,), table=str(tid), ref_column=ref_col
            )
        ]

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        c = quote_column(self.columns[0])
        return {"lo": f"min({c})", "hi": f"max({c})"}

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        return (self.table, ctx.main_snapshot(TableId.parse(self.table)))

    def other_tables(self) -> tuple[str, ...]:
        return (self.table,)

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        from pyspark.sql import functions as F

        ref_tid = TableId.parse(self.table)
        inside = ctx.batch_read(ref_tid)
        if inside is not None:  # the referenced table is in the batch: read at its head there
            m = {**m, "read_at": inside.label}
        ref = ctx.read_main(ref_tid)
        if ref is None:
            return {**m, "no_main": True}
        rows = m.get("_rows")
        missing = values_missing(
            batch,
            self.columns[0],
            ref,
            self.ref_column,
            m.get("lo"),
            m.get("hi"),
            None if rows is None else int(rows),
        )
        stats = missing.agg(F.sum("rows").alias("rows"), F.count(F.lit(1)).alias("values")).collect()[0]
        failing = int(stats["rows"] or 0)
        sample: list[JsonObject] = []
        if failing:
            top = missing.orderBy(F.desc("rows")).limit(5).collect()
            sample = [{"value": jsonable(r["value"]), "rows": int(r["rows"])} for r in top]
        return {**m, "missing_rows": failing, "missing_values": int(stats["values"]), "sample": sample}

    @property
    def fixed_by(self) -> str:
        """The referenced table: a missing value is fixed by ingesting its row there."""
        return self.table

    def failing_frame(self, batch: DataFrame, ctx: MainContext) -> DataFrame | None:
        """The batch's rows whose non-NULL value is missing from the referenced table (its main, or its head
        in the batch when it is in the audited branch's batch, as the audit reads it; a left anti join)."""
        from pyspark.sql import functions as F

        ref = ctx.read_main(TableId.parse(self.table))
        c = F.col(quote_column(self.columns[0]))
        present = batch.where(c.isNotNull())
        if ref is None:  # nothing to reference: every non-NULL value is missing
            return present
        known = ref.select(F.col(quote_column(self.ref_column)).alias("__wap_ref")).distinct()
        return present.join(F.broadcast(known), c == F.col("__wap_ref"), "left_anti")

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        col, target = self.columns[0], f"{self.table}.{self.ref_column}"
        read_at = m.get("read_at")  # set when the referenced table is in the batch (else: its main)
        where = f" (read {self.table} at {read_at})" if read_at else ""
        if m.get("no_main"):
            return self.result(False, None, None, f"referenced table {self.table} has no data on main")
        failing, values = int(m.get("missing_rows") or 0), int(m.get("missing_values") or 0)
        msg = (
            f"{failing:,} rows ({values:,} distinct values) of {col} are missing from {target}"
            if failing
            else f"every {col} exists in {target}"
        )
        observed: JsonObject = {"missing_rows": failing, "missing_values": values}
        if read_at:
            observed["read_at"] = read_at
        return self.result(failing <= self.max_failing_rows, observed, failing, msg + where, m.get("sample"))
