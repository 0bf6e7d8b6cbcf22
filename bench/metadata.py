"""Metadata-only scenarios, run in a fresh interpreter that never starts Spark.

``python -m bench.metadata branches HOME REPEAT [TABLES]``: scenario 5 (50 tables, or
TABLES, x 4 open branches, set up with PyIceberg only; list_branches / table_infos timed).
``python -m bench.metadata diff HOME CATALOG TABLE BRANCH REPEAT``: scenario 7
(``metadata_diff`` of an existing branch).

The last line printed is a JSON object with the timings and the no-Spark evidence.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import median_of  # no pyspark import: this process must not start Spark
from wap_core import Lakehouse, Settings, TableId
from wap_core.lake.spark import spark_running

TABLES = 50
BRANCHES = 4


def _no_spark() -> dict[str, bool]:
    return {"spark_running": spark_running(), "pyspark_imported": "pyspark" in sys.modules}


def branches(home: Path, repeat: int, tables: int = TABLES) -> dict[str, Any]:
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    lh = Lakehouse(Settings(home=home, checks_path=home / "checks.yml", user="bench", catalog_name="meta"))
    t0 = time.perf_counter()
    lh.catalog.create_namespace("m")
    tiny = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", "c"])})
    for i in range(tables):
        tbl = lh.catalog.create_table(("m", f"t{i:03d}"), schema=tiny.schema)
        tbl.append(tiny)
        ms = tbl.manage_snapshots()
        for b in range(BRANCHES):
            ms = ms.create_branch(tbl.current_snapshot().snapshot_id, f"b{b}")
        ms.commit()
        for b in range(BRANCHES):
            tbl.append(tiny, branch=f"b{b}")
    setup = time.perf_counter() - t0

    from wap_core.workflow.status import list_branches, table_infos

    before = _no_spark()
    lb_median, lb, found = median_of(lambda: list_branches(lh), repeat)
    ti_median, ti, infos = median_of(lambda: table_infos(lh), repeat)
    return {
        "setup_seconds": setup,
        "tables": len(infos),
        "branches": len(found),
        "branches_with_rows": sum(1 for b in found if b.rows_added == 3),
        "list_branches": lb,
        "table_infos": ti,
        "list_branches_median": lb_median,
        "table_infos_median": ti_median,
        "before": before,
        "after": _no_spark(),
    }


def diff(home: Path, catalog: str, table: str, branch: str, repeat: int) -> dict[str, Any]:
    from wap_core.lake.catalog import metadata_diff

    lh = Lakehouse(Settings(home=home, checks_path=home / "checks.yml", user="bench", catalog_name=catalog))
    tid = TableId.parse(table)
    median, times, md = median_of(lambda: metadata_diff(lh.table(tid), tid, branch), repeat)
    return {
        "times": times,
        "median": median,
        "first": times[0],
        "result": {
            k: getattr(md, k)
            for k in (
                "rows_added",
                "rows_deleted",
                "files_added",
                "files_deleted",
                "bytes_added",
                "bytes_deleted",
                "pure_append",
                "snapshots",
            )
        },
        "after": _no_spark(),
    }


def main(argv: list[str]) -> None:
    if argv[0] == "branches":
        out = branches(Path(argv[1]), int(argv[2]), int(argv[3]) if len(argv) > 3 else TABLES)
    elif argv[0] == "diff":
        out = diff(Path(argv[1]), argv[2], argv[3], argv[4], int(argv[5]))
    else:
        raise SystemExit(f"unknown command {argv[0]}")
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
