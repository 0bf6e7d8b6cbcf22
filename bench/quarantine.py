"""Quarantine of a failed batch (issue 29, item 7): ``python -m bench.quarantine [--size small|medium|large]``.

One Spark process, ratios measured side by side in one run (a benchmark, not a test: CI never runs it). The
same batch shape is staged on a table whose main is large and on one whose main is small; each round ingests
a new batch (its audit fails: 1 % of its rows have a NULL ``v``), times ONE audit of it (fresh: no cache),
then times ``quarantine`` of its failing rows (which re-audits the branch), alternating the two tables,
median of ``--repeat`` rounds after a warm-up:

- **quarantine, large main / small main**: the cost follows the batch, not main (target ≤ 1.3);
- **quarantine / one audit of that batch** (each main; target ≤ 1.5);
- **main's data files rewritten**: main's data files (at main) that the branch's new head no longer holds,
  plus delete files in the new head (none may reference main's files); target 0. Each quarantine's counts
  are checked too: exactly the batch's NULL rows quarantined, main's own NULL rows all still on the branch.

Sizes (``--size``): ``large`` is the issue's (a 600k batch, a 5.4M main vs a 60k main); ``medium`` (the
default: what this 2-core machine runs in minutes) is a tenth of it; ``small`` a hundredth (a smoke run).
``--batch-rows`` / ``--small-main`` / ``--large-main`` override one size. Main holds 1.6 % NULL ``v`` of its
own (as the demo's flights do), which a plain ``DELETE ... WHERE v IS NULL`` on the branch would remove.
Writes ``bench/results/quarantine.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import RESULTS, fmt_rows, load_main, log

NS = "bq"
TABLE = "events"
SIZES = {  # (batch rows, small main rows, large main rows)
    "small": (6_000, 600, 54_000),
    "medium": (60_000, 6_000, 540_000),
    "large": (600_000, 60_000, 5_400_000),
}
BATCH_NULL_EVERY = 100  # 1 % of a batch's rows fail not_null(v)
MAIN_NULL_EVERY = 62  # 1.6 % of main's own rows have a NULL v too
CHECKS = f"{NS}.{TABLE}:\n  checks:\n    - not_null: [id, v]\n    - range: {{column: v, min: 0}}\n"


def _write(path: Path, start: int, rows: int, null_every: int) -> Path:
    ids = range(start, start + rows)
    v = [None if i % null_every == 0 else float(i % 1000) for i in ids]
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": pa.array(v, pa.float64()),
                "name": pa.array([f"n{i % 997}" for i in ids], pa.string()),
            }
        ),
        path,
    )
    return path


class Lake:
    """A fresh SQLite-catalog lakehouse with table ``bq.events``: a main of ``main_rows`` rows written by Spark
    (1.6 % NULL ``v``: main's own failing rows, published before the check existed)."""

    def __init__(self, root: Path, name: str, main_rows: int) -> None:
        from wap_core import Lakehouse, Settings, TableId

        self.home = root / name
        (self.home / "landing").mkdir(parents=True)
        (self.home / "checks.yml").write_text(CHECKS)
        self.lh = Lakehouse(
            Settings.from_env(
                home=self.home, user="bench", catalog_name=name, checks_path=self.home / "checks.yml"
            )
        )
        self.tid = TableId(NS, TABLE)
        self.lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.lh.settings.catalog_name}.{NS}")
        load_main(
            self.lh,
            self.tid,
            _write(self.home / "landing" / "main.parquet", 0, main_rows, MAIN_NULL_EVERY),
            ("id",),
        )
        self.next = main_rows
        self.main_nulls = self.lh.spark.table(self.lh.spark_name(self.tid)).where("v IS NULL").count()

    def stage(self, branch: str, rows: int) -> int:
        """A batch of ``rows`` new rows on ``branch`` (1 % NULL ``v``: its audit fails); its NULL rows."""
        from wap_core.workflow.ingest import ingest

        src = _write(self.home / "landing" / f"{branch}.parquet", self.next, rows, BATCH_NULL_EVERY)
        r = ingest(self.lh, self.tid, [str(src)], branch=branch)
        assert not r.audit.passed, "the batch's audit should fail (1 % NULL v)"
        nulls = sum(1 for i in range(self.next, self.next + rows) if i % BATCH_NULL_EVERY == 0)
        self.next += rows
        return nulls

    def main_files(self) -> set[str]:
        tbl = self.lh.table(self.tid)
        return set(
            tbl.inspect.files(snapshot_id=tbl.metadata.refs["main"].snapshot_id)["file_path"].to_pylist()
        )

    def head_files(self, branch: str) -> tuple[set[str], int]:
        """The branch head's data files and how many delete files it holds."""
        tbl = self.lh.table(self.tid)
        files = tbl.inspect.files(snapshot_id=tbl.metadata.refs[branch].snapshot_id)
        content = files["content"].to_pylist()
        paths = files["file_path"].to_pylist()
        return {p for p, c in zip(paths, content, strict=True) if c == 0}, sum(1 for c in content if c != 0)


def bench_round(lake: Lake, branch: str, rows: int) -> dict[str, Any]:
    """One batch staged, audited once (timed), quarantined (timed), checked."""
    from wap_core.workflow.audit import run_audit
    from wap_core.workflow.quarantine import quarantine

    nulls = lake.stage(branch, rows)
    t0 = time.perf_counter()
    audit = run_audit(lake.lh, lake.tid, branch, use_cache=False)
    t1 = time.perf_counter()
    assert not audit.passed
    main_before = lake.main_files()
    t2 = time.perf_counter()
    res = quarantine(lake.lh, lake.tid, branch, reason="bench: NULL v")
    t3 = time.perf_counter()
    head, deletes = lake.head_files(branch)
    rewritten = len(main_before - head) + deletes + len(main_before ^ lake.main_files())
    assert res.quarantined == nulls, (res.quarantined, nulls)
    on_branch = lake.lh.spark.table(lake.lh.spark_name(lake.tid, branch)).where(
        f"v IS NULL AND id < {lake.next - rows}"
    )
    kept_main_nulls = on_branch.count()
    assert kept_main_nulls == lake.main_nulls, (kept_main_nulls, lake.main_nulls)
    reaudit = res.audit.seconds if res.audit is not None else 0.0  # the branch's re-audit, inside quarantine
    return {
        "audit_s": t1 - t0,
        "quarantine_s": t3 - t2,
        "reaudit_s": reaudit,
        "rewritten": rewritten,
        "quarantined": res.quarantined,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="medium")
    p.add_argument("--batch-rows", type=int)
    p.add_argument("--small-main", type=int)
    p.add_argument("--large-main", type=int)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    batch_rows, small_main, large_main = (
        given if given is not None else default
        for given, default in zip((a.batch_rows, a.small_main, a.large_main), SIZES[a.size], strict=True)
    )
    os.environ.setdefault("WAP_SHUFFLE_PARTITIONS", "2")
    load = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="wap-bench-quarantine-"))
    rounds: dict[str, list[dict[str, Any]]] = {"small": [], "large": []}
    try:
        lakes = {"small": Lake(root, "bqsmall", small_main), "large": Lake(root, "bqlarge", large_main)}
        for i in range(a.repeat + 1):
            for which in ("small", "large") if i % 2 == 0 else ("large", "small"):  # alternating
                log(f"round {i}: quarantine on the {which} main")
                got = bench_round(lakes[which], f"q{i}", batch_rows)
                if i:  # the first round warms up
                    rounds[which].append(got)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()

    def med(which: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[which])

    q_small, q_large = med("small", "quarantine_s"), med("large", "quarantine_s")
    a_small, a_large = med("small", "audit_s"), med("large", "audit_s")
    r_small, r_large = med("small", "reaudit_s"), med("large", "reaudit_s")
    rewritten = sum(r["rewritten"] for w in rounds for r in rounds[w])
    rows = [
        (
            f"quarantine of 1 % of a {fmt_rows(batch_rows)} batch: {fmt_rows(large_main)} main / {fmt_rows(small_main)} main",
            q_large / q_small,
            "≤ 1.3",
            f"{q_large:.2f} s / {q_small:.2f} s",
        ),
        (
            "quarantine / one audit of that batch (small main)",
            q_small / a_small,
            "≤ 1.5",
            f"{q_small:.2f} s / {a_small:.2f} s",
        ),
        (
            "quarantine / one audit of that batch (large main)",
            q_large / a_large,
            "≤ 1.5",
            f"{q_large:.2f} s / {a_large:.2f} s",
        ),
        (
            "(info) quarantine without its re-audit / one audit (small main)",
            (q_small - r_small) / a_small,
            "—",
            f"small: {q_small - r_small:.2f} s + re-audit {r_small:.2f} s; large: {q_large - r_large:.2f} s"
            f" + re-audit {r_large:.2f} s ({(q_large - r_large) / a_large:.2f})",
        ),
        (
            "main's data files rewritten (or referenced by a delete file)",
            rewritten,
            "0",
            f"{len(rounds['small']) + len(rounds['large'])} quarantines",
        ),
    ]
    lines = [
        "# Quarantine of a failed batch (issue 29, item 7)",
        "",
        f"`python -m bench.quarantine --size {a.size} --repeat {a.repeat}`: batch {batch_rows:,} rows (1 % failing"
        f" `not_null(v)`), mains of {small_main:,} and {large_main:,} rows (medians of {a.repeat} rounds after a"
        f" warm-up, alternating; one Spark process; {os.cpu_count()} cores; load average"
        f" {load[0]:.1f} before, {load_after[0]:.1f} after). The issue's size is `--size large`"
        f" (600k batch, 5.4M vs 60k main).",
        "",
        "| measure | value | target | detail |",
        "|---|---|---|---|",
        *[
            f"| {m} | {v:.2f} | {t} | {d} |" if isinstance(v, float) else f"| {m} | {v} | {t} | {d} |"
            for m, v, t, d in rows
        ],
        "",
    ]
    (RESULTS / "quarantine.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(json.dumps(rounds))


if __name__ == "__main__":
    main()
