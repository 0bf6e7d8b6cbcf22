"""The SparkSession: one per process, configured for the Iceberg JDBC catalog.

Branches are always addressed explicitly (``t.branch_x`` / ``VERSION AS OF``);
``spark.wap.branch`` is never set on the shared session.

The session's conf (S3 keys, the JDBC URL with its password, catalog credentials) never goes on a
command line: the JVM gets it from a private properties file (:func:`submit_properties`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import EnvironmentSetupError
from wap_core.lake.backends import catalog_type_of, store_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
_DEBIAN_JARS = {
    "sqlite": ("/usr/share/java/sqlite-jdbc.jar", "libxerial-sqlite-jdbc-java"),
    "postgresql": ("/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java"),
}

_lock = threading.Lock()
_session: SparkSession | None = None
_registered: dict[str, str] = {}


def iceberg_jar() -> str:
    """The path of the Iceberg Spark runtime jar (from snowpark-connect-deps-iceberg)."""
    try:
        import snowpark_connect_deps_iceberg as deps
    except ImportError as exc:  # pragma: no cover - requirements install it
        raise EnvironmentSetupError(
            "the Iceberg Spark runtime is missing: pip install snowpark-connect-deps-iceberg==1.0.2"
        ) from exc
    return str(deps.get_jar_path(ICEBERG_JAR))


def jdbc_jars(settings: Settings) -> list[str]:
    """The JDBC driver jar(s) for the catalog database; clear error when missing."""
    if settings.jdbc_jars:
        missing = [j for j in settings.jdbc_jars if not Path(j).is_file()]
        if missing:
            raise EnvironmentSetupError(f"WAP_JDBC_JARS names missing file(s): {', '.join(missing)}")
        return list(settings.jdbc_jars)
    if not settings.jdbc_uri.startswith(("jdbc:sqlite", "jdbc:postgresql")):
        raise EnvironmentSetupError(f"no known JDBC driver for {settings.masked_jdbc_uri}: set WAP_JDBC_JARS")
    kind = "sqlite" if settings.jdbc_uri.startswith("jdbc:sqlite") else "postgresql"
    path, package = _DEBIAN_JARS[kind]
    if not Path(path).is_file():
        raise EnvironmentSetupError(
            f"the {kind} JDBC driver jar is missing ({path}). Install it with "
            f"'apt-get install -y {package}' (make setup does this), or point WAP_JDBC_JARS at a driver jar."
        )
    # The session is process-wide and later lakehouses may use the other database: load both drivers.
    return [path] + [p for k, (p, _) in _DEBIAN_JARS.items() if k != kind and Path(p).is_file()]


def catalog_key(settings: Settings) -> str:
    """What a catalog name is bound to in this process: the REST catalog's URI or the JDBC URI."""

    return catalog_type_of(settings).catalog_key(settings)


def catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark conf entries for the Iceberg catalog named ``settings.catalog_name`` (JDBC, or REST)."""

    p = f"spark.sql.catalog.{settings.catalog_name}"
    conf = catalog_type_of(settings).spark_conf(settings)
    for (
        k,
        v,
    ) in settings.catalog_properties:  # e.g. io-impl / s3.* for an object store (WAP_CATALOG_PROPERTIES)
        conf[f"{p}.{k}"] = v
    return conf


def get_spark(settings: Settings) -> SparkSession:
    """Return the process-wide SparkSession, creating it on first use.

    Spark allows one session per process; further lakehouses (tests use one per
    test) are registered on it as further catalogs under their own names.
    """
    global _session
    with _lock:
        if _session is None:
            _session = _build(settings)
            _registered[settings.catalog_name] = catalog_key(settings)
            return _session
        # Catalogs registered at run time are looked up through the thread's active session:
        # make ours active in this thread (Streamlit serves each session from its own thread).
        _session._jvm.SparkSession.setActiveSession(_session._jsparkSession)  # type: ignore[union-attr]
        known = _registered.get(settings.catalog_name)
        if known is None:
            _add_s3(_session, settings)
            for k, v in catalog_conf(settings).items():
                _session.conf.set(k, v)
            _registered[settings.catalog_name] = catalog_key(settings)
        elif known != catalog_key(settings):
            raise EnvironmentSetupError(
                f"catalog {settings.catalog_name!r} is already bound to {mask_secrets(known)} in this process; "
                "use another catalog name for a second lakehouse"
            )
        return _session


LOG4J2_PROPERTIES = Path(__file__).resolve().parent / "log4j2.properties"
#: The FAIR scheduler's pools (package data); users' pools not in it are created with the defaults.
FAIR_SCHEDULER_XML = Path(__file__).resolve().parent / "fairscheduler.xml"
_log_level = "error"


def set_spark_log_level(level: str) -> None:
    """The JVM's log level for the session built next (``error`` by default; the CLI's ``--debug`` sets ``warn``)."""
    global _log_level
    if level.lower() not in ("error", "warn", "info", "debug"):
        raise ValueError(f"unknown log level {level!r}")
    _log_level = level.lower()


def java_log_options() -> str:
    """Driver JVM options: wap_core's log4j2 file (errors only unless asked), so no WARN screen at start.

    A failed task's ERROR lines (the row's error and its stack) are off at ``error``: the error reaches the
    caller as one line (:mod:`wap_core.lake.errors`); ``--debug`` (``warn``) shows them.
    """
    task = "off" if _log_level == "error" else _log_level
    return (
        f"-Dlog4j2.configurationFile=file:{LOG4J2_PROPERTIES} -Dwap.spark.log.level={_log_level}"
        f" -Dwap.spark.task.log.level={task}"
    )


_s3_session = False  # the session was built with the S3A jars


def _add_s3(session: SparkSession, settings: Settings) -> None:
    """A later lakehouse on S3: its S3A settings on the running session's Hadoop configuration."""

    store = store_of(settings)
    if not store.remote:
        return
    if not _s3_session:
        raise EnvironmentSetupError(
            "this process's Spark session started without the S3A jars (its first lakehouse was not on S3): "
            "start another process for a lakehouse on S3"
        )
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for k, v in store.spark_conf(
        settings, per_bucket_only=True
    ).items():  # its bucket's own endpoint and keys
        hadoop.set(k.removeprefix("spark.hadoop."), v)


def session_conf(settings: Settings) -> dict[str, str]:
    """Every Spark conf entry of the session ``settings`` build: later sources win (the S3A conf from the
    ``WAP_S3_*`` settings, then ``WAP_SPARK_CONF``, then the catalog's own entries)."""
    extra = dict(settings.spark_conf)
    store = store_of(settings)
    # S3: the S3A jars and the fs.s3a.* conf from the WAP_S3_* settings (WAP_SPARK_CONF still wins)
    s3_jars, s3_conf = store.spark_jars(settings), store.spark_conf(settings)
    db_jars = jdbc_jars(settings) if catalog_type_of(settings).needs_jdbc_jars else []
    # jars named in WAP_SPARK_CONF come on top of the Iceberg runtime, the JDBC drivers and the S3A jars
    jars = ",".join(
        [iceberg_jar(), *db_jars, *s3_jars, *(j for j in extra.pop("spark.jars", "").split(",") if j)]
    )
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": "wap-console",
        "spark.jars": jars,
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.default.parallelism": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        # Parquet dates and times as written (the proleptic Gregorian calendar of Arrow and Spark 3+): Spark's
        # default refuses a date before 1582 or a time before 1900 from a file it did not write itself
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.sql.adaptive.enabled": "true",
        # Spark's docs: on HotSpot prefer 8000 (the JVM's HugeMethodLimit): larger generated methods are never
        # JIT-compiled and run interpreted; the profiles' wide aggregates ran 1.6x faster with it
        "spark.sql.codegen.hugeMethodLimit": "8000",
        "spark.driver.extraJavaOptions": java_log_options(),
        "spark.scheduler.mode": "FAIR",  # per-user pools: wap_core.lake.jobs
        "spark.scheduler.allocation.file": FAIR_SCHEDULER_XML.as_uri(),
        "spark.ui.showConsoleProgress": "false",
    }
    conf.update(s3_conf)
    conf.update(extra)  # WAP_SPARK_CONF: cluster settings (executor memory, driver host, ...) win
    conf.update(catalog_conf(settings))
    return conf


def _build(settings: Settings) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    global _s3_session

    # Python workers (driver-side and on executors) run this process's interpreter unless told otherwise:
    # on a cluster the executors need the same Python (and pyspark) at the same path.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = session_conf(settings)
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # PySpark would launch the JVM with every builder entry as ``--conf k=v`` on spark-submit's command
        # line, readable by every local user (/proc/PID/cmdline): S3 keys, the JDBC URL's password. The
        # whole conf goes in a private properties file instead, read once by the starting JVM.
        with submit_properties(conf):
            spark = SparkSession.builder.getOrCreate()
    else:  # the JVM runs already (a session stopped and built again): the entries travel over Py4J
        builder = SparkSession.builder
        for k, v in conf.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
    _s3_session = store_of(settings).remote
    spark.sparkContext.setLogLevel(_log_level.upper())
    return spark


# ----- how the conf reaches a JVM PySpark launches ---------------------------------------------------

SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"  # PySpark's spark-submit arguments (default ``pyspark-shell``)
PROPERTIES_PREFIX = "wap-spark-"  # the private folder of the properties file (under TMPDIR)
PROPERTIES_FILE = "spark.properties"
_PROPERTY_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}
_PROPERTY_ESCAPES.update({c: "\\" + c for c in "=:#! "})


def property_line(key: str, value: str) -> str:
    """``key=value`` in Java's properties syntax (``java.util.Properties.load``): separators, comment marks,
    blanks, backslashes and line breaks escaped, so any value (a password with ``=`` or ``#``) reads back
    as itself. Spark trims a value's outer white space (``Utils.getPropertiesFromFile``)."""
    return (
        "".join(_PROPERTY_ESCAPES.get(c, c) for c in key)
        + "="
        + "".join(_PROPERTY_ESCAPES.get(c, c) for c in value)
    )


def _submit_args() -> tuple[Path | None, list[str]]:
    """PYSPARK_SUBMIT_ARGS without a ``--properties-file``, and the properties the JVM would have read
    otherwise: that file, else ``spark-defaults.conf`` (spark-submit reads only one of them)."""
    from pyspark.find_spark_home import _find_spark_home

    args: list[str] = []
    given: str | None = None
    words = iter(shlex.split(os.environ.get(SUBMIT_ARGS, "pyspark-shell")))
    for word in words:
        if word == "--properties-file":
            given = next(words, "")
        elif word.startswith("--properties-file="):
            given = word.partition("=")[2]
        else:
            args.append(word)
    if (
        given is not None
        and Path(given).parent.name.startswith(PROPERTIES_PREFIX)
        and Path(given).name == PROPERTIES_FILE
    ):
        # another process's own file, inherited while it started its JVM (a child started meanwhile got
        # a copy of the environment): never this process's conf
        given = None
    if given is not None:
        if not Path(given).is_file():
            raise EnvironmentSetupError(
                f"{SUBMIT_ARGS} names a --properties-file that is not a file: {given!r}"
            )
        return Path(given), args
    home = str(_find_spark_home())  # type: ignore[no-untyped-call]  # where spark-submit runs from
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or Path(home) / "conf")
    defaults = conf_dir / "spark-defaults.conf"
    return (defaults if defaults.is_file() else None), args


@contextmanager
def submit_properties(conf: Mapping[str, str]) -> Iterator[Path]:
    """While the block runs, PYSPARK_SUBMIT_ARGS hands ``conf`` to the JVM PySpark launches through
    ``--properties-file``: a file only this user can read (mode 0600 in a 0700 folder of its own),
    removed with its folder when the block ends (the JVM has read it by then)."""
    base, args = _submit_args()
    folder = Path(tempfile.mkdtemp(prefix=PROPERTIES_PREFIX))  # mode 0700
    path = folder / PROPERTIES_FILE
    before = os.environ.get(SUBMIT_ARGS)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            if base is not None:  # spark-defaults.conf (or the user's file) first: our entries win over it
                out.write(base.read_text(encoding="utf-8") + "\n\n")
            out.write("# wap_core's session conf (wap_core.lake.spark)\n")
            out.writelines(property_line(k, v) + "\n" for k, v in conf.items())
        os.environ[SUBMIT_ARGS] = shlex.join(["--properties-file", str(path), *args])
        yield path
    finally:
        if before is None:
            os.environ.pop(SUBMIT_ARGS, None)
        else:
            os.environ[SUBMIT_ARGS] = before
        shutil.rmtree(folder, ignore_errors=True)


def spark_running() -> bool:
    """True when this process has a Spark session."""
    return _session is not None


def current_spark() -> SparkSession | None:
    """The process-wide session if one was started (never starts one)."""
    return _session


def stop_spark() -> None:
    """Stop this process's Spark session, if any."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
        _session = None
        _registered.clear()
