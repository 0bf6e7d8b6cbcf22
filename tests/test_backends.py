"""Backends as registries (issue 26 item 6): every registered catalog type implements the contract, the
registry and config agree on the names, settings pick the right one, and no module outside
``wap_core/lake/backends/`` names a catalog type by string or flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from wap_core.config import CATALOG_TYPE_NAMES, Settings
from wap_core.lake.backends import CATALOG_TYPES, STORES, catalog_type_of, store_of
from wap_core.lake.backends.base import CatalogType, ObjectStore

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ROOT / "wap_core" / "lake" / "backends"


def _settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(env={"WAP_HOME": str(tmp_path), **env})


def test_the_registry_and_config_name_the_same_catalog_types() -> None:
    assert set(CATALOG_TYPES) == set(CATALOG_TYPE_NAMES) == {"sql", "rest"}


@pytest.mark.parametrize("name", sorted(CATALOG_TYPES))
def test_each_catalog_type_implements_the_contract(name: str) -> None:
    kind = CATALOG_TYPES[name]
    assert kind.name == name
    members = {m for m in vars(CatalogType) if not m.startswith("_")} | set(CatalogType.__annotations__)
    for member in members:
        assert hasattr(kind, member), f"catalog type {name!r} lacks {member}"
        if callable(getattr(CatalogType, member, None)):
            assert callable(getattr(kind, member)), f"{name}.{member} is not callable"
    assert isinstance(kind.atomic_multi_table, bool) and isinstance(kind.needs_jdbc_jars, bool)
    assert issubclass(kind.pyiceberg_class, Catalog)
    # one module each: the object lives in lake/backends/<name>.py
    assert type(kind).__module__ == f"wap_core.lake.backends.{name}"


def _members(contract: type) -> set[str]:
    return {m for m in vars(contract) if not m.startswith("_")} | set(contract.__annotations__)


@pytest.mark.parametrize("name", sorted(STORES))
def test_each_object_store_implements_the_contract(name: str, tmp_path: Path) -> None:
    store = STORES[name]
    assert store.name == name and isinstance(store.remote, bool)
    for member in _members(ObjectStore):
        assert hasattr(store, member), f"store {name!r} lacks {member}"
        if callable(getattr(ObjectStore, member, None)):
            assert callable(getattr(store, member)), f"{name}.{member} is not callable"
    assert type(store).__module__ == f"wap_core.lake.backends.{name}"


def test_settings_pick_their_store(tmp_path: Path) -> None:
    local = _settings(tmp_path)
    assert store_of(local).name == "file" and not store_of(local).remote
    assert store_of(local).spark_jars(local) == [] and store_of(local).file_io_properties(local) == {}
    on_s3 = _settings(
        tmp_path,
        WAP_WAREHOUSE="s3a://lake/warehouse",
        WAP_S3_ENDPOINT="http://127.0.0.1:8333",
        WAP_S3_ACCESS_KEY="k",
        WAP_S3_SECRET_KEY="s",
    )
    store = store_of(on_s3)
    assert store.name == "s3" and store.remote
    assert store.file_io_properties(on_s3)["s3.endpoint"] == "http://127.0.0.1:8333"
    assert store.spark_conf(on_s3)["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"


def test_settings_pick_their_catalog_type(tmp_path: Path) -> None:
    assert catalog_type_of(_settings(tmp_path)).name == "sql"
    rest = _settings(tmp_path, WAP_CATALOG_URI="rest+http://127.0.0.1:8181/cat")
    assert catalog_type_of(rest).name == "rest"
    assert catalog_type_of(rest).failure_endpoint(rest) == "http://127.0.0.1:8181/cat"
    assert catalog_type_of(_settings(tmp_path, WAP_CATALOG_TYPE="rest")).name == "rest"
    sql = _settings(tmp_path)
    assert catalog_type_of(sql).failure_endpoint(sql) is None
    assert CATALOG_TYPES["sql"].atomic_multi_table and not CATALOG_TYPES["rest"].atomic_multi_table


# How a module would branch on a catalog type by name or flag instead of calling through the registry.
_NAMING = re.compile(
    r"\bis_rest\b|catalog_type\s*[!=]=|[=!]=\s*['\"](?:sql|rest)['\"]|['\"]rest\+['\"]|\bREST_PREFIX\b"
)


# ... or on an object store (lake/s3.py is the S3 store's own client, which backends/s3.py wraps).
_STORE_FLAG = re.compile(r"\buses_s3\b")


def test_no_module_outside_the_backends_names_a_catalog_type_or_a_store() -> None:
    offenders = []
    for path in sorted((ROOT / "wap_core").rglob("*.py")):
        if BACKENDS in path.parents:
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            store_flag = _STORE_FLAG.search(code) and path.name != "s3.py"
            if _NAMING.search(code) or store_flag:
                offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert offenders == [], "branch through wap_core.lake.backends instead:\n" + "\n".join(offenders)
