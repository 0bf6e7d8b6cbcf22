"""Settings: one frozen object built from environment variables and an optional TOML file.

Precedence: explicit keyword arguments > environment variables > TOML file > defaults.
The TOML file is ``$WAP_CONFIG`` or ``$WAP_HOME/wap.toml`` when present; keys are the
field names below (``catalog_uri = "..."``).
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from wap_core.exceptions import ValidationError
from wap_core.identifiers import validate_identifier

_ENV = {
    "home": "WAP_HOME",
    "checks_path": "WAP_CHECKS",
    "user": "WAP_USER",
    "catalog_name": "WAP_CATALOG_NAME",
    "catalog_uri": "WAP_CATALOG_URI",
    "catalog_jdbc_uri": "WAP_CATALOG_JDBC_URI",
    "warehouse": "WAP_WAREHOUSE",
    "spark_master": "WAP_SPARK_MASTER",
    "spark_driver_memory": "WAP_SPARK_DRIVER_MEMORY",
    "shuffle_partitions": "WAP_SHUFFLE_PARTITIONS",
    "jdbc_jars": "WAP_JDBC_JARS",
    "sample_rows": "WAP_SAMPLE_ROWS",
    "spark_conf": "WAP_SPARK_CONF",
    "catalog_properties": "WAP_CATALOG_PROPERTIES",
    "branch_ttl": "WAP_BRANCH_TTL",
    "snapshot_retention": "WAP_SNAPSHOT_RETENTION",
}


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # pragma: no cover - no passwd entry
        return "unknown"


@dataclass(frozen=True)
class Settings:
    """Where the lakehouse lives and how to reach it. Build with :meth:`from_env`."""

    home: Path = Path("lakehouse")
    checks_path: Path | None = None
    user: str = field(default_factory=_os_user)
    catalog_name: str = "wap"
    catalog_uri: str | None = None  # SQLAlchemy URL; default sqlite:///$WAP_HOME/catalog.db
    catalog_jdbc_uri: str | None = None  # JDBC URL for Spark; derived from catalog_uri when unset
    warehouse: str | None = None  # default file://$WAP_HOME/warehouse
    spark_master: str = "local[2]"
    spark_driver_memory: str = "2g"
    shuffle_partitions: int = 4
    jdbc_jars: tuple[str, ...] = ()
    sample_rows: int = 5
    # extra Spark conf for a cluster ("spark.executor.memory=1g spark.driver.host=10.0.0.5"); applied last
    spark_conf: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # extra Iceberg catalog properties for BOTH PyIceberg and Spark's catalog (object store: s3.endpoint=...)
    catalog_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    branch_ttl: str = "14d"  # gc discards open branches older than this (per table: property wap.branch-ttl)
    snapshot_retention: str = "30d"  # gc expires older snapshots (per table: history.expire.max-snapshot-age-ms)

    def __post_init__(self) -> None:
        from wap_core.durations import parse_duration

        validate_identifier(self.catalog_name, "catalog name")
        if self.shuffle_partitions < 1:
            raise ValidationError("shuffle_partitions must be >= 1")
        parse_duration(self.branch_ttl, "branch_ttl")
        parse_duration(self.snapshot_retention, "snapshot_retention")

    # ----- derived values -------------------------------------------------
    @property
    def checks_file(self) -> Path:
        return self.checks_path if self.checks_path is not None else self.home / "checks.yml"

    @property
    def sqlalchemy_uri(self) -> str:
        if self.catalog_uri:
            return self.catalog_uri
        return f"sqlite:///{(self.home / 'catalog.db').resolve()}"

    @property
    def jdbc_uri(self) -> str:
        if self.catalog_jdbc_uri:
            return self.catalog_jdbc_uri
        return sqlalchemy_to_jdbc(self.sqlalchemy_uri)

    @property
    def warehouse_uri(self) -> str:
        if self.warehouse:
            return self.warehouse
        return (self.home / "warehouse").resolve().as_uri()

    @property
    def is_sqlite(self) -> bool:
        return self.sqlalchemy_uri.startswith("sqlite")

    # ----- construction ----------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if env is None else env
        home = Path(overrides.get("home") or env.get("WAP_HOME") or "lakehouse")
        values: dict[str, Any] = {}
        toml_path = Path(env["WAP_CONFIG"]) if env.get("WAP_CONFIG") else home / "wap.toml"
        if toml_path.is_file():
            try:
                values.update(tomllib.loads(toml_path.read_text()))
            except tomllib.TOMLDecodeError as exc:
                raise ValidationError(f"{toml_path}: invalid TOML: {exc}") from exc
            unknown = set(values) - {f.name for f in fields(cls)}
            if unknown:
                raise ValidationError(f"{toml_path}: unknown setting(s): {', '.join(sorted(unknown))}")
        for name, var in _ENV.items():
            if env.get(var):
                values[name] = env[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["home"] = home
        return cls(**_coerce(values))

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **_coerce(changes))


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key in ("home", "checks_path"):
        if out.get(key) is not None:
            out[key] = Path(out[key])
    for key in ("shuffle_partitions", "sample_rows"):
        if key in out and out[key] is not None:
            try:
                out[key] = int(out[key])
            except (TypeError, ValueError) as exc:
                raise ValidationError(f"setting {key} must be an integer, got {out[key]!r}") from exc
    if "spark_conf" in out and out["spark_conf"] is not None:
        out["spark_conf"] = parse_spark_conf(out["spark_conf"])
    if "catalog_properties" in out and out["catalog_properties"] is not None:
        out["catalog_properties"] = parse_catalog_properties(out["catalog_properties"])
    if isinstance(out.get("jdbc_jars"), str):
        out["jdbc_jars"] = tuple(p for p in out["jdbc_jars"].split(os.pathsep) if p)
    elif out.get("jdbc_jars") is not None:
        out["jdbc_jars"] = tuple(out["jdbc_jars"])
    return out


def _pairs(value: Any, what: str, env: str) -> list[tuple[str, str]]:
    """``"k=v k2=v2"`` (whitespace-separated, shell-style quotes for values with spaces: ``'k=a b'``, as in
    the environment variable), a mapping (a TOML table) or pairs."""
    if isinstance(value, str):
        pairs: list[tuple[str, str]] = []
        try:
            items = shlex.split(value)
        except ValueError as exc:  # unbalanced quotes; the text is not echoed: it may hold a secret
            raise ValidationError(f"{what}: {exc} ({env} takes whitespace-separated key=value pairs)") from exc
        for n, item in enumerate(items, 1):
            key, sep, val = item.partition("=")
            if not sep:  # the item is not echoed: it may be a secret
                raise ValidationError(f"{what}: item {n} is not key=value ({env} takes whitespace-separated key=value pairs)")
            pairs.append((key, val))
        return pairs
    if isinstance(value, Mapping):
        return [(str(k), str(v)) for k, v in value.items()]
    return [(str(k), str(v)) for k, v in value]


def parse_spark_conf(value: Any) -> tuple[tuple[str, str], ...]:
    """Extra Spark conf (WAP_SPARK_CONF or a ``[spark_conf]`` table). Keys must be ``spark.*`` property names."""
    pairs = _pairs(value, "spark_conf", "WAP_SPARK_CONF")
    for key, _ in pairs:
        if not _SPARK_KEY.fullmatch(key):
            raise ValidationError(f"spark_conf: {key!r} is not a Spark property name (spark.*)")
    return tuple(pairs)


def parse_catalog_properties(value: Any) -> tuple[tuple[str, str], ...]:
    """Extra Iceberg catalog properties (WAP_CATALOG_PROPERTIES or a ``[catalog_properties]`` table)."""
    pairs = _pairs(value, "catalog_properties", "WAP_CATALOG_PROPERTIES")
    for key, _ in pairs:
        if not _PROPERTY_KEY.fullmatch(key) or key.startswith("spark.") or key in _OWN_CATALOG_KEYS or key.startswith("jdbc."):
            raise ValidationError(f"catalog_properties: {key!r} is not an Iceberg catalog property wap_core passes on "
                                  f"(uri, warehouse, type and jdbc.* come from the other settings)")
    return tuple(pairs)


_SPARK_KEY = re.compile(r"spark\.[A-Za-z0-9_.\-]+")
_PROPERTY_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
_OWN_CATALOG_KEYS = frozenset({"uri", "warehouse", "type", "catalog-impl", "cache-enabled"})


def sqlalchemy_to_jdbc(uri: str) -> str:
    """Translate a SQLAlchemy URL to the JDBC URL Spark's Iceberg JDBC catalog needs."""
    if uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + uri[len("sqlite:///") :]
    if uri.startswith("postgresql"):
        # postgresql[+driver]://user:pass@host:port/db -> jdbc:postgresql://host:port/db?user=..&password=..
        from sqlalchemy.engine import make_url

        url = make_url(uri)
        params = []
        if url.username:
            params.append(f"user={url.username}")
        if url.password:
            params.append(f"password={url.password}")
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        query = ("?" + "&".join(params)) if params else ""
        return f"jdbc:postgresql://{host}{port}/{url.database}{query}"
    raise ValidationError(f"cannot derive a JDBC URL from catalog URI {uri!r}: set WAP_CATALOG_JDBC_URI")
