"""What the bench's scenario modules and :mod:`bench.run` share: the log, the result row, timing and
formatting helpers, and the measured steps (load main, ingest a batch, publish, audit and diff).

Its own module so that the scenario modules (``crowd``, ``s3``, ``spread``, ``xl``) import it, never
:mod:`bench.run`, which imports them: the import picture of ``bench/`` has no circle.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.data import KEY

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
NS = "tpch"
CATALOG = "bench"
TARGET_MB = 16  # Iceberg target data file size for main: several files per table, each a tight key range


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Row:
    scenario: str
    sizes: str
    ours: float | None  # median seconds
    baseline: float | None  # median seconds of what it is compared with
    ratio: float | None
    target: str
    passed: bool
    notes: list[str] = field(default_factory=list)
    value: str | None = None  # shown instead of fmt_s(ours): counts, "p50 · p95" (scenario crowd)


def cpu_times() -> list[int]:
    """The machine's aggregate CPU counters (/proc/stat: user ... steal), empty where unreadable."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return []


def steal_share(before: list[int], after: list[int]) -> float:
    """The share of CPU time stolen by the hypervisor between two :func:`cpu_times` readings."""
    if len(before) < 8 or len(after) < 8:
        return 0.0
    delta = [b - a for a, b in zip(before, after, strict=True)]
    return delta[7] / sum(delta) if sum(delta) else 0.0


def median_of(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float], Any]:
    times: list[float] = []
    value: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, value


def fmt_rows(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    if n >= 1_000:
        return f"{n / 1e3:.1f}k"
    return str(n)


def fmt_s(v: float | None) -> str:
    return "—" if v is None else (f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s")


# --------------------------------------------------------------------------- shared set-up steps (bench/s3.py too)


def load_main(lh: Any, tid: Any, path: Path, sort_by: tuple[str, ...] = KEY) -> None:
    """Create ``tid`` in ``lh`` with ``path`` as main, sorted by key: per-file key bounds stay tight."""
    t0 = time.perf_counter()
    df = lh.spark.read.parquet(str(path))
    if sort_by:
        df = df.sortWithinPartitions(*sort_by)
    (
        df.writeTo(lh.spark_name(tid))
        .using("iceberg")
        .tableProperty("write.target-file-size-bytes", str(TARGET_MB * 1024 * 1024))
        .create()
    )
    snap = lh.table(tid).current_snapshot()
    log(
        f"{tid}: main written in {time.perf_counter() - t0:.1f} s "
        f"({snap.summary.additional_properties.get('total-records')} rows, "
        f"{snap.summary.additional_properties.get('total-data-files')} files)"
    )


def ingest_batch(lh: Any, tid: Any, path: Path, branch: str) -> Any:
    """Ingest ``path`` into ``branch`` of ``tid`` (audited by the ingest); SystemExit if the audit fails."""
    from wap_core.security.paths import SourcePolicy
    from wap_core.workflow.ingest import ingest

    res = ingest(lh, tid, [str(path)], branch=branch, source_policy=SourcePolicy.ANY)
    if not res.audit.passed:
        bad = [f"{c.name}: {c.message}" for c in res.audit.checks if c.status.blocks_publish]
        raise SystemExit(f"set-up batch for {tid}/{branch} failed its audit: {bad}")
    return res


def data_files_on_disk(lh: Any, tid: Any) -> set[str]:
    """Every file under the table's ``data`` folder on a local warehouse."""
    root = Path(lh.table(tid).metadata.location.removeprefix("file:")) / "data"
    return {str(p) for p in root.rglob("*") if p.is_file()}


@dataclass(frozen=True)
class BeforePublish:
    """A staged branch before its publish: its head, its data files (``inspect.files``), the table's snapshots."""

    branch: str
    head: int
    files: frozenset[str]
    snapshots: frozenset[int]


def before_publish(lh: Any, tid: Any, branch: str) -> BeforePublish:
    tbl = lh.table(tid)
    head = tbl.metadata.refs[branch].snapshot_id
    files = frozenset(tbl.inspect.files(snapshot_id=head)["file_path"].to_pylist())
    return BeforePublish(branch, head, files, frozenset(s.snapshot_id for s in tbl.metadata.snapshots))


def fast_forwarded(lh: Any, tid: Any, before: BeforePublish, res: Any) -> bool:
    """``res`` published the branch as a fast-forward: main is the branch's head, the branch is gone, no new
    snapshot, and main's data files are the branch's."""
    after = lh.table(tid)
    return bool(
        res.outcome == "published"
        and after.current_snapshot().snapshot_id == before.head
        and before.branch not in after.metadata.refs
        and {s.snapshot_id for s in after.metadata.snapshots} == before.snapshots
        and set(after.inspect.files()["file_path"].to_pylist()) == before.files
    )


@dataclass(frozen=True)
class Published:
    """A publish measured: its seconds (the call only), whether it was a clean fast-forward
    (``fast_forwarded``), its outcome, and the table's data files before and after it."""

    seconds: float
    fast_forward: bool
    outcome: Any
    files_before: set[str]
    files_after: set[str]


def measured_publish(lh: Any, tid: Any, branch: str, data_files: Callable[[], set[str]]) -> Published:
    from wap_core.workflow.publish import publish

    state = before_publish(lh, tid, branch)
    files_before = data_files()
    t0 = time.perf_counter()
    res = publish(lh, tid, branch)
    seconds = time.perf_counter() - t0
    files_after = data_files()
    return Published(seconds, fast_forwarded(lh, tid, state, res), res.outcome, files_before, files_after)


def audit_and_diff(lh: Any, tid: Any, branch: str) -> Any:
    """The review of a batch: its audit (returned), then its diff against main."""
    from wap_core.analysis.diff import compute_diff
    from wap_core.workflow.audit import run_audit

    audit = run_audit(lh, tid, branch)
    compute_diff(lh, tid, branch)
    return audit


class Bench(Protocol):
    """The bench (:class:`bench.run.Bench`) as the scenario modules use it. A protocol, not an import of
    :mod:`bench.run` (which imports the scenario modules): no circle, not even a type-only one."""

    args: argparse.Namespace
    lh: Any  # the bench's wap_core Lakehouse
    rows: list[Row]
    work: Path
    data_dir: Path
    repeat: int
    batch_index: int
    spark_master: str | None
    # set by the scenario modules themselves (their sizes and folders)
    k: Any
    xl_rows: Any
    xs_rows: Any
    xs_dir: Path
    xl_dir: Path
    xl_batch_dir: Path
    metadata_rows: Any

    def tid(self, name: str) -> Any: ...
    def load_main(self, name: str, path: Path, sort_by: tuple[str, ...] = KEY) -> None: ...
    def ingest(self, name: str, path: Path, branch: str) -> Any: ...
    def subprocess_json(self, args: list[str]) -> dict[str, Any]: ...
    def jobs_of(self, fn: Callable[[], Any]) -> tuple[float, int, Any]: ...
