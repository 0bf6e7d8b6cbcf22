"""The contract every catalog type implements (issue 26 item 6): the few things the rest of wap_core asks of it.

A catalog type is one module under ``wap_core.lake.backends`` holding one object that satisfies
:class:`CatalogType`, registered by one line in :data:`wap_core.lake.backends.CATALOG_TYPES`.
"""

from __future__ import annotations

from typing import Protocol

from pyiceberg.catalog import Catalog

from wap_core.config import Settings


class CatalogType(Protocol):
    """An Iceberg catalog type (``WAP_CATALOG_TYPE``)."""

    name: str
    """Its ``WAP_CATALOG_TYPE`` value (one of :data:`wap_core.config.CATALOG_TYPE_NAMES`)."""
    atomic_multi_table: bool
    """True when a multi-table commit is crash-atomic (the database's own transaction)."""
    needs_jdbc_jars: bool
    """True when Spark needs the JDBC driver jars to reach it."""
    pyiceberg_class: type[Catalog]
    """The PyIceberg catalog class :meth:`open` returns (how an open catalog's type is told)."""

    def recognises(self, settings: Settings) -> bool:
        """True when ``settings`` name this catalog type."""

    def catalog_key(self, settings: Settings) -> str:
        """What the Spark catalog name is bound to in this process (a URI)."""

    def spark_conf(self, settings: Settings) -> dict[str, str]:
        """Spark conf entries for the Iceberg catalog ``settings.catalog_name`` (before WAP_CATALOG_PROPERTIES)."""

    def open(self, settings: Settings, file_io: dict[str, str]) -> Catalog:
        """The PyIceberg catalog, with the object store's FileIO properties ``file_io``."""

    def failure_endpoint(self, settings: Settings) -> str | None:
        """The endpoint an error line names when this catalog fails, or None when its failures are the store's."""


class ObjectStore(Protocol):
    """Where the warehouse's files live (a local folder, S3...)."""

    name: str
    remote: bool
    """True for a store reached over the network: its failures get an error line of their own
    (:mod:`wap_core.lake.errors`), its URLs can be ingest sources (:mod:`wap_core.security.paths`), and the
    Spark session must start with its jars."""

    def recognises(self, settings: Settings) -> bool:
        """True when the warehouse, an ingest root or the settings point at this store."""

    def spark_jars(self, settings: Settings) -> list[str]:
        """The jars Spark needs to reach it."""

    def spark_conf(self, settings: Settings, *, per_bucket_only: bool = False) -> dict[str, str]:
        """Its Spark conf entries (only those a running session can take on, with ``per_bucket_only``)."""

    def file_io_properties(self, settings: Settings) -> dict[str, str]:
        """PyIceberg's FileIO properties for it (before WAP_CATALOG_PROPERTIES)."""
