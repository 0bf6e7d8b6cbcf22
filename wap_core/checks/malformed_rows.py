"""``malformed_rows`` (built-in): source rows ingest could not parse, recorded on the batch's snapshots.

Every batch written by ingest gets it (never listed in the checks file); it reads the snapshot
summaries only (``wap.malformed-rows``, ``wap.malformed-sample``), no data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wap_core.checks.args import Args
from wap_core.checks.base import CheckResult, CheckSpec, MainContext, Measurement
from wap_core.samples import load_sample
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SAMPLE_ROWS = 10


@dataclass(frozen=True, kw_only=True)
class MalformedRows(CheckSpec):
    """Built in: the source rows ingest could not parse, recorded on the batch's snapshots."""

    type: ClassVar[str] = "malformed_rows"
    builtin: ClassVar[bool] = True

    @classmethod
    def parse(cls, args: Args) -> list[CheckSpec]:
        raise args.fail("malformed_rows is built in: every batch gets it")

    @classmethod
    def for_batch(cls, summaries: Sequence[Mapping[str, str]]) -> list[CheckSpec]:
        """The built-in check if ingest recorded malformed rows on any of the batch's snapshots."""
        return [cls(name="malformed_rows")] if any("wap.malformed-rows" in s for s in summaries) else []

    def reads(self, ctx: MainContext) -> tuple[Any, ...]:
        return ("snapshot-summaries",)

    def measure_more(self, m: Measurement, batch: DataFrame, ctx: MainContext) -> Measurement:
        malformed = 0
        sample: list[JsonObject] = []
        for s in ctx.new_snapshot_summaries:
            raw = s.get("wap.malformed-rows")
            if raw is not None:
                malformed += int(raw)
                sample += load_sample(s.get("wap.malformed-sample"))
        return {**m, "malformed": malformed, "sample": sample[:SAMPLE_ROWS]}

    def judge(self, m: Measurement, ctx: MainContext) -> CheckResult:
        malformed = int(m.get("malformed") or 0)
        msg = (
            f"{malformed:,} source rows could not be parsed and were kept out of the branch"
            if malformed
            else "every source row parsed"
        )
        return self.result(malformed == 0, malformed, malformed, msg, m.get("sample"))
