"""S3 and S3-compatible storage (``WAP_S3_*``, an ``s3a://`` warehouse or ingest root): Spark's S3A and
PyIceberg's PyArrow FileIO, through :mod:`wap_core.lake.s3`."""

from __future__ import annotations

from wap_core.config import Settings
from wap_core.lake import s3


class S3Store:
    """The store of :mod:`wap_core.lake.s3`."""

    name = "s3"
    remote = True

    def recognises(self, settings: Settings) -> bool:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.recognises`."""
        return s3.uses_s3(settings)

    def spark_jars(self, settings: Settings) -> list[str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.spark_jars`."""
        return s3.s3a_jars(settings)

    def spark_conf(self, settings: Settings, *, per_bucket_only: bool = False) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.spark_conf`."""
        return s3.spark_conf(settings, per_bucket_only=per_bucket_only)

    def file_io_properties(self, settings: Settings) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.file_io_properties`."""
        return s3.pyiceberg_properties(settings)


STORE = S3Store()
