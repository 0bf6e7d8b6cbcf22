"""Ten times the data (issue 10, section 5): scenarios ``xl`` and ``metadata500`` of ``python -m bench.run``.

``xl``: main at TPC-H SF``--scale-xl`` (default 10: ~60M rows) ``lineitem`` against main at
SF0.01, the same 600k-row batch (SF0.1 lineitem, order keys shifted above main's, part keys
folded into SF0.01's 2,000 parts so the ``references`` check holds on both):

- 10a the first diff on a main without a cached profile (main profiled metadata-first), ≤ 10 s;
- 10b audit + diff, XL vs SF0.01 main, ≤ 1.5;
- 10c publish, XL vs SF0.01 main, ≤ 1.5.

``metadata500``: the console's metadata pages (``status.list_branches``, ``status.table_infos``)
at ``--meta-tables`` (default 500) tables × 4 open branches, in a fresh interpreter that never
starts Spark, ≤ 1 s each.

Both run only when named in ``--only`` (they are not part of the default run).
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any

from bench import data
from bench.common import Bench, Row, audit_and_diff, fmt_rows, fmt_s, log
from bench.data import KEY

SCENARIOS = ("xl", "metadata500")
BATCH_SCALE = 0.1  # the 600k-row batch
SMALL_PARTS = 2000  # parts at SF0.01: the batch's part keys fold into 1..2000


def checks_yaml(ns: str) -> str:
    """Suites of the XL and its SF0.01 baseline table: the bench's usual five checks."""

    return data.lineitem_checks(ns, "li_xl", "part_xl") + data.lineitem_checks(ns, "li_xs", "part_xs")


def prepare(b: Bench) -> None:

    t0 = time.perf_counter()
    b.xl_dir = data.generate(b.data_dir, b.args.scale_xl)
    b.xs_dir = data.generate(b.data_dir, b.args.scale_small)
    b.xl_batch_dir = data.generate(b.data_dir, BATCH_SCALE, ("lineitem",))
    b.xl_rows = data.rows(b.xl_dir / "lineitem.parquet")
    b.xs_rows = data.rows(b.xs_dir / "lineitem.parquet")
    log(
        f"xl data ready in {time.perf_counter() - t0:.1f} s: lineitem SF{b.args.scale_xl:g} = {b.xl_rows} rows, "
        f"SF{b.args.scale_small:g} = {b.xs_rows} rows, batch SF{BATCH_SCALE:g}"
    )


def setup(b: Bench) -> None:
    b.load_main("li_xl", b.xl_dir / "lineitem.parquet")
    b.load_main("part_xl", b.xl_dir / "part.parquet", ("p_partkey",))
    b.load_main("li_xs", b.xs_dir / "lineitem.parquet")
    b.load_main("part_xs", b.xs_dir / "part.parquet", ("p_partkey",))


def _next_batch(b: Bench) -> Any:
    b.batch_index += 1
    return data.shifted_batch(
        b.data_dir, b.xl_batch_dir / "lineitem.parquet", b.batch_index, partkeys=SMALL_PARTS
    )


def scenario_xl(b: Bench) -> None:
    from sqlalchemy import text

    from wap_core.analysis.diff import compute_diff, profile_frame
    from wap_core.lake import catalog as cat
    from wap_core.lake.metaprofile import metadata_profile
    from wap_core.workflow.publish import publish

    sf = f"SF{b.args.scale_xl:g}"
    xl, xs = b.tid("li_xl"), b.tid("li_xs")
    reps = min(b.repeat, 3)

    # ----- 10a: the first diff on a main that has no cached profile --------------------------------
    log(f"scenario 10a: first diff on the {sf} main without a cached profile (metadata-first)")
    batch = _next_batch(b)
    t0 = time.perf_counter()
    b.ingest("li_xl", batch, "x1")
    t_ingest = time.perf_counter() - t0
    fork = cat.lineage(b.lh.table(xl), "x1").fork
    engine = b.lh.catalog.engine
    firsts, seconds, meta_only = [], [], []
    d: Any = None
    for _ in range(reps):
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM wap_profiles WHERE table_name = :t"), {"t": str(xl)})
        t0 = time.perf_counter()
        d = compute_diff(b.lh, xl, "x1")
        firsts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        compute_diff(b.lh, xl, "x1")
        seconds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        prof, _basis = metadata_profile(b.lh.table(xl), xl, fork, b.lh.spark, b.lh.spark_name(xl))
        meta_only.append(time.perf_counter() - t0)
    first, second, meta_t = (statistics.median(x) for x in (firsts, seconds, meta_only))
    src = d.main_profile
    main_cols = {c.name: c.main for c in d.columns}
    exact = sorted(
        n
        for n, c in main_cols.items()
        if c and all(c.accuracy[f] == "exact" for f in ("rows", "nulls", "min", "max"))
    )
    notes = [
        f"10a: main profile source = {src.source if src else None}; {src.basis if src else None}; "
        f"sample {src.sample if src else None}",
        f"10a: rows, nulls, min and max exact for {len(exact)} of {len(main_cols)} columns ({', '.join(exact)}); "
        "the others have truncated string bounds (min/max approximate)",
        f"10a: main's metadata profile alone {fmt_s(meta_t)}; the rest of the first diff is the batch's profile "
        f"({fmt_rows(d.rows_added)} rows); the 2nd diff (cached main profile) {fmt_s(second)}; "
        f"ingest + audit of the batch {fmt_s(t_ingest)}; Spark already running (net of JVM start)",
    ]
    scan_t: float | None = None
    if b.args.xl_scan_baseline:
        log(f"scenario 10a baseline: profiling the whole {sf} main by a full scan (minutes)")
        t0 = time.perf_counter()
        truth = profile_frame(b.lh.read_snapshot(xl, fork))
        scan_t = time.perf_counter() - t0
        wrong = [
            f"{n}.{f}"
            for n, c in (prof or {}).get("columns", {}).items()
            for f in ("rows", "nulls", "min", "max")
            if c["accuracy"][f] == "exact" and c[f] != truth["columns"][n][f]
        ]
        notes.append(
            f"10a: full-scan profile {fmt_s(scan_t)}; fields marked exact that differ from the scan: {wrong or 'none'}"
        )
    b.rows.append(
        Row(
            "10a first diff, main without cached profile (metadata-first) vs full-scan profile",
            f"main {fmt_rows(b.xl_rows)} ({sf}), batch {fmt_rows(d.rows_added)}",
            first,
            scan_t,
            (first / scan_t) if scan_t else None,
            "≤ 10 s",
            first <= 10.0 and src.get("source") == "metadata",
            notes,
        )
    )

    # ----- 10b: audit + diff, XL vs small main, the same batch ---------------------------------------
    log(
        f"scenario 10b: audit + diff of the same {BATCH_SCALE:g} batch on the {sf} vs the SF{b.args.scale_small:g} main"
    )
    batch = _next_batch(b)
    for name in ("li_xl", "li_xs"):
        b.ingest(name, batch, "x2")

    audit_diff = partial(audit_and_diff, b.lh, branch="x2")
    for tid in (xl, xs):  # warm-up (main profiles cached per snapshot)
        audit_diff(tid)
    t_xl: list[float] = []
    t_xs: list[float] = []
    audits: dict[str, Any] = {}
    for i in range(b.repeat):
        for tid in (xl, xs) if i % 2 == 0 else (xs, xl):
            t0 = time.perf_counter()
            audits[tid.name] = audit_diff(tid)
            (t_xl if tid == xl else t_xs).append(time.perf_counter() - t0)
    ml, ms = statistics.median(t_xl), statistics.median(t_xs)
    sizes = f"main {fmt_rows(b.xl_rows)} vs {fmt_rows(b.xs_rows)} ({b.xl_rows / b.xs_rows:.0f}×), batch {fmt_rows(data.rows(batch))}"
    ok = all(a.passed for a in audits.values())
    b.rows.append(
        Row(
            f"10b audit + diff, {sf} vs SF{b.args.scale_small:g} main",
            sizes,
            ml,
            ms,
            ml / ms,
            "≤ 1.5",
            ml / ms <= 1.5 and ok,
            [
                f"10b: suite = {', '.join(c.name for c in audits['li_xl'].checks)}; statuses: xl {audits['li_xl'].status}, "
                f"xs {audits['li_xs'].status}"
            ],
        )
    )

    # ----- 10c: publish, XL vs small main ----------------------------------------------------------
    log(f"scenario 10c: publish on the {sf} vs the SF{b.args.scale_small:g} main")
    times: dict[str, list[float]] = {"li_xl": [], "li_xs": []}
    outcomes = []
    for i in range(max(b.repeat, 5)):  # a publish takes milliseconds: more runs for a stable median
        batch = _next_batch(b)
        for name in ("li_xl", "li_xs") if i % 2 == 0 else ("li_xs", "li_xl"):
            b.ingest(name, batch, f"xp{i}")
            t0 = time.perf_counter()
            outcomes.append(publish(b.lh, b.tid(name), f"xp{i}").outcome)
            times[name].append(time.perf_counter() - t0)
    pl, ps = statistics.median(times["li_xl"]), statistics.median(times["li_xs"])
    b.rows.append(
        Row(
            f"10c publish (fast-forward), {sf} vs SF{b.args.scale_small:g} main",
            f"main {fmt_rows(b.xl_rows)}+ vs {fmt_rows(b.xs_rows)}+, batch {fmt_rows(data.rows(batch))}",
            pl,
            ps,
            pl / ps,
            "≤ 1.5",
            pl / ps <= 1.5 and all(o == "published" for o in outcomes),
            [f"10c: outcomes {sorted(set(outcomes))}; key columns {', '.join(KEY)}"],
        )
    )


def scenario_metadata(b: Bench, tables: int) -> None:

    log(f"scenario 5 at scale: {tables} tables x 4 open branches, metadata pages in a fresh interpreter")
    out = b.subprocess_json(
        [
            "-m",
            "bench.metadata",
            "branches",
            str(b.work / f"meta{tables}"),
            str(max(b.repeat, 5)),
            str(tables),
        ]
    )
    b.metadata_rows(
        out,
        tables,
        ("5c list_branches", "5d table_infos"),
        f"; first call in the fresh process (every metadata file parsed): {fmt_s(out['list_branches'][0])}, "
        "later calls parse only the tables that moved",
    )
