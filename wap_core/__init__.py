"""wap_core: Write-Audit-Publish on Apache Iceberg branches, with Spark and PyIceberg.

Packages by concern, each importing only the layers below it (tests/test_architecture.py):
``cli`` and ``pipeline`` on top; ``workflow`` (the actions that move refs); ``analysis`` (read-only
looks at a branch); ``security.access`` and ``notify``; the :class:`Lakehouse` factory; ``lake``
(Iceberg metadata, Spark), ``store`` (the journal's database), ``checks`` (the check registry) and
``security`` (SQL guard, ingest paths); and the base modules (settings, identifiers, states,
exceptions). This root re-exports what a user starts from: ``Lakehouse``, ``Settings``, ``TableId``.
"""

from wap_core.config import Settings, install_log_masking
from wap_core.identifiers import TableId
from wap_core.lakehouse import Lakehouse

install_log_masking()  # catalog passwords never reach a log line of this process

__all__ = ["Lakehouse", "Settings", "TableId"]
__version__ = "0.9.0"  # the package version (pyproject.toml reads it from here)
