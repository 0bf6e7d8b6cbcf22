"""Backends as registries (issue 26 item 6): each catalog type is one module behind
:class:`~wap_core.lake.backends.base.CatalogType`, registered by one line in :data:`CATALOG_TYPES`.

Object stores likewise: one module each behind :class:`~wap_core.lake.backends.base.ObjectStore`, one line
in :data:`STORES`, picked by :func:`store_of`.

Object stores likewise: one module each behind :class:`~wap_core.lake.backends.base.ObjectStore`, one line
in :data:`STORES`, picked by :func:`store_of`.

Callers ask :func:`catalog_type_of` and call through the contract; no module outside this package names a
catalog type (tests/test_backends.py). The names also live in :data:`wap_core.config.CATALOG_TYPE_NAMES`,
because ``config`` is a base module that validates ``WAP_CATALOG_TYPE`` and cannot import ``lake``; this
package refuses to load when the two differ.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from wap_core.config import CATALOG_TYPE_NAMES, Settings
from wap_core.lake.backends import file, rest, s3, sql
from wap_core.lake.backends.base import CatalogType, ObjectStore

CATALOG_TYPES: dict[str, CatalogType] = {
    "rest": rest.CATALOG_TYPE,  # first: a rest+ catalog URI makes a catalog REST whatever WAP_CATALOG_TYPE says
    "sql": sql.CATALOG_TYPE,
}

if set(CATALOG_TYPES) != set(CATALOG_TYPE_NAMES):  # pragma: no cover - a registration half done
    raise RuntimeError(
        f"catalog types {sorted(CATALOG_TYPES)} != config.CATALOG_TYPE_NAMES {CATALOG_TYPE_NAMES}"
    )

STORES: dict[str, ObjectStore] = {
    "s3": s3.STORE,
    "file": file.STORE,  # last: the local warehouse is what no other store recognises
}


def catalog_type_of(settings: Settings) -> CatalogType:
    """The catalog type ``settings`` name (the first registered one that recognises them)."""
    for kind in CATALOG_TYPES.values():
        if kind.recognises(settings):
            return kind
    return CATALOG_TYPES[settings.catalog_type]  # pragma: no cover - config validated the name


def catalog_type_of_catalog(catalog: Catalog) -> CatalogType | None:
    """The registered catalog type an open PyIceberg catalog belongs to, or None."""
    return next((k for k in CATALOG_TYPES.values() if isinstance(catalog, k.pyiceberg_class)), None)


def store_of(settings: Settings) -> ObjectStore:
    """The object store ``settings`` point at (the first registered one that recognises them)."""
    return next(store for store in STORES.values() if store.recognises(settings))


__all__ = [
    "CATALOG_TYPES",
    "STORES",
    "CatalogType",
    "ObjectStore",
    "catalog_type_of",
    "catalog_type_of_catalog",
    "store_of",
]
