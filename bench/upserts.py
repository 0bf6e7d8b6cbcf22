"""The audit of a user's own Spark job's upsert: ``python -m bench.upserts [--repeat N] [--large ROWS]``.

Issue 37's bench: the audit of a branch written by ``MERGE`` (100 keys: 50 updated in one file, 50
inserted), by a copy-on-write ``DELETE`` of 100 rows, and by a merge-on-read ``MERGE``, each into a
large main (3M rows in 30 files) and a small one (30k rows in 30 files), side by side in ONE Spark
process, medians of ``--repeat`` runs (the audit re-measured each time: no result cache). Targets:
large / small <= 1.5 for the copy-on-write MERGE and DELETE. The before figure is the read the audit
used to make for such a branch, ``head EXCEPT ALL fork``, timed on the same branches. Writes
``bench/results/upserts.md``. A benchmark, not a test: CI never runs it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, fmt_s, log, median_of
from wap_core import Lakehouse, Settings, TableId
from wap_core.lake import catalog as cat
from wap_core.workflow.audit import run_audit

SUITE = """\
{table}:
  checks:
    - not_null: [amount]
    - unique: [id]
    - range: {{column: amount, min: 0, max: 1000000000}}
"""
FILES = 30
KEYS = 100


def _make(lh: Lakehouse, table: TableId, rows: int, mor: bool) -> None:
    props = (
        "TBLPROPERTIES ('write.merge.mode'='merge-on-read', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read')"
        if mor
        else ""
    )
    lh.spark.sql(
        f"CREATE TABLE {lh.sql_name(table)} (id bigint, region string, amount double) USING iceberg {props}"
    )
    per = rows // FILES
    # FILES files, each a tight id range (as a table sorted or clustered by its key is)
    lh.spark.range(0, rows, 1, FILES).selectExpr(
        "id", "IF(id % 2 = 0, 'EU', 'US') AS region", "CAST(id % 1000 AS double) AS amount"
    ).sortWithinPartitions("id").writeTo(lh.spark_name(table)).append()
    log(f"{table}: {rows:,} rows in {len(lh.table(table).inspect.files())} files ({per:,} rows each)")


def _branch(lh: Lakehouse, table: TableId, name: str, rows: int, kind: str) -> None:
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(table)} CREATE BRANCH `{name}`")
    target = lh.sql_name(table, name)
    mid = (rows // FILES) * (FILES // 2) + 10  # keys inside one file in the middle of the table
    if kind == "delete":
        lh.spark.sql(f"DELETE FROM {target} WHERE id >= {mid} AND id < {mid + KEYS}")
        return
    half = KEYS // 2
    lh.spark.sql(
        f"MERGE INTO {target} t USING (SELECT id, 'EU' AS region, 7.0 AS amount FROM range({mid}, {mid + half}) "
        f"UNION ALL SELECT id, 'US', 8.0 FROM range({rows}, {rows + half})) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--large", type=int, default=3_000_000)
    ap.add_argument("--small", type=int, default=30_000)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="wap-bench-upserts-"))
    try:
        sizes = {"large": a.large, "small": a.small}
        cases = [("merge", False), ("delete", False), ("merge", True)]
        tables = {
            (kind, mor, size): TableId("b", f"{kind}_{'mor' if mor else 'cow'}_{size}")
            for kind, mor in cases
            for size in sizes
        }
        checks = home / "checks.yml"
        checks.write_text("".join(SUITE.format(table=t) for t in tables.values()))
        lh = Lakehouse(Settings(home=home / "lh", checks_path=checks, shuffle_partitions=2))
        lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`b`")
        for (kind, mor, size), t in tables.items():
            _make(lh, t, sizes[size], mor)
            _branch(lh, t, "job", sizes[size], kind)
        timed: dict[tuple[str, bool, str], tuple[float, float, str]] = {}
        for key, t in tables.items():
            run_audit(lh, t, "job", user="bench", use_cache=False)  # warm-up
            audit_s, _, result = median_of(
                lambda t=t: run_audit(lh, t, "job", user="bench", use_cache=False), a.repeat
            )
            lin = cat.lineage(lh.table(t), "job")
            head, fork = lh.read_snapshot(t, lin.head), lh.read_snapshot(t, lin.fork)  # type: ignore[arg-type]
            before_s, _, _ = median_of(lambda h=head, f=fork: h.exceptAll(f).count(), a.repeat)
            c = result.changes
            timed[key] = (
                audit_s,
                before_s,
                f"{c.method}: +{c.inserted} ~{c.updated} -{c.deleted}, {result.status}",
            )
            log(f"{t}: audit {fmt_s(audit_s)}, head EXCEPT ALL fork {fmt_s(before_s)} ({timed[key][2]})")
        lines = [
            "# Audit of a job's upsert: cost follows the changed files (issue 37)",
            "",
            f"`python -m bench.upserts --repeat {a.repeat}` on {time.strftime('%Y-%m-%d')}: main of {a.large:,} vs "
            f"{a.small:,} rows, {FILES} files each; medians; the audit re-measured every run (no cache).",
            "",
            "| branch | audit large | audit small | large / small | target | head EXCEPT ALL fork large / small |",
            "|---|---|---|---|---|---|",
        ]
        for kind, mor in cases:
            big, small = timed[(kind, mor, "large")], timed[(kind, mor, "small")]
            ratio = big[0] / small[0]
            target = "≤ 1.5" if not mor else "(falls back: full comparison)"
            lines.append(
                f"| {'merge-on-read' if mor else 'copy-on-write'} {kind.upper()} of {KEYS} keys "
                f"({big[2]}) | {fmt_s(big[0])} | {fmt_s(small[0])} | {ratio:.2f} | {target} | "
                f"{fmt_s(big[1])} / {fmt_s(small[1])} ({big[1] / small[1]:.1f}×) |"
            )
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "upserts.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
