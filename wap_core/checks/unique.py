"""``unique: [col, ...]``: no two rows of the batch share a key, nor a row of main (``against_main``).

Within the batch, the duplicate statistics come from the one pass (the engine groups the batch by
the key in the same Spark query that computes every other aggregate). Against main, the batch's key
range (min/max of the first key column, from the same pass) is pushed into the scan of main at the
fork, so Iceberg prunes main's files by their column statistics; what remains of main's key columns
is streamed past the batch's broadcast distinct keys (:func:`wap_core.checks.keys.keys_in_main`).

A branch that updates, deletes or overwrites rows is judged on what main becomes: its batch is the
change's inserted and updated rows, and their keys are counted at the branch's head (read only in
the files whose bounds may hold them, :func:`wap_core.checks.keys.keys_shared_at_head`), so an
updated key is not a duplicate of the old version the publish replaces; a duplicate the change
creates still fails, naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement, jsonable, row_dict
from wap_core.checks.keys import keys_in_main, keys_shared_at_head
from wap_core.identifiers import quote_column
from wap_core.values import JsonObject

DUP_EXAMPLES_SHOWN = 10  # failing keys shown with the result (the engine's sample size is larger)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, kw_only=True)
class Unique(CheckSpec):
    """No two rows of the batch share the key, nor a row of main (if ``against_main``)."""

    type: ClassVar[str] = "unique"
    defines_key: ClassVar[bool] = True
    selects_rows: ClassVar[bool] = True
    against_main: bool = True

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        cols = args.columns()
        against_main = args.pop("against_main", True)
        if not isinstance(against_main, bool):
            raise args.fail("unique: against_main must be true or false")
        return [args.spec(cls, f"unique({', '.join(cols)})", cols, against_main=against_main)]

    def key_columns(self) -> tuple[str, ...]:
        return self.columns

    def aggregates(self, ctx: MainContext | None) -> dict[str, str]:
        if not self.against_main:
            return {}
        c = quote_column(self.columns[0])
        return {"lo": f"min({c})", "hi": f"max({c})"}

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        if not self.against_main:
            return ()
        return ("head", ctx.head_snapshot_id) if ctx.rewrites_main else ("main", ctx.fork_snapshot_id)

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        from pyspark.sql import functions as F

        keys = [F.col(quote_column(c)) for c in self.columns]
        sample: list[JsonObject] = []
        if int(m.get("dup_rows") or 0):
            # examples of duplicated keys come from the one pass; only a measurement without them looks again
            examples = m.get("dup_examples")
            if examples is None:
                dup_groups = batch.groupBy(*keys).count().where(F.col("count") > 1)
                examples = [r.asDict() for r in dup_groups.limit(3).collect()]
            sample = [dict(jsonable(d), __problem="duplicate in batch") for d in examples]
        in_main = 0
        rows = m.get("_rows")
        if self.against_main and ctx.rewrites_main and ctx.read_head is not None:
            # what main becomes: the head holds another row (one the change did not write) with the key
            in_main, found = keys_shared_at_head(
                batch,
                ctx.read_head(),
                self.columns,
                m.get("lo"),
                m.get("hi"),
                None if rows is None else int(rows),
            )
            if in_main:
                clash = batch.select(*keys).join(found, on=list(self.columns), how="left_semi")
                sample += [
                    dict(row_dict(r), __problem="another row with this key stays on main")
                    for r in clash.limit(DUP_EXAMPLES_SHOWN).collect()
                ]
        elif self.against_main:
            main = ctx.read_main(ctx.table)
            if main is not None:
                in_main, found = keys_in_main(
                    batch, main, self.columns, m.get("lo"), m.get("hi"), None if rows is None else int(rows)
                )
                if in_main:
                    clash = batch.select(*keys).join(found, on=list(self.columns), how="left_semi")
                    sample += [
                        dict(row_dict(r), __problem="already in main")
                        for r in clash.limit(DUP_EXAMPLES_SHOWN).collect()
                    ]
        return {**m, "in_main": in_main, "sample": sample}

    def failing_frame(self, batch: DataFrame, ctx: MainContext) -> DataFrame | None:
        """The batch's rows whose key another row of the batch shares (NULLs together, as the pass groups them)
        or, with ``against_main``, that main at the fork already holds (each row once, even when both); for a
        branch that rewrites main, whose key another row of the head holds."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cols = list(self.columns)
        keys = [F.col(quote_column(c)) for c in cols]
        flagged = batch.withColumn("__wap_n", F.count(F.lit(1)).over(Window.partitionBy(*keys)))
        failing = F.col("__wap_n") > 1
        main = ctx.read_main(ctx.table) if self.against_main and not ctx.rewrites_main else None
        found: DataFrame | None = None
        if self.against_main and ctx.rewrites_main and ctx.read_head is not None:
            bounds = batch.agg(F.min(keys[0]).alias("lo"), F.max(keys[0]).alias("hi")).collect()[0]
            _, clash = keys_shared_at_head(batch, ctx.read_head(), cols, bounds["lo"], bounds["hi"], None)
            found = clash.distinct()
        elif main is not None:
            found = main.select(*keys).distinct()
        if found is not None:
            found = found.withColumn("__wap_main", F.lit(True))
            flagged = flagged.join(found, on=cols, how="left")
            failing = failing | F.col("__wap_main").isNotNull()
        return flagged.where(failing).select(*[F.col(quote_column(c)) for c in batch.columns])

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        dup_rows, in_main = int(m.get("dup_rows") or 0), int(m.get("in_main") or 0)
        failing = dup_rows + in_main
        observed = {
            "duplicate_rows_in_batch": dup_rows,
            "duplicate_keys_in_batch": int(m.get("dup_keys") or 0),
            "rows_already_in_main": in_main,
        }
        scope = "within the batch and against main" if self.against_main else "within the batch"
        if self.against_main and ctx.rewrites_main:
            scope = "within the change and against the rows main keeps"
        where = "another row main keeps" if self.against_main and ctx.rewrites_main else "already in main"
        msg = (
            f"{dup_rows:,} rows share a key within the batch; {in_main:,} rows have a key {where}"
            if failing
            else f"keys unique {scope}"
        )
        named = self._keys_named(m.get("sample") or [])
        if failing and named:
            msg += f" (e.g. {named})"
        return self.result(failing <= self.max_failing_rows, observed, failing, msg, m.get("sample"))

    def _keys_named(self, sample: list[JsonObject]) -> str:
        """Up to three failing keys of the sample, as ``id=5, id=9``."""
        seen: list[str] = []
        for row in sample:
            label = ", ".join(f"{c}={row.get(c)!r}" for c in self.columns) if len(self.columns) > 1 else None
            text = f"({label})" if label else f"{self.columns[0]}={row.get(self.columns[0])!r}"
            if text not in seen:
                seen.append(text)
        return "; ".join(seen[:3])
