"""Before/after A/B of one tree's publish and audit: ``cd <tree> && python /path/to/bench/ab.py publish|audit``.

Run it from the root of each tree to compare (two ``git worktree``s on the same venv, alternating runs):
it imports ``wap_core`` from the current directory (the flat layout before the redesign of issue 21, or
the packages after), builds a fresh SQLite-catalog lakehouse in a temp dir, ingests 15 batches and times
``publish`` (a fast-forward, 5-row batches) or a fresh ``run_audit`` (no cache, 20,000-row batches) of
each; prints one JSON line with the median of the last 12 (the first three warm the JVM).
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())


def _api() -> tuple[Any, Any, Any]:
    """(ingest, publish, run_audit) of the tree in the current directory, whichever layout it has."""
    try:
        ing, pub, aud = (
            importlib.import_module(f"wap_core.workflow.{m}") for m in ("ingest", "publish", "audit")
        )
    except ImportError:  # the flat layout before issue 21's redesign
        ing, pub, aud = (importlib.import_module(f"wap_core.{m}") for m in ("ingest", "publish", "audit"))
    return ing.ingest, pub.publish, aud.run_audit


def main(what: str) -> dict[str, Any]:
    """Time ``what`` ("publish" or "audit") on 15 fresh batches; the median of the last 12 in ms."""
    from wap_core import Lakehouse, Settings, TableId

    ingest, publish, run_audit = _api()
    home = Path(tempfile.mkdtemp(prefix="wap-ab-"))
    (home / "landing").mkdir()
    os.environ["WAP_SHUFFLE_PARTITIONS"] = "2"
    lh = Lakehouse(Settings.from_env(home=home, user="bench", catalog_name="ab"))
    table = TableId("demo", "t")
    rows = 5 if what == "publish" else 20_000

    def source(i: int) -> str:
        p = home / "landing" / f"b{i}.csv"
        p.write_text("id,name\n" + "".join(f"{i * 100_000 + j},n{j}\n" for j in range(rows)))
        return str(p)

    ingest(lh, table, [source(0)], create=True)
    times = []
    for i in range(1, 16):
        branch = ingest(lh, table, [source(i)]).branch
        t0 = time.perf_counter()
        if what == "publish":
            publish(lh, table, branch)
        else:
            run_audit(lh, table, branch, use_cache=False)
        times.append(time.perf_counter() - t0)
    return {"what": what, "median_ms": round(statistics.median(times[3:]) * 1000, 1)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "publish")))
