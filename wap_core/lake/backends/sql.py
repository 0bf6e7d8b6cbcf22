"""The SQL catalog: Iceberg's JDBC catalog on SQLite or PostgreSQL (PyIceberg's SqlCatalog on the same database)."""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import Engine, create_engine, event, inspect, text

from wap_core.config import Settings
from wap_core.lake import s3

REST_PREFIX = "rest+"  # a catalog_uri of this form is the REST catalog's, whatever WAP_CATALOG_TYPE says

# Iceberg's JDBC catalog (schema V1) DDL. Created here, before PyIceberg would create its
# V0 tables: when Spark's JDBC catalog has to migrate a V0 table to V1 itself it leaves a
# read statement open on a pooled connection, and every later Spark commit after another
# writer then fails with SQLITE_BUSY_SNAPSHOT.
_V1_DDL = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables(catalog_name VARCHAR(255) NOT NULL,table_namespace VARCHAR(255) NOT NULL,"
    "table_name VARCHAR(255) NOT NULL,metadata_location VARCHAR(1000),previous_metadata_location VARCHAR(1000),"
    "iceberg_type VARCHAR(5),PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties(catalog_name VARCHAR(255) NOT NULL,namespace VARCHAR(255) NOT NULL,"
    "property_key VARCHAR(255),property_value VARCHAR(1000),PRIMARY KEY (catalog_name, namespace, property_key))",
)


def ensure_v1_catalog_tables(uri: str) -> None:
    """Create (or upgrade) the catalog tables in the JDBC V1 layout both Spark and PyIceberg accept."""
    engine = create_engine(uri)
    try:
        with engine.begin() as conn:
            if uri.startswith("sqlite"):
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            for ddl in _V1_DDL:
                conn.execute(text(ddl))
            cols = {c["name"].lower() for c in inspect(conn).get_columns("iceberg_tables")}
            if "iceberg_type" not in cols:
                conn.execute(text("ALTER TABLE iceberg_tables ADD COLUMN iceberg_type VARCHAR(5)"))
    finally:
        engine.dispose()


def sqlite_engine_pragmas(engine: Engine) -> None:
    """busy_timeout and WAL on every new connection of a SQLite engine."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    engine.dispose()  # connections made during init lacked the pragmas


class SqlCatalogType:
    """``WAP_CATALOG_TYPE=sql``: the JDBC catalog over ``WAP_CATALOG_URI``'s database."""

    name = "sql"
    atomic_multi_table = True
    pyiceberg_class: type[Catalog] = SqlCatalog
    needs_jdbc_jars = True

    def recognises(self, settings: Settings) -> bool:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.recognises`."""
        return settings.catalog_type == self.name and not (settings.catalog_uri or "").startswith(REST_PREFIX)

    def catalog_key(self, settings: Settings) -> str:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.catalog_key`."""
        return settings.jdbc_uri

    def spark_conf(self, settings: Settings) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.spark_conf`."""
        p = f"spark.sql.catalog.{settings.catalog_name}"
        own = dict(settings.catalog_properties)
        conf = {
            p: "org.apache.iceberg.spark.SparkCatalog",
            f"{p}.type": "jdbc",
            f"{p}.uri": settings.jdbc_uri,
            f"{p}.warehouse": settings.warehouse_uri,
            f"{p}.jdbc.schema-version": "V1",
            f"{p}.cache-enabled": "false",
            # wap_core creates the V1 catalog tables itself (ensure_v1_catalog_tables): Iceberg's own
            # check leaves a metadata ResultSet open, whose stale SQLite read snapshot breaks later commits.
            f"{p}.jdbc.init-catalog-tables": "false",
        }
        if s3.is_s3_url(settings.warehouse_uri) and "io-impl" not in own:
            conf[f"{p}.io-impl"] = (
                "org.apache.iceberg.hadoop.HadoopFileIO"  # S3A (hadoop-aws), one client for all
            )
        if settings.is_sqlite:
            conf[f"{p}.jdbc.busy_timeout"] = "30000"
            conf[f"{p}.jdbc.journal_mode"] = "WAL"
        return conf

    def open(self, settings: Settings, file_io: dict[str, str]) -> Catalog:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.open`."""
        if settings.is_sqlite:
            settings.home.mkdir(parents=True, exist_ok=True)
        (settings.home / "warehouse").mkdir(
            parents=True, exist_ok=True
        ) if settings.warehouse is None else None
        ensure_v1_catalog_tables(settings.sqlalchemy_uri)
        # the object store's s3.* FileIO properties (from WAP_S3_* and WAP_CATALOG_PROPERTIES)
        catalog = SqlCatalog(
            settings.catalog_name, **file_io, uri=settings.sqlalchemy_uri, warehouse=settings.warehouse_uri
        )
        if settings.is_sqlite:
            sqlite_engine_pragmas(catalog.engine)
        return catalog

    def failure_endpoint(self, settings: Settings) -> str | None:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.failure_endpoint`."""
        return None


CATALOG_TYPE = SqlCatalogType()
