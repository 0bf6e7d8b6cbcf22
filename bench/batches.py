"""Batches that span tables (issue 27, item 8): ``python -m bench.batches [--batch-rows N] [--repeat N]``.

One Spark process, ratios measured side by side in one run (a benchmark, not a test: CI never runs it):

- **publish**: a 4-table batch (``publish_batch``: every table's metadata loaded once and written, then every
  pointer swapped in one catalog transaction) against a one-table publish, median of ``--publish-repeat``
  each, alternating; target ≤ 2×. The data files on disk before and after each publish: 0 written.
- **audit**: the audit of a 4-table batch (each table's suite on its branch, fresh; ``references`` read the
  first table at the batch's head) against the same rows audited as four one-table branches (``references``
  read main), target ≤ 1.2×; and the batch audit on mains of
  ``--small-main`` rows against mains of ``--large-main`` rows (the cost follows the batch: ≈ 1×).

The tables are generated with PyArrow (an ``id`` key, a ``ref`` referencing the first table, a value);
every table's suite holds ``not_null``, ``unique`` (against main) and, for the other three, ``references``
to the first table, so the batch's cross-table reads are measured too. Writes ``bench/results/batches.md``.
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

from bench.common import RESULTS, data_files_on_disk, log

NS = "bb"
TABLES = ("t0", "t1", "t2", "t3")


def _checks() -> str:
    out = ""
    for n in TABLES:
        out += f"{NS}.{n}:\n  checks:\n    - not_null: [id, ref]\n    - unique: [id]\n"
        if n != TABLES[0]:
            out += f"    - references: {{column: ref, table: {NS}.{TABLES[0]}, ref_column: id}}\n"
    return out


def _write(path: Path, start: int, rows: int, ref_mod: int) -> Path:
    ids = pa.array(range(start, start + rows), pa.int64())
    refs = pa.array([i % ref_mod for i in range(start, start + rows)], pa.int64())  # keys of main
    pq.write_table(pa.table({"id": ids, "ref": refs, "v": pa.array([float(i) for i in range(rows)])}), path)
    return path


class Lake:
    """A fresh SQLite-catalog lakehouse with the four tables' mains of ``main_rows`` rows each."""

    def __init__(self, root: Path, name: str, main_rows: int) -> None:
        from wap_core import Lakehouse, Settings, TableId
        from wap_core.workflow.ingest import ingest
        from wap_core.workflow.publish import publish

        self.home = root / name
        (self.home / "landing").mkdir(parents=True)
        (self.home / "checks.yml").write_text(_checks())
        self.lh = Lakehouse(
            Settings.from_env(
                home=self.home, user="bench", catalog_name=name, checks_path=self.home / "checks.yml"
            )
        )
        self.tids = [TableId(NS, n) for n in TABLES]
        self.next = self.main_rows = main_rows
        for t in self.tids:
            src = _write(self.home / "landing" / f"{t.name}_main.parquet", 0, main_rows, main_rows)
            r = ingest(self.lh, t, [str(src)], create=True, branch="main_load")
            assert r.audit.passed, r.audit
            publish(self.lh, t, "main_load")

    def stage(self, batch: str, rows: int, tables: list[Any] | None = None, as_batch: bool = True) -> None:
        from wap_core.workflow.ingest import ingest

        for t in tables or self.tids:
            src = _write(self.home / "landing" / f"{t.name}_{batch}.parquet", self.next, rows, self.main_rows)
            kw = {"batch": batch} if as_batch else {"branch": batch}
            r = ingest(self.lh, t, [str(src)], **kw)
            assert r.audit.passed, (t, r.audit)
        self.next += rows

    def files(self) -> set[str]:
        return set().union(*(data_files_on_disk(self.lh, t) for t in self.tids))


def bench_publish(lake: Lake, rows: int, repeat: int) -> dict[str, Any]:
    from wap_core.session import session_of
    from wap_core.workflow.publish import publish, publish_batch

    one, four, written = [], [], 0
    for i in range(repeat + 1):
        lake.stage(f"p4_{i}", rows)
        before = lake.files()
        t0 = time.perf_counter()
        publish_batch(session_of(lake.lh), f"p4_{i}")
        t1 = time.perf_counter()
        written += len(lake.files() - before)
        lake.stage(f"p1_{i}", rows, tables=[lake.tids[0]], as_batch=False)
        before = lake.files()
        t2 = time.perf_counter()
        publish(lake.lh, lake.tids[0], f"p1_{i}")
        t3 = time.perf_counter()
        written += len(lake.files() - before)
        if i:  # the first pair warms up
            four.append(t1 - t0)
            one.append(t3 - t2)
    return {
        "one_table_s": statistics.median(one),
        "four_tables_s": statistics.median(four),
        "files_written": written,
    }


def bench_audit(lake: Lake, rows: int, repeat: int) -> dict[str, Any]:
    """Every table's audit (fresh: no cache) on a batch of 4 tables (its ``references`` read the first table
    at the batch's head) against the same rows on 4 one-table branches (``references`` read main)."""
    from wap_core.workflow.audit import run_audit
    from wap_core.workflow.batch_audit import audit_batch

    name, solo = f"a_{lake.next}", f"s_{lake.next}"
    lake.stage(name, rows)
    lake.next -= rows  # the same keys again, on one-table branches
    lake.stage(solo, rows, as_batch=False)
    assert audit_batch(lake.lh, name).status.value == "passed"
    whole, parts = [], []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        for t in lake.tids:
            run_audit(lake.lh, t, name, use_cache=False)
        t1 = time.perf_counter()
        for t in lake.tids:
            run_audit(lake.lh, t, solo, use_cache=False)
        t2 = time.perf_counter()
        whole.append(t1 - t0)
        parts.append(t2 - t1)
    return {"batch_s": statistics.median(whole[1:]), "sum_of_tables_s": statistics.median(parts[1:])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-rows", type=int, default=100_000)
    p.add_argument("--small-main", type=int, default=60_000)
    p.add_argument("--large-main", type=int, default=1_200_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument(
        "--publish-repeat", type=int, default=15, help="publish pairs (cheap; noisy on a busy machine)"
    )
    a = p.parse_args()
    os.environ.setdefault("WAP_SHUFFLE_PARTITIONS", "2")
    load = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="wap-bench-batches-"))
    try:
        small = Lake(root, "bbsmall", a.small_main)
        large = Lake(root, "bblarge", a.large_main)
        log("publish: a 4-table batch vs a one-table publish")
        pub = bench_publish(small, 10, a.publish_repeat)
        log("audit: a 4-table batch vs its tables' own audits, small and large mains")
        aud_small = bench_audit(small, a.batch_rows, a.repeat)
        aud_large = bench_audit(large, a.batch_rows, a.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        (
            "publish of a 4-table batch / a one-table publish",
            pub["four_tables_s"] / pub["one_table_s"],
            "≤ 2",
            f"{pub['four_tables_s'] * 1000:.0f} ms / {pub['one_table_s'] * 1000:.0f} ms",
        ),
        ("data files written by the publishes", pub["files_written"], "0", ""),
        (
            "audit of a 4-table batch / its tables audited as one-table branches (small mains)",
            aud_small["batch_s"] / aud_small["sum_of_tables_s"],
            "≤ 1.2",
            f"{aud_small['batch_s']:.2f} s / {aud_small['sum_of_tables_s']:.2f} s",
        ),
        (
            f"batch audit on {a.large_main:,}-row mains / on {a.small_main:,}-row mains",
            aud_large["batch_s"] / aud_small["batch_s"],
            "≈ 1 (follows the batch)",
            f"{aud_large['batch_s']:.2f} s / {aud_small['batch_s']:.2f} s",
        ),
    ]
    lines = [
        "# Batches that span tables (issue 27, item 8)",
        "",
        f"`python -m bench.batches --batch-rows {a.batch_rows} --small-main {a.small_main} "
        f"--large-main {a.large_main} --repeat {a.repeat} --publish-repeat {a.publish_repeat}` (medians; one Spark"
        f" process; {os.cpu_count()} cores;"
        f" load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after)",
        "",
        "| measure | value | target | detail |",
        "|---|---|---|---|",
        *[
            f"| {m} | {v:.2f} | {t} | {d} |" if isinstance(v, float) else f"| {m} | {v} | {t} | {d} |"
            for m, v, t, d in rows
        ],
        "",
    ]
    (RESULTS / "batches.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(json.dumps({"publish": pub, "audit_small": aud_small, "audit_large": aud_large}))


if __name__ == "__main__":
    main()
