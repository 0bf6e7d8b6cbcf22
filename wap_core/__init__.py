"""wap_core: Write-Audit-Publish on Apache Iceberg branches, with Spark and PyIceberg."""

from wap_core.config import Settings, install_log_masking
from wap_core.identifiers import TableId
from wap_core.lakehouse import Lakehouse

install_log_masking()  # catalog passwords never reach a log line of this process

__all__ = ["Lakehouse", "Settings", "TableId"]
__version__ = "0.9.0"  # the package version (pyproject.toml reads it from here)
