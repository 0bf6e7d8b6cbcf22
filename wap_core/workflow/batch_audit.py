"""Audit a batch that spans tables: each table's suite on its own branch, the batch's verdict the worst.

A check that reads another table of the batch (``references``) reads it at its head in the batch
(:mod:`wap_core.analysis.batch_reads`), so the airports added with the flights count. Each table's audit
stores which heads of the other tables its checks read; :func:`audit_batch` re-runs only the audits that
are stale:

- a table whose head moved since its latest audit (a new commit, a rebase), or never audited;
- a table whose checks read another table of the batch at a head that is no longer that table's head
  (the airports got a new commit: the flights' ``references`` is judged again), or that joined or left
  the batch since (the set of other tables it reads inside the batch changed).

The other tables keep their latest audit: nothing is measured again. A re-run audit itself re-measures
only the checks whose inputs changed (the result cache is keyed by each check's reads, see
:mod:`wap_core.checks.store`): the flights' ``not_null`` comes from the cache, its ``references`` is
measured against the airports' new head.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wap_core.analysis.batch_reads import suite_reads
from wap_core.checks import Suite, load_checks, suite_for
from wap_core.identifiers import TableId
from wap_core.lake import jobs
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import CheckStatus, overall_status
from wap_core.workflow.audit import AuditResult, audit_branch
from wap_core.workflow.batch import Batch, load_batch

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchAuditResult:
    """A batch's audit: its status (the worst of its tables' latest audits), each table's latest audit
    (re-run now or not), sorted by table, and the tables whose audit ran now."""

    batch: str
    status: CheckStatus
    tables: tuple[AuditResult, ...]
    reaudited: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """True when every table's latest audit passed or only warned."""
        return self.status.ok

    def table(self, name: TableId | str) -> AuditResult | None:
        """The latest audit of the batch's table ``name``, or None."""
        return next((a for a in self.tables if a.table == str(name)), None)


_parsed_suites: dict[str, tuple[tuple[int, int, int], dict[str, Suite]]] = {}
_parsed_lock = threading.Lock()


def _suites(path: Path) -> dict[str, Suite]:
    """The checks file's suites by table, parsed again only when the file changed (mtime, size, inode: as
    the access file is, :func:`~wap_core.security.access.load_access`): every batch publish reads them."""
    try:
        st = path.stat()
    except OSError:
        return load_checks(path)  # a missing file: no suites; an unreadable one: its error
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _parsed_lock:
        hit = _parsed_suites.get(str(path))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    suites = load_checks(path)
    with _parsed_lock:
        _parsed_suites[str(path)] = (stamp, suites)
    return suites


def stale_tables(lh: Lakehouse, batch: Batch) -> tuple[TableId, ...]:
    """The tables of ``batch`` whose latest audit no longer stands (see the module's docstring), in order."""
    members = {str(t) for t in batch.table_ids}
    heads = batch.heads
    suites = _suites(lh.settings.checks_file)
    out: list[TableId] = []
    for bt in batch.tables:
        name = str(bt.table)
        stored = lh.journal.latest_audit(name, batch.name)
        if stored is None or stored.snapshot_id != bt.head:
            out.append(bt.table)
            continue
        suite = suites.get(name)
        reads = suite_reads(suite.checks if suite is not None else ()) & members - {name}
        expected = {t: heads[t] for t in sorted(reads)}
        if AuditResult.from_stored(stored).batch_reads != expected:
            out.append(bt.table)
    return tuple(out)


def reaudit_stale(
    lh: Lakehouse, batch: Batch | str, user: str, *, reading: TableId | None = None
) -> tuple[str, ...]:
    """Audit every stale table of ``batch`` (not guarded: callers authorize); the tables audited now.

    ``reading``: only the stale tables whose checks read that table (ingest, after it added ``reading``).
    """
    b = load_batch(lh, batch) if isinstance(batch, str) else batch
    todo = stale_tables(lh, b)
    if reading is not None:
        todo = tuple(
            t
            for t in todo
            if t != reading and str(reading) in suite_reads(suite_for(lh.settings.checks_file, t).checks)
        )
    for table in todo:
        log.info("batch %s: auditing %s (its audit is stale)", b.name, table)
        audit_branch(lh, table, b.name, user=user)
    return tuple(str(t) for t in todo)


def audit_batch(session: Session | Lakehouse, name: str, *, user: str | None = None) -> BatchAuditResult:
    """(Re-)audit the open batch ``name`` as ``user`` (AUDIT on each of its tables): only the stale audits run.

    Its Spark jobs run in ``user``'s job group and FAIR pool, as :func:`~wap_core.workflow.audit.run_audit`'s.
    """
    s = session_of(session, user)
    lh, who = s.lakehouse, s.user
    b = load_batch(lh, name)
    for table in b.table_ids:
        s.authorize(Permission.AUDIT, table=table, branch=b.name)
    with jobs.user_jobs(lh.spark, who, f"the audit of batch {b.name}"):
        reaudited = reaudit_stale(lh, b, who)
    return batch_audit_state(lh, b, reaudited)


def batch_audit_state(lh: Lakehouse, batch: Batch | str, reaudited: tuple[str, ...] = ()) -> BatchAuditResult:
    """The batch's latest audits as they stand (no audit runs; a table never audited counts as failed)."""
    b = load_batch(lh, batch) if isinstance(batch, str) else batch
    tables: list[AuditResult] = []
    statuses: list[CheckStatus] = []
    for table in b.table_ids:
        stored = lh.journal.latest_audit(str(table), b.name)
        if stored is None:
            statuses.append(CheckStatus.FAILED)
            continue
        tables.append(AuditResult.from_stored(stored))
        statuses.append(stored.status)
    return BatchAuditResult(b.name, overall_status(statuses), tuple(tables), reaudited)
