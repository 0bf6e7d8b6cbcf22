"""What a check type's ``parse`` receives: the arguments of one check in the checks file (with its line).

Check modules depend on this module only; :mod:`wap_core.checks.parsing` reads the whole file through
the registry, above them. ``Args`` itself is defined in :mod:`wap_core.checks.base` (``CheckSpec.parse``
names it; defining it there keeps the import picture free of a circle) and re-exported here.
"""

from __future__ import annotations

from wap_core.checks.base import Args

__all__ = ["Args"]
