"""The Lakehouse: one factory tying settings, the PyIceberg catalog, the journal and Spark.

Metadata work (catalog, journal) never starts Spark; Spark starts lazily on the
first data operation. Reads are pure: reading a table or the journal never writes, removes a
branch or notifies. Recovery of crashed actions is a step of its own
(:func:`wap_core.workflow.reconcile.reconcile`), run at explicit entry points: the CLI's start, the
console's start and background tick, and inside every ref-moving action before its move.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from wap_core.config import Settings
from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.lake.batch import snapshot_frame
from wap_core.lake.spark import get_spark
from wap_core.store.journal import Journal
from wap_core.store.profiles import ProfileStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Lakehouse:
    """Entry point of the core: ``Lakehouse.from_env()`` or ``Lakehouse(Settings(...))``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    def from_env(cls, **overrides: object) -> Lakehouse:
        """The lakehouse of :meth:`Settings.from_env` with ``overrides``."""
        return cls(Settings.from_env(**overrides))  # type: ignore[arg-type]

    # ----- resources -------------------------------------------------------
    @cached_property
    def catalog(self) -> Catalog:
        """The PyIceberg catalog, SQL or REST (opened once)."""
        return cat.open_catalog(self.settings)

    @cached_property
    def journal(self) -> Journal:
        """The journal in the catalog's database."""
        return Journal(cat.journal_engine(self.settings, self.catalog))  # REST catalog: WAP_JOURNAL_URI

    @cached_property
    def profiles(self) -> ProfileStore:
        """The profile cache, in the journal's database (its tables exist once the journal is open)."""
        return ProfileStore(self.journal.engine)

    @property
    def spark(self) -> SparkSession:
        """The Spark session (started on first use)."""

        _ = self.catalog  # creates the home directory and the V1 catalog tables before Spark connects
        return get_spark(self.settings)

    @property
    def user(self) -> str:
        """The environment's user (``WAP_USER`` / the OS user): who acts is a session's identity
        (:class:`wap_core.session.Session`), never the settings'."""
        return self.settings.user

    # ----- metadata --------------------------------------------------------
    def table(self, table: TableId) -> Table:
        """A fresh load of the table's metadata (never cached: main may have moved); a pure read."""
        return cat.load_table(self.catalog, table)

    def tables(self) -> list[TableId]:
        """Every table of the catalog, sorted."""
        return cat.list_table_ids(self.catalog)

    # ----- data (Spark) ----------------------------------------------------
    def spark_name(self, table: TableId, branch: str | None = None) -> str:
        """The table's unquoted name for Spark's DataFrame APIs (at a branch if given)."""
        return table.spark_name(self.settings.catalog_name, branch)

    def sql_name(self, table: TableId, branch: str | None = None) -> str:
        """The table's backtick-quoted name for Spark SQL (at a branch if given)."""
        return table.sql(self.settings.catalog_name, branch)

    def read_snapshot(self, table: TableId, snapshot_id: int) -> DataFrame:
        """The table's data at a snapshot (Spark)."""
        return snapshot_frame(self.spark, self.spark_name(table), snapshot_id)

    def read_main(self, table: TableId, snapshot_id: int | None = None) -> DataFrame | None:
        """Main of ``table`` at ``snapshot_id`` (default: its current head); None when main is empty."""
        if snapshot_id is None:
            snapshot_id = cat.ref_snapshot_id(self.table(table), MAIN)
        if snapshot_id is None:
            return None
        return self.read_snapshot(table, snapshot_id)
