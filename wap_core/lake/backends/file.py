"""The local warehouse: a folder (``$WAP_HOME/warehouse`` or ``WAP_WAREHOUSE``), read by both engines as is."""

from __future__ import annotations

from wap_core.config import Settings


class FileStore:
    """Any warehouse no other store recognises: files on this machine, nothing to configure."""

    name = "file"
    remote = False

    def recognises(self, settings: Settings) -> bool:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.recognises`."""
        return True

    def spark_jars(self, settings: Settings) -> list[str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.spark_jars`."""
        return []

    def spark_conf(self, settings: Settings, *, per_bucket_only: bool = False) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.spark_conf`."""
        return {}

    def file_io_properties(self, settings: Settings) -> dict[str, str]:
        """This backend's answer to :meth:`~wap_core.lake.backends.base.ObjectStore.file_io_properties`."""
        return {}


STORE = FileStore()
