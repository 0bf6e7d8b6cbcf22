"""WAP Console performance benchmark: ``make bench`` / ``python -m bench.run [--help]``.

Generates TPC-H data with tpchgen-cli, runs the scenarios of the performance issue
in ONE Spark process (ratios within one run, medians of ``--repeat`` runs), runs the
metadata scenarios in fresh interpreters that never start Spark, runs the peer
(lake-sift) in its own interpreter, then prints a table and writes it to
``bench/results/latest.md``. A benchmark, not a test: CI never runs it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench import crowd, data, s3, spread, xl

# the shared helpers live in bench.common (the scenario modules import them from there)
from bench.common import (  # noqa: F401 - re-exported: bench.run.log etc. stay importable
    CATALOG,
    NS,
    RESULTS,
    ROOT,
    TARGET_MB,
    BeforePublish,
    Published,
    Row,
    audit_and_diff,
    before_publish,
    cpu_times,
    data_files_on_disk,
    fast_forwarded,
    fmt_rows,
    fmt_s,
    ingest_batch,
    load_main,
    log,
    measured_publish,
    median_of,
    steal_share,
)
from bench.data import KEY

# --------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work_dir.resolve()
        self.data_dir = self.work / "data"
        self.home = self.work / "lakehouse"
        self.rows: list[Row] = []
        self.repeat: int = args.repeat
        self.batch_index = 0
        self.job_groups = itertools.count(1)
        self.spark_master: str | None = (
            None  # of a family's own lakehouses (bench/s3.py) when self.lh is not made
        )

    # ----- set-up ------------------------------------------------------------
    def prepare_data(self) -> None:
        a = self.args
        t0 = time.perf_counter()
        if not self.core:  # only the on-demand scenarios (bench/xl.py): no SF1 tables
            return
        self.large_dir = data.generate(self.data_dir, a.scale_large)
        self.small_dir = data.generate(self.data_dir, a.scale_small)
        self.large_rows = data.rows(self.large_dir / "lineitem.parquet")
        self.small_rows = data.rows(self.small_dir / "lineitem.parquet")
        if not a.skip_peer:
            self.peer_dir = data.generate(self.data_dir, a.peer_scale, ("lineitem",))
            self.peer_main, self.peer_batch = data.split_tail(
                self.data_dir, self.peer_dir / "lineitem.parquet"
            )
        log(
            f"data ready in {time.perf_counter() - t0:.1f} s: lineitem SF{a.scale_large:g} = {self.large_rows} rows, "
            f"SF{a.scale_small:g} = {self.small_rows} rows"
        )

    def next_batch(self) -> Path:
        """A fresh batch of new keys (the small scale's lineitem, keys shifted above every main key)."""
        self.batch_index += 1
        return data.shifted_batch(self.data_dir, self.small_dir / "lineitem.parquet", self.batch_index)

    def checks_yaml(self) -> str:
        return (
            data.lineitem_checks(NS, "li_large", "part_large")
            + data.lineitem_checks(NS, "li_small", "part_small")
            + f"{NS}.li_s3_ours:\n  checks:\n    - not_null: [l_orderkey]\n"
            + xl.checks_yaml(NS)
            + spread.checks_yaml(NS, spread.scales(self))
        )

    def start(self) -> None:
        from wap_core import Lakehouse, Settings

        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        (self.home / "checks.yml").write_text(self.checks_yaml())
        self.lh = Lakehouse(
            Settings(
                home=self.home,
                checks_path=self.home / "checks.yml",
                user="bench",
                catalog_name=CATALOG,
                shuffle_partitions=self.args.shuffle_partitions,
                spark_driver_memory=self.args.driver_memory,
            )
        )
        t0 = time.perf_counter()
        self.spark = self.lh.spark
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NS}")
        log(f"Spark started in {time.perf_counter() - t0:.1f} s (driver memory {self.args.driver_memory})")

    def tid(self, name: str) -> Any:
        from wap_core import TableId

        return TableId(NS, name)

    def load_main(self, name: str, path: Path, sort_by: tuple[str, ...] = KEY) -> None:
        """Create ``tpch.<name>`` with ``path`` as main, sorted by key: per-file key bounds stay tight."""
        load_main(self.lh, self.tid(name), path, sort_by)

    def ingest(self, name: str, path: Path, branch: str) -> Any:
        return ingest_batch(self.lh, self.tid(name), path, branch)

    def setup_tables(self) -> None:
        self.load_main("li_large", self.large_dir / "lineitem.parquet")
        self.load_main("li_small", self.small_dir / "lineitem.parquet")
        self.load_main("part_large", self.large_dir / "part.parquet", ("p_partkey",))
        self.load_main("part_small", self.small_dir / "part.parquet", ("p_partkey",))

    # ----- scenario 5: console metadata pages, fresh interpreter, no Spark ---------------
    def subprocess_json(self, args: list[str]) -> dict[str, Any]:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def scenario_5(self) -> None:
        log("scenario 5: 50 tables x 4 open branches, metadata pages in a fresh interpreter")
        out = self.subprocess_json(
            ["-m", "bench.metadata", "branches", str(self.work / "meta50"), str(max(self.repeat, 5))]
        )
        self.metadata_rows(out, 50, ("5a list_branches", "5b table_infos"))

    def metadata_rows(
        self, out: dict[str, Any], tables: int, labels: tuple[str, str], more: str = ""
    ) -> None:
        """The rows of the console's metadata pages (``bench.metadata branches``' ``out``) at ``tables`` tables
        × 4 open branches: each median ≤ 1 s, Spark never started or imported, every table and branch listed."""
        no_spark = not any(out["before"].values()) and not any(out["after"].values())
        shape = out["tables"] == tables and out["branches"] == 4 * tables
        for label, key in zip(labels, ("list_branches_median", "table_infos_median"), strict=True):
            v = out[key]
            self.rows.append(
                Row(
                    f"{label} (console metadata page)",
                    f"{tables} tables × 4 open branches",
                    v,
                    None,
                    None,
                    "≤ 1 s, no Spark",
                    v <= 1.0 and no_spark and shape,
                    [
                        f"{label}: {out['branches']} branches / {out['tables']} tables listed; spark_running()={out['after']['spark_running']}, "
                        f"pyspark imported={out['after']['pyspark_imported']} (set-up with PyIceberg only: {out['setup_seconds']:.1f} s)"
                        + more
                    ],
                )
            )

    def scenario_6(self) -> None:
        from sqlalchemy import text

        from wap_core.analysis.diff import compute_diff
        from wap_core.lake import catalog as cat

        log("scenario 6: main profile cached by snapshot id (diff of 2nd branch on the same main)")
        tid = self.tid("li_large")
        self.ingest("li_large", self.next_batch(), "p6a")
        self.ingest("li_large", self.next_batch(), "p6b")
        fork = cat.lineage(self.lh.table(tid), "p6a").fork
        assert fork == cat.lineage(self.lh.table(tid), "p6b").fork
        engine = self.lh.catalog.engine
        firsts, seconds, cached_before_second = [], [], []
        for _ in range(min(self.repeat, 3)):
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM wap_profiles WHERE table_name = :t"), {"t": str(tid)})
            t0 = time.perf_counter()
            compute_diff(self.lh, tid, "p6a")
            firsts.append(time.perf_counter() - t0)
            cached_before_second.append(self.lh.profiles.load_profile(str(tid), fork) is not None)
            t0 = time.perf_counter()
            compute_diff(self.lh, tid, "p6b")
            seconds.append(time.perf_counter() - t0)
        with engine.connect() as conn:
            n = conn.execute(
                text("SELECT count(*) FROM wap_profiles WHERE table_name = :t AND snapshot_id = :s"),
                {"t": str(tid), "s": fork},
            ).scalar()
        first, second = statistics.median(firsts), statistics.median(seconds)
        ok = second < first and n == 1 and all(cached_before_second)
        self.rows.append(
            Row(
                "6 diff of 2nd branch on same main (cached profile) vs 1st",
                f"main {fmt_rows(self.large_rows)}, 2 branches × {fmt_rows(self.small_rows)}",
                second,
                first,
                second / first,
                "2nd < 1st, 1 cached profile",
                ok,
                [
                    f"6: profile rows for (table, main snapshot) = {n}; profile present before the 2nd diff in every run: "
                    f"{all(cached_before_second)}; 1st diff (profiles main) {fmt_s(first)}, 2nd {fmt_s(second)}"
                ],
            )
        )

        # 6b: right after a publish main has a new snapshot; its profile is merged from main at the
        # fork + the reviewed batch's profile, so the next review does not rescan main either.
        from wap_core.workflow.discard import discard
        from wap_core.workflow.publish import publish

        merged_t: list[float] = []
        sources: list[str] = []
        for i in range(min(self.repeat, 3)):
            a, b = f"p6c{i}", f"p6d{i}"
            self.ingest("li_large", self.next_batch(), a)
            compute_diff(self.lh, tid, a)  # the review of a: caches the batch's profile
            publish(self.lh, tid, a)
            self.ingest("li_large", self.next_batch(), b)
            t0 = time.perf_counter()
            d = compute_diff(self.lh, tid, b)
            merged_t.append(time.perf_counter() - t0)
            prof = self.lh.profiles.load_profile(str(tid), d.fork_snapshot_id) if d.fork_snapshot_id else None
            sources.append(str((prof or {}).get("source")))
            discard(self.lh, tid, b, reason="benchmark")
        after = statistics.median(merged_t)
        self.rows.append(
            Row(
                "6b diff right after a publish (main profile merged) vs 1st diff (scan)",
                f"main {fmt_rows(self.large_rows)}+, batches of {fmt_rows(self.small_rows)}",
                after,
                first,
                after / first,
                "no rescan of main",
                all(src.startswith("merged") for src in sources) and after < first,
                [
                    f"6b: main profile sources after each publish: {sorted({s.split(':')[0] for s in sources})}"
                ],
            )
        )

    # ----- scenario 1: audit + diff cost follows the batch ---------------------------------
    def scenario_1(self) -> None:
        from wap_core.analysis.keyed_diff import keyed_diff

        log("scenario 1: audit + diff of the same batch on the large vs the small table")
        batch = self.next_batch()
        large, small = self.tid("li_large"), self.tid("li_small")
        for name in ("li_large", "li_small"):
            self.ingest(name, batch, "b1")

        audit_diff = partial(audit_and_diff, self.lh, branch="b1")
        for tid in (large, small):  # warm-up (and main profiles: cached per snapshot, see scenario 6)
            audit_diff(tid)
            keyed_diff(self.lh, tid, "b1", KEY)
        t_large, t_small, kd_large, kd_small = [], [], [], []
        audits: dict[str, Any] = {}
        kds: dict[str, Any] = {}
        for i in range(self.repeat):
            order = (large, small) if i % 2 == 0 else (small, large)
            for tid in order:
                t0 = time.perf_counter()
                audits[tid.name] = audit_diff(tid)
                (t_large if tid == large else t_small).append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                kds[tid.name] = keyed_diff(self.lh, tid, "b1", KEY)
                (kd_large if tid == large else kd_small).append(time.perf_counter() - t0)
        ml, ms = statistics.median(t_large), statistics.median(t_small)
        all_passed = all(a.passed for a in audits.values())
        main_ratio = self.large_rows / self.small_rows
        sizes = f"main {fmt_rows(self.large_rows)} vs {fmt_rows(self.small_rows)} ({main_ratio:.0f}×), batch {fmt_rows(self.small_rows)}"
        checks = ", ".join(c.name for c in audits["li_large"].checks)
        self.rows.append(
            Row(
                "1 audit + diff, large vs small table",
                sizes,
                ml,
                ms,
                ml / ms,
                "≤ 1.5",
                ml / ms <= 1.5 and all_passed,
                [
                    f"1: suite = {checks}; statuses: large {audits['li_large'].status}, small {audits['li_small'].status}"
                ],
            )
        )
        kl, ks = statistics.median(kd_large), statistics.median(kd_small)
        k = kds["li_large"]
        self.rows.append(
            Row(
                "1b keyed diff (wap_core.analysis.keyed_diff), large vs small",
                sizes,
                kl,
                ks,
                kl / ks,
                "≤ 1.5",
                kl / ks <= 1.5,
                [
                    f"1b: large: {k.summary()}, main files scanned after key-range pruning: {k.main_files_scanned} of {k.main_files_total}; "
                    f"small: {kds['li_small'].main_files_scanned} of {kds['li_small'].main_files_total}"
                ],
            )
        )

    # ----- scenario 4: row-level checks in one pass ----------------------------------------
    TEN_CHECKS = (
        "not_null: [l_orderkey]",
        "not_null: [l_partkey]",
        "not_null: [l_shipdate]",
        "range: {column: l_quantity, min: 0, max: 100}",
        "range: {column: l_discount, min: 0, max: 0.2}",
        "accepted_values: {column: l_returnflag, values: [A, N, R]}",
        "accepted_values: {column: l_shipmode, values: [AIR, 'REG AIR', FOB, MAIL, RAIL, SHIP, TRUCK]}",
        "pattern: {column: l_shipinstruct, regex: '^[A-Z ]+$'}",
        "expression: {name: price_positive, sql: 'l_extendedprice > 0'}",
        "expression: {name: dates_ordered, sql: 'l_shipdate <= l_receiptdate'}",
    )
    # The same ten predicates over the same columns, as ONE check: same data read, same work per row.
    ONE_CHECK_SAME_COLUMNS = (
        'expression: {name: all_in_one, sql: "l_orderkey IS NOT NULL AND l_partkey IS NOT NULL AND l_shipdate IS NOT NULL'
        " AND l_quantity BETWEEN 0 AND 100 AND l_discount BETWEEN 0 AND 0.2 AND l_returnflag IN ('A','N','R')"
        " AND l_shipmode IN ('AIR','REG AIR','FOB','MAIL','RAIL','SHIP','TRUCK') AND l_shipinstruct RLIKE '^[A-Z ]+$'"
        ' AND l_extendedprice > 0 AND l_shipdate <= l_receiptdate"}'
    )

    def scenario_4(self, table: str = "li_large", branch: str = "b1", label: str = "4") -> None:
        """Ten row-level checks are evaluated in one pass.

        Three comparisons on the same batch, alternating order, medians:
        - the target row: 10 checks vs 1 check that reads the same columns and evaluates the same
          predicates (isolates what having ten checks instead of one costs);
        - 10 checks in one audit vs the same 10 checks audited one at a time (what one pass saves);
        - 10 checks vs 1 check on one column (informational: on a columnar format this measures
          reading 9 columns instead of 1, not the number of passes).
        """
        from wap_core.checks import ROW_LEVEL, parse_checks
        from wap_core.workflow.audit import run_audit

        log(f"scenario {label}: 10 row-level checks in one pass ({table}/{branch})")
        tid = self.tid(table)

        def suite(lines: tuple[str, ...] | list[str]) -> Any:
            return parse_checks(f"{tid}:\n  checks:\n" + "".join(f"    - {ln}\n" for ln in lines))[str(tid)]

        ten = suite(self.TEN_CHECKS)
        same_cols = suite([self.ONE_CHECK_SAME_COLUMNS])
        narrow = suite(["range: {column: l_quantity, min: 0, max: 100}"])
        singles = [suite([ln]) for ln in self.TEN_CHECKS]
        assert len(ten.checks) == 10 and all(c.type in ROW_LEVEL for c in ten.checks)
        for s in (ten, same_cols, narrow, *singles):
            run_audit(self.lh, tid, branch, suite=s)  # warm-up
        t_ten: list[float] = []
        t_same: list[float] = []
        t_narrow: list[float] = []
        t_sep: list[float] = []
        res10: Any = None
        for i in range(self.repeat):
            order = [("ten", ten), ("same", same_cols), ("narrow", narrow), ("sep", None)]
            if i % 2:
                order.reverse()
            for kind, s in order:
                t0 = time.perf_counter()
                if kind == "sep":
                    for one in singles:
                        run_audit(self.lh, tid, branch, suite=one)
                else:
                    r = run_audit(self.lh, tid, branch, suite=s)
                    if kind == "ten":
                        res10 = r
                {"ten": t_ten, "same": t_same, "narrow": t_narrow, "sep": t_sep}[kind].append(
                    time.perf_counter() - t0
                )
        m10, ms, mn, mp = (statistics.median(t) for t in (t_ten, t_same, t_narrow, t_sep))
        size = f"batch {fmt_rows(res10.rows_checked)}"
        self.rows.append(
            Row(
                f"{label} suite of 10 row-level checks vs 1 (same columns)",
                size,
                m10,
                ms,
                m10 / ms,
                "≤ 1.5",
                m10 / ms <= 1.5 and res10.passed,
                [
                    f"{label}: the 1-check suite is one expression with the same ten predicates over the same 9 columns; "
                    f"10-check audit {res10.status}"
                ],
            )
        )
        self.rows.append(
            Row(
                f"{label}· 10 checks in one pass vs 10 separate audits",
                size,
                m10,
                mp,
                m10 / mp,
                "< 1 (one pass)",
                m10 < mp,
                [f"{label}·: ten single-check audits, one after the other, read the batch ten times"],
            )
        )
        self.rows.append(
            Row(
                f"{label}· (info) 10 checks on 9 columns vs 1 check on 1 column",
                size,
                m10,
                mn,
                m10 / mn,
                "—",
                True,
                [
                    f"{label}· (info): columnar reads: the 1-check suite reads one decimal column, the 10-check suite 9 columns "
                    "(3 strings, one regex); the difference is I/O and expression work, not passes"
                ],
            )
        )

    # ----- scenario 8: keyed diff vs the peer -------------------------------------------------
    def scenario_8(self) -> None:
        from wap_core.analysis.keyed_diff import keyed_diff
        from wap_core.lake import catalog as cat

        log("scenario 8: keyed row diff vs lake-sift (TPC-H lineitem, new batch of the highest order keys)")
        tid = self.tid("li_peer")
        self.load_main("li_peer", self.peer_main)
        t0 = time.perf_counter()
        self.ingest("li_peer", self.peer_batch, "b8")
        log(
            f"li_peer/b8: batch of {data.rows(self.peer_batch)} rows ingested in {time.perf_counter() - t0:.1f} s"
        )
        fork = cat.lineage(self.lh.table(tid), "b8").fork
        keyed_diff(self.lh, tid, "b8", KEY)  # warm-up
        reps = min(self.repeat, 3)
        ours = [keyed_diff(self.lh, tid, "b8", KEY) for _ in range(reps)]
        t_ours = statistics.median(r.seconds for r in ours)
        peer_runs = []
        s = self.lh.settings
        for i in range(reps):
            log(f"lake-sift run {i + 1}/{reps}")
            peer_runs.append(
                self.subprocess_json(
                    [
                        "-m",
                        "bench.peer",
                        "diff",
                        s.sqlalchemy_uri,
                        s.warehouse_uri,
                        CATALOG,
                        str(tid),
                        str(fork),
                        "b8",
                        ",".join(KEY),
                    ]
                )
            )
        t_peer = statistics.median(p["seconds"] for p in peer_runs)
        mem = statistics.median(p["peak_rss_mb"] for p in peer_runs)
        ours_summary, peer_summary = ours[-1].summary(), peer_runs[-1]["summary"]
        same = all(
            ours_summary[k] == peer_summary[k]
            for k in ("added", "removed", "changed", "changed_cells", "schema_changes")
        )
        ratio = t_ours / t_peer
        k = ours[-1]
        self.rows.append(
            Row(
                "8 keyed row diff vs lake-sift 0.6.0",
                f"main {fmt_rows(k.main_rows)}, batch {fmt_rows(k.batch_rows)} (SF{self.args.peer_scale:g})",
                t_ours,
                t_peer,
                ratio,
                "≤ 0.33 (1/3), same counts",
                ratio <= 1 / 3 and same,
                [
                    f"8: ours {ours_summary} vs lake-sift {peer_summary}: {'identical' if same else 'DIFFERENT'}; "
                    f"main files scanned {k.main_files_scanned} of {k.main_files_total}; lake-sift peak RSS {mem:.0f} MB"
                ],
            )
        )
        self.peer_fork = fork

    # ----- scenario 7: metadata diff, fresh interpreter -------------------------------------------
    def scenario_7(self) -> None:
        log("scenario 7: diff summary from snapshot metadata alone (fresh interpreter, no Spark)")
        table, branch = (
            (self.tid("li_peer"), "b8") if not self.args.skip_peer else (self.tid("li_large"), "b1")
        )
        out = self.subprocess_json(
            [
                "-m",
                "bench.metadata",
                "diff",
                str(self.home),
                CATALOG,
                str(table),
                branch,
                str(max(self.repeat, 5)),
            ]
        )
        peer_t: float | None = None
        notes = []
        if not self.args.skip_peer:
            s = self.lh.settings
            runs = [
                self.subprocess_json(
                    [
                        "-m",
                        "bench.peer",
                        "preview",
                        s.sqlalchemy_uri,
                        s.warehouse_uri,
                        CATALOG,
                        str(table),
                        str(self.peer_fork),
                        branch,
                        ",".join(KEY),
                    ]
                )
                for _ in range(min(self.repeat, 3))
            ]
            peer_t = statistics.median(r["seconds"] for r in runs)
            notes.append(
                f"7: lake-sift --preview (same question, same table): {fmt_s(peer_t)}, pure append={runs[-1]['pure_append']}"
            )
        r = out["result"]
        v = out["median"]
        no_spark = not any(out["after"].values())
        self.rows.append(
            Row(
                "7 diff summary from snapshot metadata",
                f"{table} {branch}: +{fmt_rows(r['rows_added'])} rows",
                v,
                peer_t,
                (v / peer_t) if peer_t else None,
                "≤ 1 s, no data read, no Spark",
                v <= 1.0 and no_spark and r["pure_append"],
                [
                    f"7: metadata_diff = {r}; first (cold) call {fmt_s(out['first'])}; spark_running()={out['after']['spark_running']}, "
                    f"pyspark imported={out['after']['pyspark_imported']}",
                    *notes,
                ],
            )
        )

    # ----- scenario 3: overhead vs hand-written Spark -----------------------------------------------
    def scenario_3(self, source: Path | None = None, label: str = "3", repeat: int | None = None) -> None:
        from pyspark.sql import functions as F

        from wap_core.security.paths import SourcePolicy
        from wap_core.workflow.ingest import ingest
        from wap_core.workflow.publish import publish

        source = source or self.small_dir / "lineitem.parquet"
        repeat = repeat or self.repeat
        log(f"scenario {label}: ingest + audit(not_null) + publish vs the same steps in plain PySpark")
        ours_t, hand_t = self.tid("li_s3_ours"), self.tid("li_s3_hand")
        if label == "3":
            self.load_main("li_s3_ours", self.small_dir / "lineitem.parquet")
            self.load_main("li_s3_hand", self.small_dir / "lineitem.parquet")

        def next_batch() -> Path:
            self.batch_index += 1
            return data.shifted_batch(self.data_dir, source, self.batch_index)

        spark, cat_name = self.spark, CATALOG

        def ours(path: Path, b: str) -> None:
            res = ingest(self.lh, ours_t, [str(path)], branch=b, source_policy=SourcePolicy.ANY)
            assert res.audit.passed, res.audit.status
            publish(self.lh, ours_t, b)

        def hand(path: Path, b: str) -> None:
            name = f"{cat_name}.{hand_t}"
            spark.sql(f"ALTER TABLE {name} CREATE BRANCH {b}")
            df = spark.read.parquet(str(path))
            df.writeTo(f"{name}.branch_{b}").append()
            nulls = (
                spark.table(f"{name}.branch_{b}").where(F.col("l_orderkey").isNull()).count()
                if self.args.hand_full_scan
                else df.where(F.col("l_orderkey").isNull()).count()
            )
            assert nulls == 0
            spark.sql(f"CALL {cat_name}.system.fast_forward('{hand_t}', 'main', '{b}')")
            spark.sql(f"ALTER TABLE {name} DROP BRANCH {b}")

        warm = next_batch()
        ours(warm, f"w{label}")
        hand(warm, f"w{label}")
        to, th = [], []
        for i in range(repeat):
            batch = next_batch()
            steps = ((ours, to), (hand, th)) if i % 2 == 0 else ((hand, th), (ours, to))
            for fn, acc in steps:
                t0 = time.perf_counter()
                fn(batch, f"r{label}_{i}")
                acc.append(time.perf_counter() - t0)
        mo, mh = statistics.median(to), statistics.median(th)
        a, b = self.lh.table(ours_t), self.lh.table(hand_t)
        same = a.current_snapshot().summary.additional_properties.get(
            "total-records"
        ) == b.current_snapshot().summary.additional_properties.get("total-records")
        self.rows.append(
            Row(
                f"{label} ingest + audit + publish vs hand-written PySpark",
                f"batch {fmt_rows(data.rows(source))} onto main {fmt_rows(self.small_rows)}+",
                mo,
                mh,
                mo / mh,
                "≤ 1.3",
                mo / mh <= 1.3 and same,
                [
                    f"{label}: hand = CREATE BRANCH, writeTo(branch).append(), null count of the written batch, "
                    f"CALL {CATALOG}.system.fast_forward, DROP BRANCH; same Spark session; both tables end with the same row count: {same}"
                ],
            )
        )

    # ----- scenario 2: publish is constant-time and writes no data file ------------------------------
    def data_files_on_disk(self, name: str) -> set[str]:
        return data_files_on_disk(self.lh, self.tid(name))

    def scenario_2(self) -> None:

        log("scenario 2: publish (fast-forward) on the large vs the small table")
        times: dict[str, list[float]] = {"li_large": [], "li_small": []}
        written = 0
        checks_ok = True
        for i in range(self.repeat):
            batch = self.next_batch()
            for name in ("li_large", "li_small") if i % 2 == 0 else ("li_small", "li_large"):
                tid, b = self.tid(name), f"p{i}"
                self.ingest(name, batch, b)
                p = measured_publish(self.lh, tid, b, partial(self.data_files_on_disk, name))
                times[name].append(p.seconds)
                written += len(p.files_after - p.files_before)
                checks_ok &= p.fast_forward
        ml, ms = statistics.median(times["li_large"]), statistics.median(times["li_small"])
        self.rows.append(
            Row(
                "2 publish (fast-forward), large vs small table",
                f"main {fmt_rows(self.large_rows)}+ vs {fmt_rows(self.small_rows)}+, batch {fmt_rows(self.small_rows)}",
                ml,
                ms,
                ml / ms,
                "≤ 1.5, 0 data files written",
                ml / ms <= 1.5 and written == 0 and checks_ok,
                [
                    f"2: data files written or rewritten by {2 * self.repeat} publishes: {written}; main after publish = branch head, "
                    f"no new snapshot, main's files (inspect.files) = the branch's files: {checks_ok}"
                ],
            )
        )

    # ----- scenario 9: the check engine vs Great Expectations and Soda Core, same suite, same files --------
    PEERS = (
        ("GX SUMMARY", "gx", "SUMMARY"),
        ("GX BOOLEAN_ONLY", "gx", "BOOLEAN_ONLY"),
        ("Soda", "soda", "default"),
        ("Soda no samples", "soda", "no_samples"),
    )
    WITH_COUNTS = ("GX SUMMARY", "Soda", "Soda no samples")

    def spark_conf(self) -> dict[str, str]:
        """The Spark configuration of our session, for the peers' sessions (Iceberg entries aside)."""
        keys = (
            "spark.sql.shuffle.partitions",
            "spark.default.parallelism",
            "spark.sql.session.timeZone",
            "spark.sql.adaptive.enabled",
            "spark.sql.codegen.hugeMethodLimit",
            "spark.scheduler.mode",
            "spark.ui.enabled",
            "spark.ui.showConsoleProgress",
        )
        conf = {k: self.spark.conf.get(k) for k in keys}
        conf["spark.master"] = self.lh.settings.spark_master
        conf["spark.driver.memory"] = self.args.driver_memory
        return conf

    def start_peer(self, tool: str, files: list[str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        py = self.work / f"venv-{tool}" / "bin" / "python"
        if not py.is_file():
            raise SystemExit(f"{py} is missing: make bench creates it from bench/requirements-{tool}.txt")
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=str(py))
        errors = (self.work / f"peer-{tool}.log").open("w")  # the worker's stderr, for a post-mortem
        proc = subprocess.Popen(
            [str(py), "-m", "bench.peer_checks", tool, json.dumps(files), json.dumps(self.spark_conf())],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        return proc, self.peer_line(proc, "ready")

    @staticmethod
    def peer_line(proc: subprocess.Popen[str], key: str) -> dict[str, Any]:
        assert proc.stdout is not None
        for line in proc.stdout:  # the tools may print too: take the first JSON line with our key
            line = line.strip()
            if line.startswith("{"):
                try:
                    out = json.loads(line)
                except ValueError:
                    continue
                if key in out:
                    return out  # type: ignore[no-any-return]
        raise SystemExit(f"peer worker ended without {key!r} (exit {proc.wait()})")

    def peer_run(self, proc: subprocess.Popen[str], mode: str) -> dict[str, Any]:
        assert proc.stdin is not None
        proc.stdin.write(f"run {mode}\n")
        proc.stdin.flush()
        return self.peer_line(proc, "seconds")

    def jit_ms(self) -> int:
        """Milliseconds this process's driver JVM has spent compiling (its JIT compilers, since start)."""
        compilation = (
            self.spark.sparkContext._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        )  # type: ignore[union-attr]
        return int(compilation.getTotalCompilationTime())

    def jobs_of(self, fn: Callable[[], Any]) -> tuple[float, int, Any]:
        sc = self.spark.sparkContext
        group = f"bench_ours_{next(self.job_groups)}"
        sc.setJobGroup(group, "bench run")
        try:
            t0 = time.perf_counter()
            out = fn()
            seconds = time.perf_counter() - t0
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        return seconds, len(sc.statusTracker().getJobIdsForGroup(group)), out

    def scenario_9(self, rows: int | None, label: str) -> None:
        from bench import checks_suite
        from wap_core.checks import parse_checks
        from wap_core.lake import catalog as cat
        from wap_core.security.paths import SourcePolicy
        from wap_core.workflow.audit import run_audit
        from wap_core.workflow.ingest import ingest

        sf1 = data.generate(self.data_dir, 1.0, ("lineitem",))
        _, tail = data.split_tail(self.data_dir, sf1 / "lineitem.parquet")
        size = rows or data.rows(tail)
        path = checks_suite.defective_batch(tail, self.data_dir / "checks" / f"batch_{size}.parquet", rows)
        tid = self.tid(f"li_chk{label.replace('·', '')}")
        res = ingest(self.lh, tid, [str(path)], create=True, branch="c9", source_policy=SourcePolicy.ANY)
        tbl = self.lh.table(tid)
        head = cat.lineage(tbl, "c9").head
        files = list(tbl.inspect.files(snapshot_id=head)["file_path"].to_pylist())
        log(
            f"scenario {label}: 11 checks on {size} rows (SF1 lineitem, {len(files)} files): wap_core vs GX and Soda"
        )

        def suite(overrides: dict[str, str] | None = None) -> Any:
            lines = checks_suite.wap_yaml_lines(overrides)
            return parse_checks(f"{tid}:\n  checks:\n" + "".join(f"    - {ln}\n" for ln in lines))[str(tid)]

        fresh_suite = suite()
        peers: dict[str, subprocess.Popen[str]] = {}
        versions: dict[str, str] = {}
        try:
            for tool in ("gx", "soda"):
                peers[tool], ready = self.start_peer(tool, files)
                versions[tool] = f"{ready['tool']} (PySpark {ready['pyspark']})"
            ours_fn = lambda: run_audit(self.lh, tid, "c9", suite=fresh_suite, use_cache=False)  # noqa: E731
            names = ["ours", *(n for n, _, _ in self.PEERS)]
            jit_at: dict[str, int] = {}  # per JVM ("ours", "gx", "soda"): compile ms so far, last seen

            def run_one(name: str, tool: str, mode: str) -> tuple[float, int, Any]:
                if name == "ours":
                    return self.jobs_of(ours_fn)
                out = self.peer_run(peers[tool], mode)
                jit_at[tool] = int(out.get("jit_ms", 0))
                return float(out["seconds"]), int(out["jobs"]), out["counts"]

            # Warm-up, untimed, alternating like the timed runs, until every tool has run at least
            # --warmup times AND for --warmup-seconds: a JVM keeps compiling a run's code for many runs
            # (a fresh-process audit of 60k rows: 400 ms after 15 runs, 280 after 100, 240 after 200),
            # and a tool of a few large queries needs more runs than one of many small ones to get
            # there; the same time for every tool times each near its steady state.
            warm_runs = dict.fromkeys(names, 0)
            warm_secs = dict.fromkeys(names, 0.0)
            w = 0
            while any(
                warm_runs[n] < self.args.warmup or warm_secs[n] < self.args.warmup_seconds for n in names
            ):
                order = [("ours", "", ""), *self.PEERS]
                for name, tool, mode in order if w % 2 == 0 else order[::-1]:
                    if warm_runs[name] < self.args.warmup or warm_secs[name] < self.args.warmup_seconds:
                        warm_secs[name] += run_one(name, tool, mode)[0]
                        warm_runs[name] += 1
                w += 1
            busy0 = cpu_times()
            jit_at["ours"] = self.jit_ms()
            jit0 = dict(jit_at)
            times: dict[str, list[float]] = {"ours": [], **{n: [] for n, _, _ in self.PEERS}}
            jobs: dict[str, int] = {}
            counts: dict[str, dict[str, Any]] = {}
            audit: Any = None
            for i in range(self.repeat):
                order = [("ours", "", ""), *self.PEERS]
                if i % 2:
                    order.reverse()
                for name, tool, mode in order:
                    sec, n, got = run_one(name, tool, mode)
                    if name == "ours":
                        audit = got
                    else:
                        counts[name] = got
                    times[name].append(sec)
                    jobs[name] = n
            jit_at["ours"] = self.jit_ms()
        finally:
            for proc in peers.values():
                if proc.stdin is not None:
                    proc.stdin.write("quit\n")
                    proc.stdin.close()
                proc.wait(timeout=120)
        steal = steal_share(busy0, cpu_times())
        # each JVM's JIT compile time per timed run (GX's two modes share one JVM, so do Soda's): a JVM
        # still compiling much is not warm yet, and its compiler threads take the cores from everyone
        runs_per_jvm = {"ours": self.repeat, "gx": 2 * self.repeat, "soda": 2 * self.repeat}
        jit = {k: (jit_at[k] - jit0.get(k, 0)) / 1000 / runs_per_jvm[k] for k in runs_per_jvm}
        med = {k: statistics.median(v) for k, v in times.items()}
        log(
            f"scenario {label}: every run (s): "
            + "; ".join(f"{k} " + " ".join(f"{x:.3f}" for x in v) for k, v in times.items())
        )
        ours = {c.name: c for c in audit.checks}
        ours_counts = {cid: ours[cid].failing_rows for cid, _, _ in checks_suite.CHECKS}
        gx_same = all(counts["GX SUMMARY"].get(cid) == ours_counts[cid] for cid in ours_counts)
        soda_expected = dict(ours_counts, uniq_key=ours["uniq_key"].observed["duplicate_keys_in_batch"])
        soda_same = all(
            counts[n].get(cid) == soda_expected[cid]
            for cid in ours_counts
            for n in ("Soda", "Soda no samples")
        )
        fastest_name = min(self.WITH_COUNTS, key=lambda k: med[k])
        ratio = med["ours"] / med[fastest_name]
        sizes = f"batch {fmt_rows(size)} (SF1 lineitem), 11 checks"
        self.rows.append(
            Row(
                f"{label} check suite: wap_core audit vs fastest peer with counts ({fastest_name})",
                sizes,
                med["ours"],
                med[fastest_name],
                ratio,
                "≤ 0.5 (1/2), same counts",
                ratio <= 0.5 and gx_same and soda_same,
                [
                    f"{label}: Spark jobs per run: ours {jobs['ours']}, "
                    + ", ".join(f"{n} {jobs[n]}" for n, _, _ in self.PEERS)
                    + f"; medians: ours {fmt_s(med['ours'])}, "
                    + ", ".join(f"{n} {fmt_s(med[n])}" for n, _, _ in self.PEERS),
                    f"{label}: failing counts ours {ours_counts}; GX SUMMARY {'identical' if gx_same else counts['GX SUMMARY']}; "
                    f"Soda {'identical' if soda_same else counts['Soda']} (Soda's duplicate_count counts duplicated keys: "
                    f"ours {soda_expected['uniq_key']} keys / {ours_counts['uniq_key']} rows)",
                    f"{label}: peers: {versions['gx']}, {versions['soda']}; same Spark conf {self.spark_conf()}; "
                    f"same data files (the Iceberg branch's {len(files)} Parquet files); audit status {audit.status}",
                    f"{label}: JIT compile time per timed run (each JVM's compilers): ours {fmt_s(jit['ours'])}, "
                    f"GX worker {fmt_s(jit['gx'])}, Soda worker {fmt_s(jit['soda'])}",
                    f"{label}: untimed warm-up before {self.repeat} timed runs, at least {self.args.warmup} runs and "
                    f"{self.args.warmup_seconds:.0f} s per tool: "
                    + ", ".join(f"{n} {warm_runs[n]} runs / {warm_secs[n]:.0f} s" for n in names)
                    + "; "
                    f"CPU time stolen by the hypervisor during the timed runs: {steal:.1%} "
                    "(other guests on the host; the tools alternate, so it falls on all of them)",
                ],
            )
        )
        for n, _, _ in self.PEERS:
            self.rows.append(
                Row(
                    f"{label}· (info) wap_core audit vs {n}",
                    sizes,
                    med["ours"],
                    med[n],
                    med["ours"] / med[n],
                    "—",
                    True,
                )
            )

        # re-audit after one check's threshold changed: judged from the cached measurements
        run_audit(self.lh, tid, "c9", suite=fresh_suite)  # fills the cache (as any audit does)
        re_t: list[float] = []
        re_jobs: list[int] = []
        for i in range(self.repeat):
            changed = suite({"nn_partkey": f"max_failing_rows: {1000 + i}"})
            sec, n, again = self.jobs_of(lambda s=changed: run_audit(self.lh, tid, "c9", suite=s))
            re_t.append(sec)
            re_jobs.append(n)
        re_med = statistics.median(re_t)
        same_counts = {c.name: c.failing_rows for c in again.checks} == {
            c.name: c.failing_rows for c in audit.checks
        }
        self.rows.append(
            Row(
                f"{label}· re-audit after one threshold changed vs fresh audit",
                sizes,
                re_med,
                med["ours"],
                re_med / med["ours"],
                "≤ 0.2 (1/5), no Spark job",
                re_med / med["ours"] <= 0.2 and max(re_jobs) == 0 and same_counts,
                [
                    f"{label}·: re-audit (max_failing_rows of nn_partkey changed) ran {max(re_jobs)} Spark jobs; "
                    f"nn_partkey now {again.checks[[c.name for c in again.checks].index('nn_partkey')].status}; counts unchanged: {same_counts}"
                ],
            )
        )
        del res

    # ----- report ----------------------------------------------------------------------------------
    def machine(self) -> str:
        mem_gb = 0.0
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    mem_gb = int(line.split()[1]) / 1024 / 1024
        except OSError:
            pass
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"nproc {os.cpu_count()}, RAM {mem_gb:.1f} GB, {cpu}, {platform.system()} {platform.release()}"

    def table(self, markdown: bool) -> str:
        head = ["scenario", "sizes", "ours (median)", "baseline (median)", "ratio", "target", "result"]
        body = [
            [
                r.scenario,
                r.sizes,
                r.value if r.value is not None else fmt_s(r.ours),
                fmt_s(r.baseline),
                "—" if r.ratio is None else f"{r.ratio:.2f}",
                r.target,
                "info" if r.target == "—" else ("PASS" if r.passed else "FAIL"),
            ]
            for r in self.rows
        ]
        if markdown:
            lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in body]
            return "\n".join(lines)
        widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        sep = "  ".join("-" * w for w in widths)
        return "\n".join([fmt.format(*head), sep, *[fmt.format(*row) for row in body]])

    def report(self, started: float) -> None:
        import pyspark

        a = self.args
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        scale = "; ".join(
            x
            for x in (
                (
                    f"lineitem SF{a.scale_large:g} ({self.large_rows:,} rows) vs SF{a.scale_small:g} ({self.small_rows:,} rows)"
                    + ("" if a.skip_peer else f"; peer scenario SF{a.peer_scale:g}")
                )
                if self.core
                else "",
                f"xl: lineitem SF{a.scale_xl:g} ({self.xl_rows:,} rows) vs SF{a.scale_small:g} ({self.xs_rows:,} rows), "
                f"batch SF{xl.BATCH_SCALE:g}"
                if hasattr(self, "xl_rows")
                else "",
                f"metadata pages at {a.meta_tables} tables" if "metadata500" in self.only else "",
                f"crowd: {a.crowd_sessions} browser sessions × {a.crowd_rounds} branches on {a.crowd_tables} tables of "
                f"TPC-H SF0.01 lineitem + CLI ingests"
                if "crowd" in self.only
                else "",
                f"spread: lineitem SF{a.scale_spread} mains, batch SF{spread.BATCH_SCALE:g} (end-of-range and spread keys)"
                if "spread" in self.only
                else "",
                s3.scale_line(self) if "s3" in self.only else "",
            )
            if x
        )
        notes = [n for r in self.rows for n in r.notes]
        total = time.perf_counter() - started
        print()
        print(self.table(markdown=False))
        print()
        for n in notes:
            print("  " + n)
        targets = [r for r in self.rows if r.target != "—"]
        print(f"\n{sum(r.passed for r in targets)} of {len(targets)} targets met; total {total / 60:.1f} min")
        md = [
            "# WAP Console benchmark: latest results",
            "",
            f"- date: {now}",
            f"- scale: {scale}",
            f"- machine: {self.machine()}",
            f"- software: Python {platform.python_version()}, PySpark {pyspark.__version__}, Spark master "
            f"{self.lh.settings.spark_master if hasattr(self, 'lh') else self.spark_master or '(not started)'}, driver memory {a.driver_memory}, shuffle partitions {a.shuffle_partitions}",
            f"- repetitions: {a.repeat} (medians; scenarios 6 and 8 use min(repeat, 3)); total run time {total / 60:.1f} min",
            f"- command: `python -m bench.run {' '.join(sys.argv[1:])}`".rstrip(),
            "",
            self.table(markdown=True),
            "",
            'ratio = ours / baseline; "baseline" is the small table (1, 1b, 2), the hand-written PySpark script (3), '
            "the 1-check suite (4), the first diff on a main snapshot (6), lake-sift (7, 8), the fastest of Great Expectations "
            "and Soda Core that reports failing counts (9) and a fresh audit (9·, re-audit); "
            "for 10 (ten times the data, `--only xl`) the SF0.01 main (10b, 10c) and a full-scan profile of main (10a, "
            "with `--xl-scan-baseline`); for s3 (`--only s3`) the SF0.01 main on the same store.",
            "",
            "## Notes",
            "",
            *[f"- {n}" for n in notes],
            "",
        ]
        RESULTS.mkdir(parents=True, exist_ok=True)
        # the crowd (and its runaway-query row) has its own file
        default = "crowd.md" if self.only and self.only <= {"crowd", "runaway"} else "latest.md"
        if self.only == set(s3.SCENARIOS):  # so has the S3 family (issue 18)
            default = "s3.md"
        out = Path(a.output) if a.output else RESULTS / default
        out.write_text("\n".join(md))
        log(f"wrote {out}")

    @property
    def only(self) -> set[str]:
        return set(self.args.only.split(",")) if self.args.only else set()

    @property
    def core(self) -> bool:
        """Whether any scenario of the default set runs (the on-demand ones of bench/xl.py need none of its tables)."""
        return not self.only or bool(
            self.only - set(xl.SCENARIOS) - set(crowd.SCENARIOS) - set(spread.SCENARIOS) - set(s3.SCENARIOS)
        )

    def run(self) -> int:
        started = time.perf_counter()
        only = self.only or None

        def want(s: str) -> bool:
            return only is None or s in only

        self.prepare_data()
        if "xl" in self.only:
            xl.prepare(self)
        if "spread" in self.only:
            spread.prepare(self)
        if want("5"):
            self.scenario_5()  # before Spark starts in this process; runs in its own interpreter anyway
        if "metadata500" in self.only:
            xl.scenario_metadata(self, self.args.meta_tables)
        if "crowd" in self.only:
            crowd.scenario_crowd(self)  # its own lakehouse, console, browsers and CLI processes
        if "runaway" in self.only:
            crowd.scenario_runaway(self)  # its own lakehouse; one user's runaway query, another's diffs
        if "s3" in self.only:  # its own SeaweedFS and lakehouses; first to start Spark (with the S3A jars)
            s3.prepare(self)
            s3.scenario_s3(self)
        if not self.core and not self.only & {"xl", "spread"}:
            self.report(started)
            return 0 if all(r.passed for r in self.rows) else 1
        self.start()
        if "xl" in self.only:
            xl.setup(self)
            xl.scenario_xl(self)
        if "spread" in self.only:
            spread.setup(self)
            spread.scenario_spread(self)
        if not self.core:
            self.report(started)
            return 0 if all(r.passed for r in self.rows) else 1
        if only is None or only & {"1", "2", "4", "6", "7"}:
            self.setup_tables()
        if want("6"):
            self.scenario_6()
        if want("1") or want("4"):
            self.scenario_1() if want("1") else self._b1_only()
        if want("4"):
            self.scenario_4()
        if not self.args.skip_peer and want("8"):
            self.scenario_8()
            if want("4"):
                self.scenario_4("li_peer", "b8", "4b")
        if want("7"):
            if self.args.skip_peer or not want("8"):
                self.args.skip_peer = True
                if not want("1"):
                    self._b1_only()
            self.scenario_7()
        if want("3"):
            self.scenario_3()
            if not self.args.skip_peer:
                self.scenario_3(self.peer_batch, "3b", min(self.repeat, 3))
        if want("2"):
            self.scenario_2()
        if want("9") and not self.args.skip_checks_peers:
            self.scenario_9(None, "9")
            self.scenario_9(60_000, "9b")
        self.report(started)
        return 0 if all(r.passed for r in self.rows) else 1

    def _b1_only(self) -> None:
        if "b1" not in self.lh.table(self.tid("li_large")).metadata.refs:
            batch = self.next_batch()
            self.ingest("li_large", batch, "b1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scale-large",
        type=float,
        default=1.0,
        help="TPC-H scale factor of the large table's main (default 1: 6M rows)",
    )
    p.add_argument(
        "--scale-small",
        type=float,
        default=0.01,
        help="scale factor of the small table's main and of every batch (default 0.01: 60k rows)",
    )
    p.add_argument(
        "--peer-scale",
        type=float,
        default=1.0,
        help="scale factor for scenario 8 (main = lowest 90%% of order keys, batch = the highest 10%%; default 1)",
    )
    p.add_argument("--skip-peer", action="store_true", help="skip scenario 8 and the lake-sift runs")
    p.add_argument(
        "--repeat", type=int, default=5, help="repetitions per measurement (medians are reported; default 5)"
    )
    p.add_argument(
        "--driver-memory", default="6g", help="Spark driver memory (set before Spark starts; default 6g)"
    )
    p.add_argument(
        "--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)"
    )
    p.add_argument(
        "--hand-full-scan",
        action="store_true",
        help="scenario 3: the hand-written script counts nulls over the whole branch instead of the written batch",
    )
    p.add_argument(
        "--skip-checks-peers", action="store_true", help="skip scenario 9 (Great Expectations and Soda Core)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=10,
        help="scenario 9: at least this many untimed runs of every tool before the timed ones (default 10)",
    )
    p.add_argument(
        "--warmup-seconds",
        type=float,
        default=60.0,
        help="scenario 9: and untimed runs of every tool until each has run this long (default 60), so that "
        "each is timed once its JVM has compiled its code (a JVM keeps compiling for many runs)",
    )
    p.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios to run, e.g. 1,4 (default: 1-8); the on-demand scenarios of issue 10 "
        "run only when named: xl (main at --scale-xl vs SF0.01, 600k batch), metadata500 (--meta-tables tables), "
        "crowd (--crowd-sessions browser sessions publishing while a CLI ingests; results in bench/results/crowd.md), "
        "runaway (another user's Review diff while one user's runaway query runs; results in bench/results/crowd.md), "
        "spread (600k batch of keys spread over main's range vs at its end, mains at --scale-spread), "
        "s3 (main of --scale-s3 minus its top 10%% vs SF0.01 main, the same top-10%% batch, on SeaweedFS S3 and "
        "on local files; results in bench/results/s3.md)",
    )
    p.add_argument(
        "--crowd-sessions",
        type=int,
        default=8,
        help="scenario crowd: concurrent browser sessions (default 8)",
    )
    p.add_argument(
        "--crowd-rounds",
        type=int,
        default=2,
        help="scenario crowd: branches each session reviews, re-audits and publishes (default 2)",
    )
    p.add_argument(
        "--crowd-tables", type=int, default=4, help="scenario crowd: tables the sessions share (default 4)"
    )
    p.add_argument(
        "--crowd-cli-min",
        type=int,
        default=2,
        help="scenario crowd: at least this many CLI ingests (default 2)",
    )
    p.add_argument(
        "--runaway-diffs",
        type=int,
        default=5,
        help="scenario runaway: diffs timed quiet and again while another user's runaway query runs (default 5)",
    )
    p.add_argument(
        "--runaway-timeout",
        type=float,
        default=20,
        help="scenario runaway: WAP_QUERY_TIMEOUT of the runaway query in seconds (default 20)",
    )
    p.add_argument(
        "--crowd-local",
        action="store_true",
        help="scenario crowd: local mode (one WAP_USER) instead of OIDC sign-in with one user per session",
    )
    p.add_argument(
        "--scale-xl",
        type=float,
        default=10.0,
        help="scenario xl: TPC-H scale factor of the XL main (default 10: 60M rows)",
    )
    p.add_argument(
        "--xl-scan-baseline",
        action="store_true",
        help="scenario xl: also profile the XL main by a full scan (minutes) and check the metadata profile's exact fields",
    )
    p.add_argument(
        "--scale-spread",
        default="1",
        help="scenario spread: comma-separated TPC-H scale factors of the mains (default 1; 1,10 adds 60M rows)",
    )
    p.add_argument(
        "--scale-s3",
        type=float,
        default=1.0,
        help="scenario s3: TPC-H scale factor split into the large main (lowest 90%% of order keys) and the "
        "batch (the highest 10%%) (default 1: 5.4M-row main, 600k-row batch)",
    )
    p.add_argument(
        "--meta-tables", type=int, default=500, help="scenario metadata500: number of tables (default 500)"
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=Path(__file__).resolve().parent / ".work",
        help="data cache and lakehouse (default bench/.work; the lakehouse is recreated each run)",
    )
    p.add_argument("--output", default="", help="markdown output (default bench/results/latest.md)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return Bench(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
