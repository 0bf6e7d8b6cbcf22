"""wap_core: Write-Audit-Publish on Apache Iceberg branches, with Spark and PyIceberg."""

from wap_core.config import Settings
from wap_core.identifiers import TableId
from wap_core.lakehouse import Lakehouse

__all__ = ["Lakehouse", "Settings", "TableId"]
__version__ = "0.1.0"
