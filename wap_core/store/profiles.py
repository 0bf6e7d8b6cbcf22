"""The profile cache, beside the journal in the catalog's database.

Column profiles of immutable snapshots (``wap_profiles``: main at a snapshot) and of published-or-
reviewed batches (``wap_batch_profiles``: the rows a pure-append branch added in (fork, head]), so a
diff reuses main's profile instead of scanning main again, and merges a batch into it. The tables
are defined here (on :mod:`wap_core.store.schema`'s metadata, versioned by the Alembic migrations); only
this module reads and writes profiles (the anomaly history reads ``wap_batch_profiles`` in
:mod:`wap_core.checks.store`). Entries never go stale: snapshots are immutable, first writer wins.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import Engine, Table, and_, insert, select
from sqlalchemy.exc import IntegrityError

from wap_core.lake.profile import TableProfile
from wap_core.store.journal import utcnow
from wap_core.store.schema import cache_table, snapshot_column

log = logging.getLogger(__name__)

profiles_table = cache_table("wap_profiles", [snapshot_column("snapshot_id", primary_key=True)], "profile")
batch_profiles_table = cache_table(
    "wap_batch_profiles",
    [snapshot_column("head_snapshot_id", primary_key=True)],
    "profile",
    before_at=(snapshot_column("fork_snapshot_id", nullable=False),),
)


class ProfileStore:
    """Read and write the cached profiles (``Lakehouse.profiles``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load_profile(self, table: str, snapshot_id: int) -> TableProfile | None:
        """The stored profile of ``table`` at a main snapshot, or None."""
        q = select(profiles_table.c.profile).where(
            and_(profiles_table.c.table_name == table, profiles_table.c.snapshot_id == snapshot_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return TableProfile.from_json(json.loads(row[0])) if row is not None else None

    def save_profile(self, table: str, snapshot_id: int, profile: TableProfile) -> None:
        """Cache a column profile of an immutable snapshot (first writer wins)."""
        self._insert_first(
            profiles_table, f"profile of {table} at {snapshot_id}", table, profile, snapshot_id=snapshot_id
        )

    def save_batch_profile(self, table: str, fork: int, head: int, profile: TableProfile) -> None:
        """Cache the profile of the rows a pure-append branch added in (fork, head] (first writer wins)."""
        self._insert_first(
            batch_profiles_table,
            f"batch profile of {table} at {head}",
            table,
            profile,
            head_snapshot_id=head,
            fork_snapshot_id=fork,
        )

    def _insert_first(
        self, target: Table, what: str, table: str, profile: TableProfile, **snapshots: int
    ) -> None:
        """Insert one profile row; a row already there (another writer was first) is kept as it is."""
        values = {"table_name": table, "at": utcnow(), "profile": json.dumps(profile.to_json(), default=str)}
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(target).values(**values, **snapshots))
        except IntegrityError:
            log.debug("%s already cached", what)

    def load_batch_profile(self, table: str, head: int) -> tuple[int, TableProfile] | None:
        """The stored batch profile of a branch head and its fork snapshot, or None."""
        q = select(batch_profiles_table.c.fork_snapshot_id, batch_profiles_table.c.profile).where(
            and_(batch_profiles_table.c.table_name == table, batch_profiles_table.c.head_snapshot_id == head)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return (int(row[0]), TableProfile.from_json(json.loads(row[1]))) if row is not None else None
