"""The Iceberg REST catalog at ``WAP_CATALOG_URI=rest+http(s)://...`` (PyIceberg's RestCatalog)."""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import ValidationError
from wap_core.lake.backends.sql import REST_PREFIX


def rest_uri(settings: Settings) -> str:
    """The REST catalog's HTTP(S) URI (``catalog_uri`` without its ``rest+`` prefix)."""
    uri = (settings.catalog_uri or "").removeprefix(REST_PREFIX)
    if not uri.startswith(("http://", "https://")):
        raise ValidationError(
            "a REST catalog needs WAP_CATALOG_URI=rest+http(s)://host:port[/prefix] "
            f"(got {mask_secrets(settings.catalog_uri or 'nothing')})"
        )
    return uri


class RestCatalogType:
    """``WAP_CATALOG_TYPE=rest`` or ``WAP_CATALOG_URI=rest+http(s)://...``."""

    name = "rest"
    atomic_multi_table = False  # the spec's multi-table commit: atomic against failures, not crashes
    pyiceberg_class: type[Catalog] = RestCatalog
    needs_jdbc_jars = False

    def recognises(self, settings: Settings) -> bool:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.recognises`."""
        return settings.catalog_type == self.name or (settings.catalog_uri or "").startswith(REST_PREFIX)

    def catalog_key(self, settings: Settings) -> str:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.catalog_key`."""
        return rest_uri(settings)

    def spark_conf(self, settings: Settings) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.spark_conf`."""
        p = f"spark.sql.catalog.{settings.catalog_name}"
        conf = {
            p: "org.apache.iceberg.spark.SparkCatalog",
            f"{p}.type": "rest",
            f"{p}.uri": rest_uri(settings),
            f"{p}.cache-enabled": "false",
        }
        if settings.warehouse:
            conf[f"{p}.warehouse"] = settings.warehouse
        if "io-impl" not in dict(settings.catalog_properties):
            # S3FileIO needs AWS SDK v2 (absent): S3A through Hadoop instead
            conf[f"{p}.io-impl"] = "org.apache.iceberg.hadoop.HadoopFileIO"
        return conf

    def open(self, settings: Settings, file_io: dict[str, str]) -> Catalog:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.CatalogType.open`."""
        settings.home.mkdir(parents=True, exist_ok=True)  # the journal's database lives there
        extra = {"warehouse": settings.warehouse} if settings.warehouse else {}
        return RestCatalog(settings.catalog_name, **file_io, **extra, uri=rest_uri(settings))

    def failure_endpoint(self, settings: Settings) -> str | None:
        """The URI as given (``catalog_uri`` without its ``rest+`` prefix, unchecked)."""
        return (settings.catalog_uri or "").removeprefix(REST_PREFIX)


CATALOG_TYPE = RestCatalogType()
