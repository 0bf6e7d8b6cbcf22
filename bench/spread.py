"""Keys that min/max cannot prune (issue 10, item 6): scenario ``spread`` of ``python -m bench.run``.

Main is TPC-H ``lineitem`` at SF``s`` for each ``s`` of ``--scale-spread`` (default 1; ``1,10``
adds the 60M-row main), loaded sorted by key into 16 MB files. Two batches of the same 600k rows
(SF0.1 ``lineitem``), audited against it by the bench's usual five checks (``unique`` against
main and ``references`` included):

- the *end-of-range* batch: order keys shifted above main's (min/max pruning skips every file of
  main: the usual WAP batch);
- the *spread* batch: order keys moved into the unused gaps of every block of 32 over main's
  whole key range (new keys, yet the batch's min/max span main's: like random or UUID keys), so
  ``unique`` against main must read main's key columns.

Rows: the audit of each batch (fresh measurement: ``use_cache=False``) in one warm Spark session,
one scan of main's key columns (the baseline), and the extra cost of the unprunable keys (spread
audit - end-of-range audit) / that scan, target ≤ 2. Notes: the against-main look-up alone by
each plan (the former ``distinct`` + semi-join, the join without the broadcast, the broadcast
join), and the whole audit with the former plan.

Runs only when named in ``--only``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from bench import data
from bench.common import Bench, Row, fmt_rows, fmt_s, log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


SCENARIOS = ("spread",)
BATCH_SCALE = 0.1  # the 600k-row batch
KEY_COLUMNS = ("l_orderkey", "l_linenumber")
_DATA: dict[float, dict[str, Any]] = {}  # per scale: data directory, row count, the two batches


def _tag(scale: float) -> str:
    return f"{scale:g}".replace(".", "_")


def scales(b: Bench) -> list[float]:
    return [float(s) for s in str(b.args.scale_spread).split(",") if s.strip()]


def checks_yaml(ns: str, scale_list: Sequence[float]) -> str:
    out = ""
    for s in scale_list:
        t = _tag(s)
        out += data.lineitem_checks(ns, f"li_sp{t}", f"part_sp{t}")
    return out


def _max_key(path: Path) -> int:
    md = pq.ParquetFile(path).metadata
    col = md.schema.to_arrow_schema().get_field_index("l_orderkey")
    return max(int(md.row_group(i).column(col).statistics.max) for i in range(md.num_row_groups))


def prepare(b: Bench) -> None:

    _DATA.clear()
    src = data.generate(b.data_dir, BATCH_SCALE, ("lineitem",)) / "lineitem.parquet"
    for s in scales(b):
        t0 = time.perf_counter()
        d = data.generate(b.data_dir, s)
        main = d / "lineitem.parquet"
        top = _max_key(main)
        _DATA[s] = {
            "dir": d,
            "rows": data.rows(main),
            "end": data.shifted_batch(b.data_dir, src, 900 + int(s * 10)),  # keys above main's
            "spread": data.spread_batch(b.data_dir, src, top),
            "max_key": top,
        }
        log(
            f"spread data SF{s:g} ready in {time.perf_counter() - t0:.1f} s: main {_DATA[s]['rows']} rows "
            f"(keys 1..{top}), batches of {data.rows(src)} rows"
        )


def setup(b: Bench) -> None:
    for s, d in _DATA.items():
        t = _tag(s)
        b.load_main(f"li_sp{t}", d["dir"] / "lineitem.parquet")
        b.load_main(f"part_sp{t}", d["dir"] / "part.parquet", ("p_partkey",))
        b.ingest(f"li_sp{t}", d["end"], "end")
        b.ingest(f"li_sp{t}", d["spread"], "spread")


def old_keys_in_main(
    batch: DataFrame, main: DataFrame, columns: Sequence[str], lo: Any, hi: Any, batch_rows: int | None
) -> tuple[int, DataFrame]:
    """The former plan of ``unique`` against main: ``distinct`` of main's keys in range, then a semi-join."""
    from pyspark.sql import functions as F

    from wap_core.checks.keys import key_range_filter

    keys = [F.col(c) for c in columns]
    main_keys = key_range_filter(main.select(*keys), columns[0], lo, hi)
    clash = batch.select(*keys).join(main_keys.distinct(), on=list(columns), how="left_semi")
    return clash.count(), clash.distinct()


def two_column_keys_in_main(
    batch: DataFrame, main: DataFrame, columns: Sequence[str], lo: Any, hi: Any, batch_rows: int | None
) -> tuple[int, DataFrame]:
    """The plan before the first-column probe: main's WHOLE keys streamed past the batch's first column."""
    from pyspark.sql import functions as F

    from wap_core.checks.keys import key_range_filter

    keys = [F.col(c) for c in columns]
    main_keys = key_range_filter(main.select(*keys), columns[0], lo, hi)
    first = F.broadcast(batch.select(keys[0]).where(keys[0].isNotNull()))
    candidates = main_keys.join(first, on=[columns[0]], how="left_semi").dropDuplicates(list(columns))
    got = candidates.collect()
    if not got:
        return 0, candidates
    known = F.broadcast(batch.sparkSession.createDataFrame(got, schema=candidates.schema))
    return batch.select(*keys).join(known, on=list(columns), how="left_semi").count(), known


def scenario_spread(b: Bench) -> None:
    for s, d in _DATA.items():
        _one_scale(b, s, d)


def _one_scale(b: Bench, s: float, d: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    from wap_core.checks import keys as keys_mod
    from wap_core.checks import unique as unique_mod
    from wap_core.lake import catalog as cat
    from wap_core.workflow.audit import batch_frame, run_audit

    sf = f"SF{s:g}"
    tid = b.tid(f"li_sp{_tag(s)}")
    tbl = b.lh.table(tid)
    lin = {br: cat.lineage(tbl, br) for br in ("end", "spread")}
    fork = lin["spread"].fork
    assert fork is not None

    def audit(branch: str, tid: Any = tid) -> Any:
        return run_audit(b.lh, tid, branch, use_cache=False)

    def key_scan(tid: Any = tid, fork: Any = fork) -> None:
        b.lh.read_snapshot(tid, fork).select(*KEY_COLUMNS).write.format("noop").mode("overwrite").save()

    log(f"scenario spread {sf}: audits of the end-of-range and the spread batch, one key-column scan")
    for fn in (lambda: audit("end"), lambda: audit("spread"), key_scan):  # warm-up
        fn()
    t: dict[str, list[float]] = {"end": [], "spread": [], "scan": []}
    jobs: dict[str, int] = {}
    results: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("end", lambda: audit("end")),
        ("spread", lambda: audit("spread")),
        ("scan", key_scan),
    ]
    for i in range(b.repeat):
        for name, fn in steps if i % 2 == 0 else steps[::-1]:
            seconds, n_jobs, out = b.jobs_of(fn)
            t[name].append(seconds)
            jobs[name] = n_jobs
            if out is not None:
                results[name] = out
    end, spread, scan = (statistics.median(t[k]) for k in ("end", "spread", "scan"))
    extra = spread - end
    same = all(r.passed for r in results.values())
    uniq = {k: next(c.observed for c in r.checks if c.type == "unique") for k, r in results.items()}

    # what each plan of the against-main look-up costs alone (spread batch, same session)
    batch = batch_frame(b.lh.spark, b.lh.spark_name(tid), lin["spread"])
    main = b.lh.read_snapshot(tid, fork)
    lo, hi = batch.agg(F.min("l_orderkey"), F.max("l_orderkey")).collect()[0]
    rows = data.rows(d["spread"])
    plans: dict[str, Callable[[], Any]] = {
        "former (distinct of main's keys + semi-join)": lambda: old_keys_in_main(
            batch, main, KEY_COLUMNS, lo, hi, rows
        )[0],
        "fallback (distinct batch keys with counts, no broadcast)": lambda: keys_mod.keys_in_main(
            batch, main, KEY_COLUMNS, lo, hi, None
        )[0],
        "previous (main's whole keys streamed past the batch's broadcast first key column)": lambda: (
            two_column_keys_in_main(batch, main, KEY_COLUMNS, lo, hi, rows)[0]
        ),
        "now (main's first key column alone streamed past the batch's broadcast first key column)": lambda: (
            keys_mod.keys_in_main(batch, main, KEY_COLUMNS, lo, hi, rows)[0]
        ),
    }
    plan_t: dict[str, float] = {}
    plan_n: dict[str, Any] = {}
    for label, fn in plans.items():
        fn()
        ts = []
        for _ in range(min(b.repeat, 3)):
            t0 = time.perf_counter()
            plan_n[label] = fn()
            ts.append(time.perf_counter() - t0)
        plan_t[label] = statistics.median(ts)

    # the whole audit with the former plan (monkeypatched for this measurement only)
    saved = unique_mod.__dict__["keys_in_main"]
    setattr(unique_mod, "keys_in_main", old_keys_in_main)  # noqa: B010
    try:
        audit("spread")
        old_spread = statistics.median(
            [b.jobs_of(lambda: audit("spread"))[0] for _ in range(min(b.repeat, 3))]
        )
    finally:
        setattr(unique_mod, "keys_in_main", saved)  # noqa: B010

    sizes = f"main {fmt_rows(d['rows'])} ({sf}), batch {fmt_rows(rows)}"
    load = os.getloadavg()
    b.rows += [
        Row(
            f"spread a audit: spread-key batch vs end-of-range batch, {sf} main",
            sizes,
            spread,
            end,
            spread / end,
            "—",
            same,
            [
                f"spread {sf}: audit of the spread-key batch {fmt_s(spread)} ({jobs['spread']} Spark jobs), "
                f"end-of-range batch {fmt_s(end)} ({jobs['end']} jobs), one scan of main's key columns "
                f"{fmt_s(scan)}; unique observed: spread {uniq.get('spread')}, end {uniq.get('end')}; "
                f"load average during the scenario {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
                "(2 cores shared with other work)",
                f"spread {sf}: the whole audit of the spread batch with the former plan {fmt_s(old_spread)} "
                f"(extra over the end-of-range audit {fmt_s(old_spread - end)} = "
                f"{(old_spread - end) / scan:.2f} key-column scans)",
                f"spread {sf}: the against-main look-up alone (rows in main found): "
                + "; ".join(f"{k}: {fmt_s(v)} ({plan_n[k]})" for k, v in plan_t.items()),
            ],
        ),
        Row(
            f"spread b extra cost of unprunable keys / one scan of main's key columns, {sf}",
            sizes,
            extra,
            scan,
            extra / scan,
            "≤ 2",
            extra / scan <= 2.0 and same,
            [],
        ),
    ]
