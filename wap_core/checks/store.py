"""Stored state of the check engine, in the catalog's database beside the journal.

- :class:`ResultCache`: measurements per (table, batch head, fingerprint) in ``wap_check_results``.
- :func:`save_batch_metrics` / :class:`StoredHistory`: each audited batch's metrics in
  ``wap_batch_metrics``, and the history of published batches (ancestors of the batch's fork)
  the ``anomaly`` check compares with; main's stored profile the ``drift`` check compares with.
Nothing here scans a table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Column, Engine, String, and_, insert, select, update
from sqlalchemy import Table as SqlTable
from sqlalchemy.exc import IntegrityError

from wap_core.checks.base import Measurement
from wap_core.lake.profile import TableProfile
from wap_core.store.journal import utcnow
from wap_core.store.profiles import batch_profiles_table
from wap_core.store.schema import cache_table, snapshot_column
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

ANCESTORS_SEARCHED = 5000  # newest snapshots of main searched for published batches
_CHUNK = 400

# A check's measurement of one batch head, keyed by its fingerprint (type, measured arguments and the
# snapshots it reads, never its thresholds): a re-audit measures only what changed.
check_results_table = cache_table(
    "wap_check_results",
    [
        snapshot_column("head_snapshot_id", primary_key=True),
        Column("fingerprint", String(64), primary_key=True),
    ],
    "measurement",
)

# The metrics of each audited batch (row count, and what the suite's anomaly checks measure), keyed
# by its head snapshot: the history the anomaly check compares a new batch with.
batch_metrics_table = cache_table(
    "wap_batch_metrics",
    [snapshot_column("head_snapshot_id", primary_key=True)],
    "metrics",
    before_at=(snapshot_column("fork_snapshot_id"),),
)


class ResultCache:
    """Measurements of the checks of one batch head (snapshots are immutable: entries never go stale)."""

    def __init__(self, engine: Engine, table: str, head_snapshot_id: int) -> None:
        self.engine = engine
        self.table = table
        self.head = head_snapshot_id

    def load(self, fingerprints: Sequence[str]) -> dict[str, Measurement]:
        """The stored measurements of this head among ``fingerprints``, by fingerprint."""
        t = check_results_table.c
        q = select(t.fingerprint, t.measurement).where(
            and_(
                t.table_name == self.table,
                t.head_snapshot_id == self.head,
                t.fingerprint.in_(list(fingerprints)),
            )
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return {r[0]: json.loads(r[1]) for r in rows}

    def save(self, measurements: Mapping[str, Measurement]) -> None:
        """Store measurements of this head; one already stored (a concurrent audit) is kept."""
        for fp, m in measurements.items():
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        insert(check_results_table).values(
                            table_name=self.table,
                            head_snapshot_id=self.head,
                            fingerprint=fp,
                            at=utcnow(),
                            measurement=json.dumps(m, default=str),
                        )
                    )
            except IntegrityError:
                log.debug("measurement %s of %s@%s already stored", fp, self.table, self.head)


def save_batch_metrics(
    engine: Engine, table: str, head: int, fork: int | None, metrics: Mapping[str, float]
) -> None:
    """Record (or complete) the metrics of the batch whose head is ``head``."""
    t = batch_metrics_table.c
    with engine.begin() as conn:
        row = conn.execute(
            select(t.metrics).where(and_(t.table_name == table, t.head_snapshot_id == head))
        ).first()
        if row is None:
            try:
                conn.execute(
                    insert(batch_metrics_table).values(
                        table_name=table,
                        head_snapshot_id=head,
                        fork_snapshot_id=fork,
                        at=utcnow(),
                        metrics=json.dumps(dict(metrics)),
                    )
                )
                return
            except IntegrityError:
                row = conn.execute(
                    select(t.metrics).where(and_(t.table_name == table, t.head_snapshot_id == head))
                ).first()
        merged = {**json.loads(row[0] if row is not None else "{}"), **metrics}
        conn.execute(
            update(batch_metrics_table)
            .where(and_(t.table_name == table, t.head_snapshot_id == head))
            .values(metrics=json.dumps(merged), at=utcnow())
        )


def _json_by_head(
    engine: Engine, cache: SqlTable, payload: str, table: str, heads: Sequence[int]
) -> dict[int, JsonObject]:
    """The JSON ``payload`` column of ``cache``'s rows of ``table`` by head snapshot id, for the given heads."""
    t = cache.c
    out: dict[int, JsonObject] = {}
    with engine.connect() as conn:
        for i in range(0, len(heads), _CHUNK):
            chunk = list(heads[i : i + _CHUNK])
            for head, text in conn.execute(
                select(t.head_snapshot_id, t[payload]).where(
                    and_(t.table_name == table, t.head_snapshot_id.in_(chunk))
                )
            ).all():
                out[int(str(head))] = json.loads(str(text))
    return out


def load_batch_metrics(engine: Engine, table: str, heads: Sequence[int]) -> dict[int, JsonObject]:
    """The stored batch metrics of ``table`` by head snapshot id, for the given heads."""
    return _json_by_head(engine, batch_metrics_table, "metrics", table, heads)


def _profile_metrics(engine: Engine, table: str, heads: Sequence[int]) -> dict[int, JsonObject]:
    """Metrics of batches whose profile a review computed (``wap_batch_profiles``), as metric keys."""
    out: dict[int, JsonObject] = {}
    for head, prof in _json_by_head(engine, batch_profiles_table, "profile", table, heads).items():
        stored = TableProfile.from_json(prof)
        m: JsonObject = {"row_count": stored.rows}
        for col, c in stored.columns.items():
            m[f"null_pct({col})"] = c.null_pct
            m[f"distinct({col})"] = c.distinct
            m[f"mean({col})"] = c.mean
        out[head] = m
    return out


def _ancestor_ids(tbl: Table, snapshot_id: int | None, limit: int) -> Iterator[int]:
    n = 0
    while snapshot_id is not None and n < limit:
        snap = tbl.metadata.snapshot_by_id(snapshot_id)
        if snap is None:
            return
        yield snap.snapshot_id
        snapshot_id = snap.parent_snapshot_id
        n += 1


class StoredHistory:
    """What the history-aware checks of one batch compare with: the published batches before its fork
    (each batch's head is an ancestor of main at the fork) and main's stored profile at the fork."""

    def __init__(
        self,
        engine: Engine,
        table: str,
        tbl: Table,
        fork: int | None,
        main_profile: Callable[[], TableProfile | None],
    ) -> None:
        self.engine = engine
        self.table = table
        self.fork = fork
        self._tbl = tbl
        self._main_profile = main_profile
        self._published: list[tuple[int, JsonObject]] | None = None

    def published(self) -> list[tuple[int, JsonObject]]:
        """(head snapshot, metrics) of the published batches, newest first."""
        if self._published is None:
            ids = list(_ancestor_ids(self._tbl, self.fork, ANCESTORS_SEARCHED))
            stored = load_batch_metrics(self.engine, self.table, ids)
            profiled = _profile_metrics(self.engine, self.table, [i for i in ids if i not in stored])
            self._published = [
                (i, {**profiled.get(i, {}), **stored.get(i, {})}) for i in ids if i in stored or i in profiled
            ]
        return self._published

    def metric_history(self, key: str, window: int) -> list[float]:
        """The last ``window`` published values of metric ``key``, newest first."""
        out: list[float] = []
        for _, metrics in self.published():
            v = metrics.get(key)
            if v is not None:
                out.append(float(v))
                if len(out) >= window:
                    break
        return out

    def main_profile(self) -> TableProfile | None:
        """Main's stored profile at the fork (cached or merged from stored profiles; never a scan)."""
        return self._main_profile() if self.fork is not None else None
