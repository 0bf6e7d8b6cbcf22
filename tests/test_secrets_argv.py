"""No secret on any command line (issue 25, item 2): every local user can read ``/proc/PID/cmdline``.

A lakehouse on a real SeaweedFS bucket (S3A keys) with its catalog on a real PostgreSQL whose URL holds a
password. While a CLI command (``ingest``, in a subprocess), the console (``streamlit run``, its Spark started
by a real browser session) and a SQL-box worker (started by this process, answering a query on the table)
run, a thread reads ``/proc/*/cmdline`` of EVERY process on the machine every few milliseconds: none holds
the S3 secret key, the access key or the PostgreSQL password. Each of the three started a JVM (seen in
/proc, a descendant of its Python); each JVM's ``/proc/PID/environ`` is readable by its owner only; the
properties file that carried the conf (``wap_core.lake.spark.submit_properties``) was seen in a 0700 folder
with mode 0600 in each one's TMPDIR, and is gone once its Spark runs.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import helpers
import pytest
from conftest import S3_BUCKET, backend_env, create_pg_database, make_settings
from s3_server import SeaweedS3
from sqlalchemy.engine import make_url

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore, sandbox
from wap_core.lake.spark import PROPERTIES_PREFIX, submit_properties

T = TableId("demo", "people")
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n"
JVM = b"org.apache.spark.deploy.SparkSubmit"
PG_SECRET = "pgpw" + secrets.token_hex(10)


@dataclass
class ProcWatch:
    """A thread reading /proc while the processes under test run: every process's command line (and
    parent), the mode of each JVM's environ, and the properties folders and files under ``tmp_dirs``."""

    secrets: dict[str, str]
    tmp_dirs: list[Path]
    seen: dict[int, tuple[int, bytes]] = field(
        default_factory=dict
    )  # pid -> (parent pid, cmdline) first seen
    leaks: set[tuple[int, str]] = field(default_factory=set)  # (pid, which secret)
    environ_modes: dict[int, int] = field(default_factory=dict)  # JVM pid -> mode of /proc/PID/environ
    property_modes: dict[Path, int] = field(default_factory=dict)  # wap-spark-* folder or file -> mode
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ProcWatch:
        self._thread = threading.Thread(target=self._run, name="proc-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)
        self.scan()  # once more, after the end

    def _run(self) -> None:
        while not self._stop.wait(0.25):  # a JVM lives seconds; a scan takes ~50 ms
            self.scan()

    def scan(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if JVM in cmdline:  # spark-submit's JVM (or the script that execs it)
                    self.environ_modes[pid] = os.stat(f"/proc/{pid}/environ").st_mode
            except (OSError, IndexError, ValueError):  # it ended while we looked
                continue
            if cmdline:  # the parent of its first look (an ended parent makes it init's), its newest command
                self.seen[pid] = (self.seen.get(pid, (parent, b""))[0], cmdline)  # (bash execs the JVM)
            self.leaks.update(
                (pid, name) for name, value in self.secrets.items() if value.encode() in cmdline
            )
        for tmp in self.tmp_dirs:
            for folder in tmp.glob(f"{PROPERTIES_PREFIX}*"):
                for path in (folder, *folder.glob("*")):
                    try:
                        self.property_modes[path] = stat.S_IMODE(os.lstat(path).st_mode)
                    except OSError:  # removed while we looked
                        continue

    def jvms_under(self, marker: bytes) -> list[int]:
        """The JVMs seen whose ancestors include a process whose command line holds ``marker``."""
        roots = {pid for pid, (_, cmd) in self.seen.items() if marker in cmd}
        found = []
        for pid, (_parent, cmd) in self.seen.items():
            if not (JVM in cmd and cmd.split(b"\0", 1)[0].endswith(b"/java")):
                continue
            up, hops = pid, 0
            while up in self.seen and hops < 64:
                up, hops = self.seen[up][0], hops + 1
                if up in roots:
                    found.append(pid)
                    break
        return found


def _props_seen(watch: ProcWatch, tmp: Path) -> dict[str, int]:
    return {str(p.relative_to(tmp)): m for p, m in watch.property_modes.items() if p.is_relative_to(tmp)}


@pytest.fixture
def lake(seaweed: SeaweedS3, postgres: str, tmp_path: Path, spark_session: None) -> Iterator[Lakehouse]:
    """A lakehouse on SeaweedFS (S3A keys) whose PostgreSQL catalog URL holds a password."""
    database = create_pg_database(postgres, f"secrets_{os.getpid()}_{secrets.token_hex(3)}")
    settings = make_settings(
        tmp_path / "lh",
        SUITE,
        user="tester",
        catalog_uri=make_url(database).set(password=PG_SECRET).render_as_string(hide_password=False),
        warehouse=f"s3a://{S3_BUCKET}/secrets_{os.getpid()}",
        s3_endpoint=seaweed.endpoint,
        s3_access_key=seaweed.access_key,
        s3_secret_key=seaweed.secret_key,
    )
    lh = Lakehouse(settings)
    yield lh
    sandbox.close_all()
    lh.catalog.engine.dispose()


def _tmp(tmp_path: Path, names: Iterable[str]) -> dict[str, Path]:
    out = {}
    for name in names:
        out[name] = tmp_path / f"tmp-{name}"
        out[name].mkdir()
    return out


@pytest.mark.e2e
@pytest.mark.postgres
def test_no_secret_on_any_command_line_of_the_cli_the_console_and_a_sql_box_worker(
    lake: Lakehouse, seaweed: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    from playwright.sync_api import expect

    s = lake.settings
    tmp = _tmp(tmp_path, ("cli", "console", "worker"))
    tempfile.gettempdir()  # this process keeps its own temp folder; its children get theirs below
    env = helpers.console_env(**helpers.lake_env(s, "tester", roots=True, **backend_env(s)))
    assert PG_SECRET in env["WAP_CATALOG_URI"]
    helpers.write_csv(tmp_path / "seed.csv", ["id", "name"], [(1, "ann"), (2, "bob"), (3, "cy")])
    watched = {
        "S3 secret key": seaweed.secret_key,
        "S3 access key": seaweed.access_key,
        "PG password": PG_SECRET,
    }
    with (
        ProcWatch(watched, list(tmp.values())) as watch,
        helpers.console({**env, "TMPDIR": str(tmp["console"])}, tmp_path / "streamlit.log") as base,
    ):
        # (a) a CLI command on the store and the PostgreSQL catalog
        cli = helpers.cli_process(
            {**env, "TMPDIR": str(tmp["cli"])},
            "ingest",
            str(T),
            str(tmp_path / "seed.csv"),
            "--create",
            "--branch",
            "b1",
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        snapshot = lake.table(T).metadata.refs["b1"].snapshot_id
        # (c) a SQL-box worker (its own Python and JVM) answers a query on the table
        request = explore.QueryRequest(T, snapshot, "SELECT count(*) AS n FROM ref_view", 10, "tester")
        with monkeypatch.context() as mp:  # the worker's environment is this process's when it starts
            mp.setenv("TMPDIR", str(tmp["worker"]))
            query = sandbox.submit(lake, explore.answer_in_worker, "tester", "the query", request)
            helpers.wait_for(lambda: query.worker_pid is not None, 60, "the worker process")
        # (b) the console: a browser session starts its Spark
        with helpers.browser_page(240_000) as page:
            page.goto(base)
            expect(page.get_by_text("Spark: running")).to_be_visible()
        assert query.result(240)["n"].tolist() == [3]  # the worker read the table on the store
        worker = query.worker_pid
    leaks = sorted(
        f"{which} in the command line of pid {pid} ({watch.seen[pid][1][:80]!r}...)"
        for pid, which in watch.leaks
    )
    assert not leaks, leaks
    jvms = {
        "cli": watch.jvms_under(b"-m\0wap_core\0ingest\0"),
        "console": watch.jvms_under(b"streamlit\0run\0app.py\0"),
        "worker": watch.jvms_under(f"{sandbox.TAG}\0{s.home}\0".encode()),
    }
    assert all(jvms.values()), jvms  # each of the three started a JVM and it was looked at
    assert worker is not None and jvms["worker"]
    for name, pids in jvms.items():
        for pid in pids:  # owner-only, as Linux makes it (the JVM's environment is no second argv)
            assert watch.environ_modes[pid] & 0o077 == 0, (name, pid, oct(watch.environ_modes[pid]))
    for name, folder in tmp.items():
        props = _props_seen(watch, folder)
        assert props, f"no properties file seen in the {name}'s TMPDIR"
        for rel, mode in props.items():
            assert mode == (0o600 if "/" in rel else 0o700), (name, rel, oct(mode))
        assert not list(folder.glob(f"{PROPERTIES_PREFIX}*")), f"the {name}'s properties file was left behind"


def test_the_properties_file_reads_back_exactly_in_java_and_keeps_spark_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_session: None
) -> None:
    """What ``submit_properties`` writes, read by ``java.util.Properties`` as Spark does (UTF-8): every value
    as itself; ``spark-defaults.conf`` under it (ours win); a user's ``--properties-file`` taken the same way
    and removed from the arguments; a file inherited from a parent's start ignored; the environment restored."""
    jvm = Lakehouse(helpers.lake_settings(tmp_path / "lh", "propsjava")).spark._jvm
    assert jvm is not None
    odd = {
        "spark.a": "p=ss:w#rd! with spaces\\back\\slash",
        "spark.b": "#starts like a comment",
        "spark.c": "ünïcode\tand\nbreaks",
        "spark.master": "local[1]",
    }

    def read_back(path: Path) -> dict[str, str]:
        props = jvm.java.util.Properties()
        reader = jvm.java.io.InputStreamReader(jvm.java.io.FileInputStream(str(path)), "UTF-8")
        props.load(reader)
        reader.close()
        return {str(k): str(props.getProperty(k)) for k in props.stringPropertyNames()}

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.master local[8]\nspark.defaults.only  yes\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -Dx=1 pyspark-shell")
    with submit_properties(odd) as path:
        assert (
            stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        )
        assert read_back(path) == {**odd, "spark.defaults.only": "yes"}
        assert (
            os.environ["PYSPARK_SUBMIT_ARGS"]
            == f"--properties-file {path} --driver-java-options -Dx=1 pyspark-shell"
        )
        inherited = os.environ["PYSPARK_SUBMIT_ARGS"]
    assert (
        not path.parent.exists()
        and os.environ["PYSPARK_SUBMIT_ARGS"] == "--driver-java-options -Dx=1 pyspark-shell"
    )

    mine = tmp_path / "mine.properties"
    mine.write_text("spark.mine=1\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--properties-file={mine} pyspark-shell")
    with submit_properties({"spark.b": "2"}) as path:
        assert read_back(path) == {
            "spark.mine": "1",
            "spark.b": "2",
        }  # the user's file instead of the defaults
        assert os.environ["PYSPARK_SUBMIT_ARGS"] == f"--properties-file {path} pyspark-shell"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", inherited)  # a child started while its parent's JVM started
    with submit_properties({"spark.b": "3"}) as path:
        assert read_back(path) == {"spark.master": "local[8]", "spark.defaults.only": "yes", "spark.b": "3"}
