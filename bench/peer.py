"""The peer, lake-sift, run in its own interpreter (so its peak memory is its own).

``python -m bench.peer diff URI WAREHOUSE CATALOG TABLE FORK_SNAPSHOT BRANCH KEY``:
lake-sift's keyed diff of main at the fork (left) vs the branch head (right), as
``lake-sift "iceberg:CATALOG/TABLE@FORK" "iceberg:CATALOG/TABLE@BRANCH" -k KEY``
computes it (its library API, so interpreter start-up is not counted against it).
``python -m bench.peer preview ...``: the same operands through ``--preview``.

Prints one JSON line: seconds, summary counts, peak RSS of this process.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    mode, uri, warehouse, catalog, table, fork, branch, key = argv
    from lakesift import diff, preview
    from lakesift.sources.iceberg import IcebergSource
    from pyiceberg.catalog.sql import SqlCatalog

    keys = key.split(",")
    t0 = time.perf_counter()
    tbl = SqlCatalog(catalog, uri=uri, warehouse=warehouse).load_table(table)
    left, right = IcebergSource(tbl, snapshot_id=int(fork)), IcebergSource(tbl, ref=branch)
    out: dict[str, Any]
    if mode == "diff":
        with diff(left, right, key=keys) as result:
            summary = result.summary()
            changed_by_column = result.changed_by_column
        out = {"summary": summary, "changed_by_column": changed_by_column}
    elif mode == "preview":
        p = preview(left, right, key=keys)
        out = {"pure_append": p.is_pure_append(), "rows_to_scan": p.rows_to_scan}
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
