"""Performance on S3 (issue 18, item 5): scenario ``s3`` of ``python -m bench.run``.

The shape of the cost-follows-the-batch criterion on an object store: TPC-H ``lineitem`` at
``--scale-s3`` (default SF1) split by order key into a large main (the lowest 90 %: 5.4M rows) and
a batch (the highest 10 %: 600k rows, like scenario 8), against a small main of SF0.01 ``lineitem``
(60k rows); the same batch (its part keys folded into SF0.01's 2,000 parts, so ``references``
holds on both tables) on a branch of each. Everything twice, in one Spark session: once with the
warehouse in a bucket of a real SeaweedFS (``weed server`` on loopback, ``tests/s3_server.py``;
S3A for Spark, PyArrow S3 for PyIceberg; the SQLite JDBC catalog, as tests/test_s3.py configures
it) and once on local files (the counterpart rows), alternating large and small, medians:

- s3a a fresh audit (``use_cache=False``: every check measured) of the batch, large vs small
  main, target ≤ 1.3;
- s3b publish (fast-forward) of a fresh audited 600k batch, large vs small main, target ≤ 1.1,
  and no data file written: the table's data files listed in the bucket (on disk for the local
  rows) before and after every publish;
- s3c the first diff on the 5.4M main with a cold profile cache (main profiled metadata-first),
  target ≤ 10 s; the first diff on the 60k main (scanned: small mains are) as the baseline.

Runs only when named in ``--only``; results in ``bench/results/s3.md``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import data
from bench.common import (
    KEY,
    NS,
    Bench,
    Row,
    cpu_times,
    data_files_on_disk,
    fmt_rows,
    fmt_s,
    ingest_batch,
    load_main,
    log,
    measured_publish,
    steal_share,
)

if TYPE_CHECKING:
    from tests.s3_server import SeaweedS3

SCENARIOS = ("s3",)
BUCKET = "wap-bench"
SMALL_PARTS = 2000  # parts at SF0.01: the batch's part keys fold into 1..2000
LARGE, SMALL = "li_c_large", "li_c_small"
AUDIT_TARGET = 1.3
PUBLISH_TARGET = 1.1
FIRST_DIFF_TARGET = 10.0
_DATA: dict[str, Any] = {}


def checks_yaml(ns: str) -> str:
    """The bench's usual five checks (``unique`` against main and ``references`` included) on both mains."""

    return data.lineitem_checks(ns, LARGE, "part_c_large") + data.lineitem_checks(ns, SMALL, "part_c_small")


def scale_line(b: Bench) -> str:
    d = _DATA
    if not d:
        return ""
    return (
        f"s3: lineitem SF{b.args.scale_s3:g} minus its top 10% of order keys ({d['large_rows']:,} rows) vs "
        f"SF{b.args.scale_small:g} ({d['small_rows']:,} rows), batch of {d['batch_rows']:,} rows (the top 10%), "
        f"on SeaweedFS S3 ({d.get('weed', '?')}) and on local files"
    )


def prepare(b: Bench) -> None:

    t0 = time.perf_counter()
    large = data.generate(b.data_dir, b.args.scale_s3)
    small = data.generate(b.data_dir, b.args.scale_small)
    main, batch = data.split_tail(b.data_dir, large / "lineitem.parquet")
    _DATA.clear()
    _DATA.update(
        large_dir=large,
        small_dir=small,
        large_main=main,
        batch=batch,
        large_rows=data.rows(main),
        small_rows=data.rows(small / "lineitem.parquet"),
        batch_rows=data.rows(batch),
    )
    log(
        f"s3 data ready in {time.perf_counter() - t0:.1f} s: main {_DATA['large_rows']} rows (SF{b.args.scale_s3:g} "
        f"minus its top 10%), main {_DATA['small_rows']} rows (SF{b.args.scale_small:g}), batch {_DATA['batch_rows']} rows"
    )


def _batch(b: Bench) -> Path:
    """The batch again with new order keys (above both mains') and part keys folded into 1..2000."""
    b.batch_index += 1
    return data.shifted_batch(b.data_dir, _DATA["batch"], b.batch_index, partkeys=SMALL_PARTS)


@dataclass
class Store:
    """One lakehouse of the scenario: on the S3 bucket (``server`` set) or on local files."""

    label: str
    lh: Any
    server: SeaweedS3 | None = None

    def tid(self, name: str) -> Any:
        from wap_core import TableId

        return TableId(NS, name)

    def data_files(self, name: str) -> set[str]:
        """The table's data files as stored: objects in the bucket, or files on disk."""

        tid = self.tid(name)
        if self.server is None:
            return data_files_on_disk(self.lh, tid)
        location = self.lh.table(tid).metadata.location.split("://", 1)[1]
        return set(self.server.list_files(location.rstrip("/") + "/data"))


def _lakehouse(b: Bench, home: Path, catalog: str, server: SeaweedS3 | None) -> Any:
    from wap_core import Lakehouse, Settings

    home.mkdir(parents=True)
    (home / "checks.yml").write_text(checks_yaml(NS))
    store: dict[str, Any] = {}
    if (
        server is not None
    ):  # as tests/conftest.py's s3-seaweedfs backend: SQLite JDBC catalog, warehouse in the bucket
        store = {
            "warehouse": f"s3a://{BUCKET}/warehouse",
            "s3_endpoint": server.endpoint,
            "s3_access_key": server.access_key,
            "s3_secret_key": server.secret_key,
        }
    return Lakehouse(
        Settings(
            home=home,
            checks_path=home / "checks.yml",
            user="bench",
            catalog_name=catalog,
            shuffle_partitions=b.args.shuffle_partitions,
            spark_driver_memory=b.args.driver_memory,
            **store,
        )
    )


def _weed_version() -> str:
    from tests.s3_server import weed_binary

    out = subprocess.run([weed_binary(), "version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].strip() if out else "weed (version unknown)"


def scenario_s3(b: Bench) -> None:
    from tests.s3_server import SeaweedS3  # the tests' real S3 server (tests/ is a namespace package)

    root = b.work / "s3"
    shutil.rmtree(root, ignore_errors=True)
    (root / "seaweedfs").mkdir(parents=True)
    t0 = time.perf_counter()
    server = SeaweedS3(root / "seaweedfs").start()
    try:
        server.create_bucket(BUCKET)
        _DATA["weed"] = _weed_version()
        log(f"SeaweedFS S3 at {server.endpoint} ready in {time.perf_counter() - t0:.1f} s ({_DATA['weed']})")
        stores = [
            Store("SeaweedFS S3", _lakehouse(b, root / "home-s3", "bench_s3", server), server),
            Store("local files", _lakehouse(b, root / "home-local", "bench_s3local", None)),
        ]
        t0 = time.perf_counter()
        for st in stores:  # the S3 lakehouse first: the session is built with the S3A jars
            st.lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {st.lh.settings.catalog_name}.{NS}")
        b.spark_master = stores[0].lh.settings.spark_master
        log(f"Spark started in {time.perf_counter() - t0:.1f} s (driver memory {b.args.driver_memory})")
        setup_notes = [_setup(b, st) for st in stores]
        load0 = os.getloadavg()
        busy0 = cpu_times()
        diffs = [_first_diff(b, st) for st in stores]
        audits = [_audit(b, st) for st in stores]
        publishes = [_publish(b, st) for st in stores]
        load1 = os.getloadavg()
        steal = steal_share(busy0, cpu_times())
    finally:
        server.stop()
    _rows(b, stores, audits, publishes, diffs, setup_notes, (load0, load1, steal))


def _setup(b: Bench, st: Store) -> str:
    """Both mains, their part tables, and the batch on branch ``c1`` of each (ingest audits it)."""

    d = _DATA
    secs: dict[str, float] = {}
    for name, path, key in (
        (LARGE, d["large_main"], KEY),
        (SMALL, d["small_dir"] / "lineitem.parquet", KEY),
        ("part_c_large", d["large_dir"] / "part.parquet", ("p_partkey",)),
        ("part_c_small", d["small_dir"] / "part.parquet", ("p_partkey",)),
    ):
        t0 = time.perf_counter()
        load_main(st.lh, st.tid(name), path, key)
        secs[name] = time.perf_counter() - t0
    batch = _batch(b)
    d["audit_batch"] = batch
    for name in (LARGE, SMALL):
        t0 = time.perf_counter()
        ingest_batch(st.lh, st.tid(name), batch, "c1")
        secs[f"ingest {name}"] = time.perf_counter() - t0
    files = {
        name: st.lh.table(st.tid(name))
        .current_snapshot()
        .summary.additional_properties.get("total-data-files")
        for name in (LARGE, SMALL)
    }
    log(f"s3 set-up on {st.label}: " + ", ".join(f"{k} {v:.1f} s" for k, v in secs.items()))
    return (
        f"set-up on {st.label}: main {fmt(d['large_rows'])} written in {secs[LARGE]:.1f} s ({files[LARGE]} files), "
        f"main {fmt(d['small_rows'])} in {secs[SMALL]:.1f} s; the {fmt(d['batch_rows'])}-row batch ingested "
        f"(written + audited) in {secs['ingest ' + LARGE]:.1f} s (large) and {secs['ingest ' + SMALL]:.1f} s (small)"
    )


def fmt(n: int) -> str:

    return fmt_rows(n)


def _alternate(
    b: Bench, reps: int, fn: Callable[[str, int], Any]
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """``fn(table, i)`` timed for both tables, ``reps`` times, large first on even rounds, small first on odd."""
    times: dict[str, list[float]] = {LARGE: [], SMALL: []}
    out: dict[str, Any] = {}
    for i in range(reps):
        for name in (LARGE, SMALL) if i % 2 == 0 else (SMALL, LARGE):
            t0 = time.perf_counter()
            out[name] = fn(name, i)
            times[name].append(time.perf_counter() - t0)
    return times, out


def _first_diff(b: Bench, st: Store) -> dict[str, Any]:
    """s3c: the diff of ``c1`` with main's profile cache emptied first (every run a first diff)."""
    from sqlalchemy import text

    from wap_core.analysis.diff import compute_diff
    from wap_core.lake import catalog as cat
    from wap_core.lake.metaprofile import metadata_profile

    log(
        f"scenario s3c on {st.label}: first diff (cold profile cache), {fmt(_DATA['large_rows'])} vs {fmt(_DATA['small_rows'])} main"
    )
    engine = st.lh.journal.engine

    def first(name: str, _i: int) -> Any:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM wap_profiles WHERE table_name = :t"), {"t": str(st.tid(name))})
        return compute_diff(st.lh, st.tid(name), "c1")

    t0 = time.perf_counter()
    very_first = first(LARGE, 0)  # the process's first diff of this store (JVM code paths still cold)
    very_first_t = time.perf_counter() - t0
    times, out = _alternate(b, b.repeat, first)
    fork = cat.lineage(st.lh.table(st.tid(LARGE)), "c1").fork
    meta_t = []
    for _ in range(min(b.repeat, 3)):
        t0 = time.perf_counter()
        metadata_profile(
            st.lh.table(st.tid(LARGE)), st.tid(LARGE), fork, st.lh.spark, st.lh.spark_name(st.tid(LARGE))
        )
        meta_t.append(time.perf_counter() - t0)
    return {
        "times": times,
        "diffs": out,
        "very_first": very_first_t,
        "very_first_source": very_first.main_profile.source if very_first.main_profile else None,
        "meta": statistics.median(meta_t),
    }


def _audit(b: Bench, st: Store) -> dict[str, Any]:
    """s3a: fresh audits of ``c1`` (every check measured again), large vs small main."""
    from wap_core.workflow.audit import run_audit

    log(
        f"scenario s3a on {st.label}: fresh audit of the same {fmt(_DATA['batch_rows'])} batch, large vs small main"
    )

    def audit(name: str, _i: int) -> Any:
        return run_audit(st.lh, st.tid(name), "c1", use_cache=False)

    for name in (LARGE, SMALL):  # warm-up
        audit(name, 0)
    times, out = _alternate(b, b.repeat, audit)
    return {"times": times, "audits": out}


def _publish(b: Bench, st: Store) -> dict[str, Any]:
    """s3b: publish a freshly ingested batch, large vs small main; the data files listed before and after."""

    reps = max(b.repeat, 5)  # a publish takes milliseconds: at least 5 for a stable median
    log(f"scenario s3b on {st.label}: {reps} publishes of a {fmt(_DATA['batch_rows'])} batch per table")
    times: dict[str, list[float]] = {LARGE: [], SMALL: []}
    written: list[str] = []
    listed: list[int] = []
    checks_ok = True
    outcomes: list[str] = []
    for i in range(reps):
        batch = _batch(b)
        for name in (LARGE, SMALL) if i % 2 == 0 else (SMALL, LARGE):
            tid, br = st.tid(name), f"cp{i}"
            ingest_batch(st.lh, tid, batch, br)
            p = measured_publish(st.lh, tid, br, partial(st.data_files, name))
            times[name].append(p.seconds)
            written += sorted(p.files_after - p.files_before)
            listed.append(len(p.files_before))
            outcomes.append(p.outcome)
            checks_ok &= p.fast_forward and p.files_before <= p.files_after
    return {
        "times": times,
        "written": written,
        "listed": listed,
        "ok": checks_ok,
        "outcomes": outcomes,
        "reps": reps,
    }


def _rows(
    b: Bench,
    stores: list[Store],
    audits: list[dict[str, Any]],
    publishes: list[dict[str, Any]],
    diffs: list[dict[str, Any]],
    setup_notes: list[str],
    load: tuple[tuple[float, ...], tuple[float, ...], float],
) -> None:

    d = _DATA
    sizes = (
        f"main {fmt(d['large_rows'])} vs {fmt(d['small_rows'])} ({d['large_rows'] / d['small_rows']:.0f}×), "
        f"batch {fmt(d['batch_rows'])}"
    )
    (l0, l1, steal) = load
    for st, a, p, f, note in zip(stores, audits, publishes, diffs, setup_notes, strict=True):
        where = st.label
        al, asm = (statistics.median(a["times"][n]) for n in (LARGE, SMALL))
        statuses = {n: str(a["audits"][n].status) for n in (LARGE, SMALL)}
        passed = all(a["audits"][n].passed for n in (LARGE, SMALL))
        b.rows.append(
            Row(
                f"s3a audit (fresh), large vs small main, same batch: {where}",
                sizes,
                al,
                asm,
                al / asm,
                f"≤ {AUDIT_TARGET:g}",
                al / asm <= AUDIT_TARGET and passed,
                [
                    f"s3a {where}: suite = {', '.join(c.name for c in a['audits'][LARGE].checks)}; statuses {statuses}; "
                    f"every run (s): large {' '.join(f'{x:.2f}' for x in a['times'][LARGE])}; "
                    f"small {' '.join(f'{x:.2f}' for x in a['times'][SMALL])}",
                    f"s3 {note}",
                ],
            )
        )
        pl, ps = (statistics.median(p["times"][n]) for n in (LARGE, SMALL))
        b.rows.append(
            Row(
                f"s3b publish (fast-forward), large vs small main: {where}",
                f"main {fmt(d['large_rows'])}+ vs {fmt(d['small_rows'])}+, batches of {fmt(d['batch_rows'])}",
                pl,
                ps,
                pl / ps,
                f"≤ {PUBLISH_TARGET:g}, 0 data files written",
                pl / ps <= PUBLISH_TARGET and not p["written"] and p["ok"],
                [
                    f"s3b {where}: data files written or rewritten by {2 * p['reps']} publishes: {len(p['written'])} "
                    f"{p['written'][:4] if p['written'] else ''}(the table's data files "
                    f"{'listed in the bucket' if st.server else 'listed on disk'} before and after each publish: "
                    f"{min(p['listed'])}..{max(p['listed'])} files); main after publish = branch head, no new snapshot, "
                    f"main's files = the branch's files: {p['ok']}; every publish (ms): large "
                    f"{' '.join(f'{x * 1000:.0f}' for x in p['times'][LARGE])}; small "
                    f"{' '.join(f'{x * 1000:.0f}' for x in p['times'][SMALL])}; the mains grow by one batch per publish"
                ],
            )
        )
        fl, fs = (statistics.median(f["times"][n]) for n in (LARGE, SMALL))
        src = {n: f["diffs"][n].main_profile for n in (LARGE, SMALL)}
        b.rows.append(
            Row(
                f"s3c first diff, large main, cold profile cache (metadata profile) vs small main (scan): {where}",
                f"main {fmt(d['large_rows'])} vs {fmt(d['small_rows'])}, batch {fmt(d['batch_rows'])}",
                fl,
                fs,
                fl / fs,
                f"≤ {FIRST_DIFF_TARGET:g} s, metadata profile",
                fl <= FIRST_DIFF_TARGET and src[LARGE] is not None and src[LARGE].source == "metadata",
                [
                    f"s3c {where}: main profile source large {src[LARGE].source if src[LARGE] else None} "
                    f"(sample {src[LARGE].sample if src[LARGE] else None}), small {src[SMALL].source if src[SMALL] else None}; "
                    f"main's metadata profile alone {fmt_s(f['meta'])}; the process's very first diff of this store "
                    f"{fmt_s(f['very_first'])} ({f['very_first_source']}); every run (s): large "
                    f"{' '.join(f'{x:.2f}' for x in f['times'][LARGE])}; small {' '.join(f'{x:.2f}' for x in f['times'][SMALL])}"
                ],
            )
        )
    b.rows[-1].notes.append(
        f"s3: load average {l0[0]:.1f} / {l0[1]:.1f} / {l0[2]:.1f} before the timed scenarios, "
        f"{l1[0]:.1f} / {l1[1]:.1f} / {l1[2]:.1f} after (2 cores shared with other work); CPU stolen by the "
        f"hypervisor meanwhile {steal:.1%}; SeaweedFS ({d.get('weed')}) ran on the same 2 cores, on loopback"
    )
