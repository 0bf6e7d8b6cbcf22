"""Settings: one frozen object built from environment variables and an optional TOML file.

Precedence: explicit keyword arguments > environment variables > TOML file > defaults.
The TOML file is ``$WAP_CONFIG`` or ``$WAP_HOME/wap.toml`` when present; keys are the
field names below (``catalog_uri = "..."``).

Each setting is declared once, as its field of :class:`Settings`: :func:`setting` attaches its environment
variable, how its text (environment, TOML) becomes its type and the rule its value must follow. Reading the
environment and wap.toml, validation, :data:`ENV_VARS` (the console's cache key) and the README's table
(tests/test_docs_links.py) all derive from those declarations: adding a setting is one field (and its README
row).
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import shlex
import threading
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wap_core.durations import parse_duration
from wap_core.exceptions import AccessFileError, NotifyFileError, ValidationError
from wap_core.identifiers import validate_identifier
from wap_core.values import JsonObject

CONFIG_ENV = "WAP_CONFIG"  # the TOML file (default $WAP_HOME/wap.toml): where settings come from, not one

#: How a setting's text (an environment variable, a TOML value) becomes its type: ``parse(name, value)``.
Parse = Callable[[str, Any], Any]
#: The rule a setting's value must follow: ``check(label, value)`` raises ValidationError; ``label`` is
#: ``name (WAP_NAME)``.
Check = Callable[[str, Any], None]


@dataclass(frozen=True)
class SettingSpec:
    """What a field of :class:`Settings` declares besides its type and default."""

    env: str | None  # its environment variable; None: never read from the environment
    parse: Parse | None = None  # text -> the field's type; None: text as it is
    check: Check | None = None  # the rule its value must follow
    from_file: bool = True  # whether wap.toml may set it


_SPEC = "wap_setting"


def setting(
    env: str | None,
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    parse: Parse | None = None,
    check: Check | None = None,
    from_file: bool = True,
    secret: bool = False,
) -> Any:
    """A field of :class:`Settings` declared once: its environment variable, default, parser and rule
    (``secret``: left out of the repr)."""
    meta = {_SPEC: SettingSpec(env, parse, check, from_file)}
    if factory is not None:
        return field(default_factory=factory, repr=not secret, metadata=meta)
    return field(default=default, repr=not secret, metadata=meta)


def spec_of(f: Field[Any]) -> SettingSpec:
    """The declaration of a field of :class:`Settings`."""
    spec = f.metadata.get(_SPEC)
    if not isinstance(spec, SettingSpec):  # pragma: no cover - every field is declared with setting()
        raise TypeError(f"Settings.{f.name} is not declared with setting()")
    return spec


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no passwd entry
        return "unknown"


# ----- parsers: a setting's text (environment, TOML) -> its type ------------------------------------------
def _path(_key: str, value: Any) -> Path:
    return Path(value)


def _integer(key: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"setting {key} must be an integer, got {value!r}") from exc


def _seconds(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"setting {key} must be a number of seconds, got {value!r}") from exc


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, str):
        return bool(value)
    flag = value.strip().lower()
    if flag not in ("true", "false", "1", "0", "yes", "no"):
        raise ValidationError(f"setting {key} must be true or false, got {value!r}")
    return flag in ("true", "1", "yes")


def _on_unless_off(_key: str, value: Any) -> bool:
    """On unless the text says off (``0``, ``false``, ``no``, ``off``): WAP_SPARK_EAGER's rule."""
    if not isinstance(value, str):
        return bool(value)
    return value.strip().lower() not in ("0", "false", "no", "off")


def _str_list(key: str, value: Any) -> tuple[str, ...]:
    items = value.split(os.pathsep) if isinstance(value, str) else value
    return tuple(str(p) for p in items if p)


def _root_list(key: str, value: Any) -> tuple[Path | str, ...]:
    items = split_ingest_roots(value) if isinstance(value, str) else value
    return _ingest_roots(items)


def _spark_conf(_key: str, value: Any) -> tuple[tuple[str, str], ...]:
    return parse_spark_conf(value)


def _catalog_properties(_key: str, value: Any) -> tuple[tuple[str, str], ...]:
    return parse_catalog_properties(value)


# ----- rules: what a value must be ----------------------------------------------------------------------
def _at_least(low: float, message: str) -> Check:
    """``value >= low`` (``message`` may name ``{label}``)."""

    def check(label: str, value: Any) -> None:
        if not value >= low:
            raise ValidationError(message.format(label=label))

    return check


def _positive(label: str, value: Any) -> None:
    if not value > 0:
        raise ValidationError(f"{label} must be > 0 seconds")


def _between(low: int, high: int) -> Check:
    def check(label: str, value: Any) -> None:
        if not low <= value <= high:
            raise ValidationError(f"{label} must be between {low} and {high}")

    return check


# The catalog types' names (WAP_CATALOG_TYPE's values): each is one module registered in
# wap_core.lake.backends.CATALOG_TYPES, which checks at import that its keys are these. They live here, low,
# because config validates the setting and is a base module that cannot import lake/ (docs/architecture.md).
CATALOG_TYPE_NAMES: tuple[str, ...] = ("sql", "rest")


def _one_of(*choices: str) -> Check:
    def check(label: str, value: Any) -> None:
        if value not in choices:
            raise ValidationError(f"{label} must be {' or '.join(repr(c) for c in choices)}, got {value!r}")

    return check


def _duration(label: str, value: Any) -> None:
    parse_duration(value, label.partition(" ")[0])


def _identifier(_label: str, value: Any) -> None:
    validate_identifier(value, "catalog name")


_S3A = "spark.hadoop.fs.s3a."  # Hadoop's S3A keys as Spark conf (WAP_SPARK_CONF)
_WORKERS = "query_workers (WAP_QUERY_WORKERS) and query_slots (WAP_QUERY_SLOTS) must be >= 1"


@dataclass(frozen=True)
class Settings:
    """Where the lakehouse lives and how to reach it. Build with :meth:`from_env`.

    Every field is declared with :func:`setting` (its environment variable, parser and rule).
    """

    home: Path = setting("WAP_HOME", Path("lakehouse"), parse=_path)
    checks_path: Path | None = setting("WAP_CHECKS", None, parse=_path)
    # the roles file; default $WAP_HOME/access.yml
    access_path: Path | None = setting("WAP_ACCESS", None, parse=_path)
    user: str = setting("WAP_USER", factory=_os_user)
    catalog_name: str = setting("WAP_CATALOG_NAME", "wap", check=_identifier)
    # SQLAlchemy URL (a SQL catalog; default sqlite:///$WAP_HOME/catalog.db), or the REST catalog's URI
    catalog_uri: str | None = setting("WAP_CATALOG_URI", None)
    # JDBC URL for Spark; derived from catalog_uri when unset
    catalog_jdbc_uri: str | None = setting("WAP_CATALOG_JDBC_URI", None)
    warehouse: str | None = setting("WAP_WAREHOUSE", None)  # default file://$WAP_HOME/warehouse
    spark_master: str = setting("WAP_SPARK_MASTER", "local[2]")
    spark_driver_memory: str = setting("WAP_SPARK_DRIVER_MEMORY", "2g")
    shuffle_partitions: int = setting(
        "WAP_SHUFFLE_PARTITIONS", 4, parse=_integer, check=_at_least(1, "shuffle_partitions must be >= 1")
    )
    jdbc_jars: tuple[str, ...] = setting("WAP_JDBC_JARS", (), parse=_str_list)
    # failing-row sample per check
    sample_rows: int = setting("WAP_SAMPLE_ROWS", 20, parse=_integer)
    # where confined (console) ingest may read: local folders (Path) and object-store URL prefixes
    # (canonical ``s3a://bucket/prefix`` text, see StoreUrl); default ($WAP_HOME/landing,)
    ingest_roots: tuple[Path | str, ...] = setting("WAP_INGEST_ROOTS", (), parse=_root_list)
    # extra Spark conf for a cluster ("spark.executor.memory=1g spark.driver.host=10.0.0.5"); applied last
    spark_conf: tuple[tuple[str, str], ...] = setting("WAP_SPARK_CONF", (), parse=_spark_conf, secret=True)
    # extra Iceberg catalog properties for BOTH PyIceberg and Spark's catalog (a REST catalog's credential=...)
    catalog_properties: tuple[tuple[str, str], ...] = setting(
        "WAP_CATALOG_PROPERTIES", (), parse=_catalog_properties, secret=True
    )
    # gc discards open branches older than this (per table: property wap.branch-ttl)
    branch_ttl: str = setting("WAP_BRANCH_TTL", "14d", check=_duration)
    # gc expires older snapshots (per table: history.expire.max-snapshot-age-ms)
    snapshot_retention: str = setting("WAP_SNAPSHOT_RETENTION", "30d", check=_duration)
    # the notification targets file; default $WAP_HOME/notify.yml
    notify_path: Path | None = setting("WAP_NOTIFY", None, parse=_path)
    # The catalog: "sql" (JDBC tables in catalog_uri's database) or "rest" (an Iceberg REST catalog at
    # catalog_uri, "rest+http://host:port/prefix" also selects it); wap_core.lake.backends.
    catalog_type: str = setting("WAP_CATALOG_TYPE", "sql", check=_one_of(*CATALOG_TYPE_NAMES))
    # the journal's database with a REST catalog; default sqlite:///$WAP_HOME/journal.db
    journal_uri: str | None = setting("WAP_JOURNAL_URI", None)
    # S3 / S3-compatible storage, for Spark (S3A) and PyIceberg (PyArrow) at once: wap_core.lake.s3
    s3_endpoint: str | None = setting("WAP_S3_ENDPOINT", None)  # http(s)://host:port; unset: AWS S3
    s3_access_key: str | None = setting("WAP_S3_ACCESS_KEY", None, secret=True)
    s3_secret_key: str | None = setting("WAP_S3_SECRET_KEY", None, secret=True)
    s3_region: str = setting("WAP_S3_REGION", "us-east-1")
    # bucket in the path, not the host name; default: True with an endpoint
    s3_path_style: bool | None = setting("WAP_S3_PATH_STYLE", None, parse=_flag)
    # where the S3A client jars are; default <venv>/share/wap-jars (make setup-s3)
    s3a_jars_dir: Path | None = setting("WAP_S3A_JARS_DIR", None, parse=_path)
    # a user's query (SQL box, `query`) is cancelled after this many seconds
    query_timeout: float = setting("WAP_QUERY_TIMEOUT", 60.0, parse=_seconds, check=_positive)
    # Where the console's SQL box runs a query (wap_core.analysis.sandbox): "process" (a worker process with
    # its own small Spark driver, killed on time-out or Cancel) or "driver" (the console's shared driver)
    query_isolation: str = setting("WAP_QUERY_ISOLATION", "process", check=_one_of("process", "driver"))
    # worker processes at most (one query each; a user has one at a time)
    query_workers: int = setting("WAP_QUERY_WORKERS", 2, parse=_integer, check=_at_least(1, _WORKERS))
    # task slots of a worker's Spark driver (local[N])
    query_slots: int = setting("WAP_QUERY_SLOTS", 1, parse=_integer, check=_at_least(1, _WORKERS))
    # a worker's niceness above the console's (0-19): the console's own work comes first
    query_nice: int = setting("WAP_QUERY_NICE", 10, parse=_integer, check=_between(0, 19))
    query_memory: str = setting("WAP_QUERY_MEMORY", "1g")  # a worker's Spark driver heap
    # the console's background reconciliation tick
    reconcile_seconds: int = setting(
        "WAP_RECONCILE_SECONDS", 30, parse=_integer, check=_at_least(1, "{label} must be >= 1")
    )
    # the console starts Spark in the background at start-up (off: on first use)
    spark_eager: bool = setting("WAP_SPARK_EAGER", True, parse=_on_unless_off)
    spark_ui: bool = setting("WAP_SPARK_UI", False, parse=_flag)  # Spark's web UI

    def __post_init__(self) -> None:
        for f in fields(self):
            spec = spec_of(f)
            if spec.check is not None:
                spec.check(f"{f.name} ({spec.env})" if spec.env else f.name, getattr(self, f.name))
        for uri in (self.catalog_uri, self.catalog_jdbc_uri, self.journal_uri):
            if uri:
                register_secrets_of(uri)
        register_secret(self.s3_secret_key)
        register_secret(self.s3_access_key)
        for key, value in self.catalog_properties:  # e.g. credential=client:secret of a REST catalog
            if SECRET_KEY.search(key) or key in ("credential", "s3.access-key-id"):
                register_secret(value)
                register_secret(value.partition(":")[2])
        object.__setattr__(self, "ingest_roots", _ingest_roots(self.ingest_roots))
        self._adopt_generic_s3_keys()

    def _adopt_generic_s3_keys(self) -> None:
        """One S3 endpoint, wherever it is given: ``WAP_S3_ENDPOINT``, or the generic way (``s3.endpoint`` in
        WAP_CATALOG_PROPERTIES, ``spark.hadoop.fs.s3a.endpoint`` in WAP_SPARK_CONF, as before WAP_S3_* existed).
        A generic endpoint becomes ``s3_endpoint``, so Spark's per-bucket conf, PyArrow's client and every
        message name that store; places that disagree are refused in one line naming the setting to use. A
        full key pair given the generic way (one place) is adopted the same way when WAP_S3_* keys are unset,
        and Hadoop's ``fs.s3a.path.style.access`` when WAP_S3_PATH_STYLE is unset."""
        props, conf = dict(self.catalog_properties), dict(self.spark_conf)
        given = {
            f"{env_name('s3_endpoint')}": self.s3_endpoint,
            f"{env_name('catalog_properties')} (s3.endpoint)": props.get("s3.endpoint"),
            f"{env_name('spark_conf')} ({_S3A}endpoint)": conf.get(f"{_S3A}endpoint"),
        }
        found = {where: value.rstrip("/") for where, value in given.items() if value}
        if len(set(found.values())) > 1:
            raise ValidationError(
                f"the S3 endpoint is given differently in {' and '.join(found)}: "
                f"give it once, in {env_name('s3_endpoint')}"
            )
        if self.s3_endpoint is None and found:
            object.__setattr__(self, "s3_endpoint", next(iter(found.values())))
        if self.s3_access_key is None and self.s3_secret_key is None:
            for access, secret in (
                (props.get("s3.access-key-id"), props.get("s3.secret-access-key")),
                (conf.get(f"{_S3A}access.key"), conf.get(f"{_S3A}secret.key")),
            ):
                if access and secret:
                    object.__setattr__(self, "s3_access_key", access)
                    object.__setattr__(self, "s3_secret_key", secret)
                    register_secret(access)
                    register_secret(secret)
                    break
        if self.s3_path_style is None and conf.get(f"{_S3A}path.style.access"):
            object.__setattr__(
                self, "s3_path_style", _flag("s3_path_style", conf[f"{_S3A}path.style.access"])
            )

    # ----- derived values -------------------------------------------------
    @property
    def checks_file(self) -> Path:
        """The checks file: ``checks_path`` or ``<home>/checks.yml``."""
        return self.checks_path if self.checks_path is not None else self.home / "checks.yml"

    @property
    def notify_file(self) -> Path:
        """The notifications file: ``notify_path`` or ``<home>/notify.yml``."""
        return self.notify_path if self.notify_path is not None else self.home / "notify.yml"

    @property
    def access_file(self) -> Path:
        """The access file: ``access_path`` or ``<home>/access.yml``."""
        return self.access_path if self.access_path is not None else self.home / "access.yml"

    @property
    def sqlalchemy_uri(self) -> str:
        """The catalog database for PyIceberg: ``catalog_uri`` or SQLite at ``<home>/catalog.db``."""
        if self.catalog_uri:
            return self.catalog_uri
        return f"sqlite:///{(self.home / 'catalog.db').resolve()}"

    @property
    def jdbc_uri(self) -> str:
        """The same catalog database as a JDBC URI for Spark."""
        if self.catalog_jdbc_uri:
            return self.catalog_jdbc_uri
        return sqlalchemy_to_jdbc(self.sqlalchemy_uri)

    @property
    def warehouse_uri(self) -> str:
        """Where table data lives: ``warehouse`` or ``<home>/warehouse`` as a file URI."""
        if self.warehouse:
            return self.warehouse
        return (self.home / "warehouse").resolve().as_uri()

    @property
    def is_sqlite(self) -> bool:
        """True when the catalog is in SQLite."""
        return self.sqlalchemy_uri.startswith("sqlite")

    @property
    def masked_catalog_uri(self) -> str:
        """The catalog URL with its password masked (``scheme://user:***@host/db``): the only form to show."""
        return mask_secrets(self.sqlalchemy_uri)

    @property
    def masked_jdbc_uri(self) -> str:
        """The JDBC URI with its secrets masked."""
        return mask_secrets(self.jdbc_uri)

    @property
    def ingest_root_paths(self) -> tuple[Path, ...]:
        """The configured local ingest roots, or the default ``$WAP_HOME/landing`` when no root at all is
        configured (not resolved, maybe missing). Object-store roots: :attr:`ingest_root_urls`."""
        if not self.ingest_roots:
            return (self.home / "landing",)
        return tuple(r for r in self.ingest_roots if isinstance(r, Path))

    @property
    def ingest_root_urls(self) -> tuple[StoreUrl, ...]:
        """The configured object-store ingest roots (``s3a://bucket/prefix``), parsed."""
        return tuple(parse_store_url(r, root=True) for r in self.ingest_roots if isinstance(r, str))

    def check_configured_paths(self, probe: Callable[[Settings, StoreUrl], str | None] | None = None) -> None:
        """Every file or folder a setting names must be there: called at the start of the CLI and the console.

        A configured access file (``WAP_ACCESS`` / ``access_path``) or notifications file (``WAP_NOTIFY`` /
        ``notify_path``) that is missing or not a readable regular file, and a configured ingest root
        (``WAP_INGEST_ROOTS``) that is not a readable folder, is an error naming the path: a typo never
        turns access control off, silences notifications or allows nothing. Only the defaults may be
        absent (no ``$WAP_HOME/access.yml``: access control is off; no ``$WAP_HOME/notify.yml``: no
        targets; ``$WAP_HOME/landing`` is created on first use). An object-store root's bucket must be
        reachable and readable: ``probe`` (:func:`wap_core.lake.s3.root_problem`) says why not.
        """
        if self.access_path is not None:
            problem = _file_problem(self.access_path)
            if problem:
                raise AccessFileError(
                    str(self.access_path),
                    None,
                    f"the access file (WAP_ACCESS) {problem}; a configured access file never means "
                    "'access control off' (unset WAP_ACCESS for that)",
                )
        if self.notify_path is not None:
            problem = _file_problem(self.notify_path)
            if problem:
                raise NotifyFileError(
                    str(self.notify_path), None, f"the notifications file (WAP_NOTIFY) {problem}"
                )
        for root in self.ingest_roots:
            problem = _folder_problem(root) if isinstance(root, Path) else None
            if problem is None and isinstance(root, str) and probe is not None:
                problem = probe(self, parse_store_url(root, root=True))
            if problem:
                raise ValidationError(mask_secrets(f"{root}: the ingest root (WAP_INGEST_ROOTS) {problem}"))

    # ----- construction ----------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``wap.toml`` in the home (or ``$WAP_CONFIG``), then ``WAP_*`` variables, then ``overrides``."""
        env = os.environ if env is None else env
        home = Path(overrides.get("home") or env.get(_ENV["home"]) or "lakehouse")
        values: JsonObject = {}
        toml_path = Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else home / "wap.toml"
        if toml_path.is_file():
            try:
                values.update(tomllib.loads(toml_path.read_text()))
            except tomllib.TOMLDecodeError as exc:
                raise ValidationError(f"{toml_path}: invalid TOML: {exc}") from exc
            unknown = set(values) - {f.name for f in fields(cls) if spec_of(f).from_file}
            if unknown:
                raise ValidationError(f"{toml_path}: unknown setting(s): {', '.join(sorted(unknown))}")
        for name, var in _ENV.items():
            if env.get(var):
                values[name] = env[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["home"] = home
        return cls(**_coerce(values))

    def with_(self, **changes: Any) -> Settings:
        """A copy with some settings changed."""
        return replace(self, **_coerce(changes))


# Derived from the declarations: setting name -> its environment variable, and how text becomes its type.
_ENV: dict[str, str] = {f.name: env for f in fields(Settings) if (env := spec_of(f).env) is not None}
_PARSE: dict[str, Parse] = {
    f.name: parse for f in fields(Settings) if (parse := spec_of(f).parse) is not None
}
#: Every environment variable the settings are read from (``WAP_CONFIG`` first): the console's cache key.
ENV_VARS: tuple[str, ...] = (CONFIG_ENV, *_ENV.values())


def env_name(name: str) -> str:
    """The environment variable of setting ``name`` (``s3a_jars_dir`` -> ``WAP_S3A_JARS_DIR``)."""
    return _ENV[name]


def _folder_problem(root: Path) -> str | None:
    """Why a local ingest root is not a readable folder, or None when it is one."""
    path = root.expanduser()
    if not path.is_dir():
        return "is not a folder" if path.exists() else "does not exist"
    if not os.access(path, os.R_OK | os.X_OK):
        return "cannot be read"
    return None


def _file_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable regular file (``"does not exist"``...), or None when it is one."""
    p = path.expanduser()
    if not p.exists():
        return "is a dangling symbolic link" if p.is_symlink() else "does not exist"
    if not p.is_file():
        return "is not a regular file"
    if not os.access(p, os.R_OK):
        return "cannot be read"
    return None


# WAP_INGEST_ROOTS: roots separated by ':' (os.pathsep, as before) where it does not start a URL's '://',
# or by line breaks; a local root starting with '//' is written on a line of its own.
_ROOT_SEPARATOR = re.compile(r"[\r\n]+|:(?!//)")


def split_ingest_roots(value: str) -> list[str]:
    """``/data/in:s3a://lake/landing`` -> ``['/data/in', 's3a://lake/landing']`` (blank items dropped)."""
    return [item.strip() for item in _ROOT_SEPARATOR.split(value) if item.strip()]


def _ingest_roots(items: Any) -> tuple[Path | str, ...]:
    """Local roots as Paths, object-store roots as their canonical URL text (a malformed one is an error)."""
    out: list[Path | str] = []
    for item in items:
        if isinstance(item, str) and is_url(item):
            try:
                out.append(str(parse_store_url(item, root=True)))
            except ValidationError as exc:
                raise ValidationError(f"ingest root (WAP_INGEST_ROOTS) {exc}") from None
        elif item:
            out.append(Path(item))
    return tuple(out)


def _coerce(values: JsonObject) -> JsonObject:
    """Each given setting through its declared parser (text from the environment or wap.toml -> its type)."""
    return {k: (_PARSE[k](k, v) if k in _PARSE and v is not None else v) for k, v in values.items()}


def _pairs(value: Any, what: str, env: str) -> list[tuple[str, str]]:
    """``"k=v k2=v2"`` (whitespace-separated, shell-style quotes for values with spaces: ``'k=a b'``, as in
    the environment variable), a mapping (a TOML table) or pairs."""
    if isinstance(value, str):
        pairs: list[tuple[str, str]] = []
        try:
            items = shlex.split(value)
        except ValueError as exc:  # unbalanced quotes; the text is not echoed: it may hold a secret
            raise ValidationError(
                f"{what}: {exc} ({env} takes whitespace-separated key=value pairs)"
            ) from exc
        for n, item in enumerate(items, 1):
            key, sep, val = item.partition("=")
            if not sep:  # the item is not echoed: it may be a secret
                raise ValidationError(
                    f"{what}: item {n} is not key=value ({env} takes whitespace-separated key=value pairs)"
                )
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
        if (
            not _PROPERTY_KEY.fullmatch(key)
            or key.startswith(("spark.", "jdbc."))
            or key in _OWN_CATALOG_KEYS
        ):
            raise ValidationError(
                f"catalog_properties: {key!r} is not an Iceberg catalog property wap_core passes on "
                f"(uri, warehouse, type and jdbc.* come from the other settings)"
            )
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
    raise ValidationError(
        f"cannot derive a JDBC URL from catalog URI {mask_secrets(uri)!r}: set WAP_CATALOG_JDBC_URI"
    )


# --------------------------------------------------------------------------- object-store URLs
# The object-store URLs an ingest source or root may be; ``s3://`` and ``s3a://`` name the same object
# (Spark reads both through S3A). Any other scheme (http://, file://, s3n://...) is refused.
STORE_URL_SCHEMES = frozenset({"s3", "s3a"})
_URL_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
# S3's bucket naming rules: 3-63 of [a-z0-9.-], a letter or digit at both ends, no '..' (checked apart)
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
# one key segment: letters, digits, space and a few punctuation marks, ':' included (``2024-01-01T00:00:00.csv``,
# a legal S3 key; the object is copied under a sanitized local name, so Hadoop never parses it); no '%', '\\',
# '?', '#', '{'...
_SEGMENT = re.compile(r"[\w .\-+=,@()!'~:]+")
_PATTERN_SEGMENT = re.compile(r"[\w .\-+=,@()!'~:*?\[\]]+")
GLOB_CHARS = frozenset("*?[")


def is_url(value: object) -> bool:
    """True when ``value`` starts like a URL (``scheme://``), whatever the scheme."""
    return bool(_URL_SCHEME.match(str(value)))


@dataclass(frozen=True)
class StoreUrl:
    """An object-store location checked on its structure: ``bucket`` and a normalized ``key`` (no leading or
    trailing ``/``, no empty, ``.`` or ``..`` segment, no percent-encoding; ``""`` is the whole bucket)."""

    bucket: str
    key: str

    def __str__(self) -> str:
        """The canonical form, ``s3a://bucket/key`` (the scheme Spark reads with)."""
        return f"s3a://{self.bucket}/{self.key}" if self.key else f"s3a://{self.bucket}"

    @property
    def path(self) -> str:
        """``bucket/key``: the path PyArrow's S3 filesystem takes."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def is_pattern(self) -> bool:
        """True when the key holds a glob wildcard (``*``, ``?``, ``[``)."""
        return any(ch in GLOB_CHARS for ch in self.key)

    def is_under(self, root: StoreUrl) -> bool:
        """Same bucket, and the key is the root's prefix or below it at a ``/`` boundary
        (``landing`` holds ``landing/x.csv``, never ``landing-evil/x.csv``)."""
        if self.bucket != root.bucket:
            return False
        return not root.key or self.key == root.key or self.key.startswith(root.key + "/")


def parse_store_url(text: str, *, root: bool = False, pattern: bool = False) -> StoreUrl:
    """``s3a://bucket/key`` or ``s3://bucket/key`` checked on its structure, else ValidationError saying why.

    The scheme must be one of :data:`STORE_URL_SCHEMES`; the bucket must be a valid S3 bucket name (so no
    user, password or port); the key's segments are each a plain name (``pattern``: glob wildcards too):
    no ``..`` or ``.`` segment, no ``//``, no percent-encoding, query or fragment. A ``root`` may end in
    ``/`` and may be a whole bucket; a source names an object (or, ``pattern``, objects).
    """
    shown = mask_secrets(text)
    m = _URL_SCHEME.match(text)
    if not m:
        raise ValidationError(f"{shown!r} is not a URL (s3a://bucket/key)")
    scheme = m.group("scheme").lower()
    if scheme not in STORE_URL_SCHEMES:
        raise ValidationError(f"{shown!r}: the scheme {scheme}:// is not allowed (only s3a:// and s3://)")
    bucket, _, key = text[m.end() :].partition("/")
    if "@" in bucket or ":" in bucket:  # never echoed: it may hold a key or password (one holding '/' too)
        raise ValidationError(f"{scheme}:// URL with a user or password: give keys in WAP_S3_* settings")
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise ValidationError(f"{shown!r}: {bucket!r} is not a valid bucket name")
    if root and key.endswith("/"):
        key = key[:-1]
    if not key and not root:
        raise ValidationError(f"{shown!r} names a bucket, not an object")
    segment = _PATTERN_SEGMENT if pattern else _SEGMENT
    for part in key.split("/") if key else ():
        if part in ("", ".", ".."):
            raise ValidationError(f"{shown!r}: the key has an empty, '.' or '..' segment")
        if not segment.fullmatch(part):
            raise ValidationError(
                f"{shown!r}: the key segment {part!r} has a character a source URL may not hold"
            )
    return StoreUrl(bucket, key)


# --------------------------------------------------------------------------- secrets
MASK = "***"
# an object-store URL's user info is its access key id (and secret): masked whole, user included
# (s3a://KEY@bucket, s3a://KEY:SECRET@bucket -> s3a://***@bucket); a password holding '/' or '@' greedily as below
_STORE_USERINFO = re.compile(r"(?i)(?P<head>\bs3[an]?://)(?:[^\s/:@'\"]*:\S*|[^\s/:@'\"]+)@")
# scheme://user:password@host -> scheme://user:***@host, greedy up to the last '@' before white space, so a
# password holding '@', '/' or a quote is masked whole (rather too much than too little).
_URL_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*):(?P<secret>\S*)@")
# password=..., pwd=... in JDBC URLs, query strings and key=value lists (also ;-separated)
_KEY_VALUE = re.compile(
    r"(?i)(?P<head>\b(?:password|passwd|pwd|secret|token|access[_-]?key|secret[_-]?key)=)(?P<secret>[^&;\s'\"]+)"
)
# "password": "..." in JSON / repr of a dict
_QUOTED_KEY = re.compile(
    r"(?i)(?P<head>[\"'](?:password|passwd|pwd|secret|token)[\"']\s*:\s*[\"'])(?P<secret>[^\"']+)"
)
SECRET_KEY = re.compile(
    r"(?i)password|passwd|pwd|secret|token|access[_-]?key"
)  # a mapping key whose value is a secret
# ... unless the key names which secret or whose (the journal's ``token_id``, ``token_user``): kept readable
_SECRET_REFERENCE = re.compile(r"(?i)[_.-](?:id|user)$")
# A service token (:mod:`wap_core.security.tokens`): ``wapt_`` + ``secrets.token_urlsafe(32)`` (43 characters).
SERVICE_TOKEN_PREFIX = "wapt_"
SERVICE_TOKEN = re.compile(r"wapt_[A-Za-z0-9_-]{43}")
# What :func:`mask_secrets` masks as a token pasted into any text, by its shape alone (nobody registered it):
# the prefix and 16 or more URL-safe characters, so a token cut short, or run on into other text, is masked
# whole too (a truncated token still carries most of its 256 bits).
_TOKEN_LIKE = re.compile(r"wapt_[A-Za-z0-9_-]{16,}")
_known_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret value so :func:`mask_secrets` masks it wherever it appears, also outside a URL.

    Values shorter than 8 characters are not remembered (masking every "admin" in the journal would
    garble it); passwords inside URLs and ``password=`` parameters are masked whatever their length.
    """
    if value and len(value) >= 8:
        from urllib.parse import quote, unquote

        with _secrets_lock:
            _known_secrets.update({value, unquote(value), quote(value, safe="")})


def register_secrets_of(uri: str) -> None:
    """Register the password(s) found in a URL (userinfo or ``password=`` parameter)."""
    for pattern in (_URL_USERINFO, _KEY_VALUE):
        for m in pattern.finditer(uri):
            register_secret(m.group("secret"))


def is_secret_key(key: str) -> bool:
    """Whether a mapping key holds a secret: it names one (``password``, ``s3_secret_key``, ``token``) and
    not merely its id or its user (``token_id``, ``token_user``: an audit trail must say which token)."""
    return bool(SECRET_KEY.search(key)) and not _SECRET_REFERENCE.search(key)


def mask_secrets(text: str) -> str:
    """``text`` with every password masked: URL userinfo (``scheme://user:***@host``; an object-store URL's
    user too, ``s3a://***@bucket``: it is an access key id), ``password=***`` parameters (JDBC URLs, query
    strings), ``"password": "***"``, every service token by its format (``wapt_...``, whoever pasted it) and
    every registered secret value.

    Apply it wherever a catalog URL could surface: UI, error messages, logs, journal, CLI output; and to
    user text before it is stored (comments, reviews, reasons).
    """
    if not text:
        return text
    out = _TOKEN_LIKE.sub(MASK, text)
    out = _STORE_USERINFO.sub(lambda m: f"{m.group('head')}{MASK}@", out)
    out = _URL_USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", out)
    out = _KEY_VALUE.sub(lambda m: f"{m.group('head')}{MASK}", out)
    out = _QUOTED_KEY.sub(lambda m: f"{m.group('head')}{MASK}", out)
    if _known_secrets:
        with _secrets_lock:
            known = sorted(_known_secrets, key=len, reverse=True)
        for secret in known:
            if secret in out:
                out = out.replace(secret, MASK)
    return out


class SecretMaskingFilter(logging.Filter):
    """A logging filter that masks secrets in a record's message, arguments and exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask secrets in the record (its formatted message and exception text); never drops it."""
        mask_record(record)
        return True


def mask_record(record: logging.LogRecord) -> logging.LogRecord:
    """Mask ``record`` in place: its message (formatted with its args) and any exception text."""
    if getattr(record, "_wap_masked", False):
        return record
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string: keep the raw message, masked
        message = str(record.msg)
    record.msg, record.args = mask_secrets(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = mask_secrets(record.exc_text)
    if record.stack_info:
        record.stack_info = mask_secrets(record.stack_info)
    setattr(record, "_wap_masked", True)  # noqa: B010 - LogRecord has no such declared attribute
    return record


_factory_installed = False


def install_log_masking() -> None:
    """Mask secrets in every log record of this process (idempotent).

    A filter on the ``wap_core`` logger alone would not see records of its child loggers
    (``wap_core.workflow.ingest``...) nor of PySpark/Py4J/SQLAlchemy, so the record factory is wrapped: every
    record is masked when it is created, before any handler formats it. The filter is also installed
    on the ``wap_core`` logger for handlers that re-format records.
    """
    global _factory_installed
    with _secrets_lock:
        if _factory_installed:
            return
        _factory_installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return mask_record(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    logging.getLogger("wap_core").addFilter(SecretMaskingFilter())
