"""A real Spark standalone cluster on loopback: one master and two workers started with pip pyspark's
``bin/spark-class``, each in its own process group, stopped by PID (the whole group) at the end.

Used by tests/test_cluster.py; not a test module itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
from helpers import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
HOST = "127.0.0.1"


@dataclass
class Cluster:
    master_url: str  # spark://127.0.0.1:PORT
    webui_url: str  # http://127.0.0.1:PORT (the master's UI; /json is its state)
    base: Path
    worker_dirs: list[Path]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as resp:
            return dict(json.load(resp))

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def executor_logs(self) -> dict[str, list[Path]]:
        """worker dir -> the stderr logs of the executors it launched (work-dir/app-id/exec-id/stderr)."""
        return {str(d): sorted(d.glob("app-*/*/stderr")) for d in self.worker_dirs}

    def logs_tail(self, lines: int = 30) -> str:
        out = []
        for log in sorted(self.base.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)


def _env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_DIRS": str(base / "local"),
            "SPARK_DAEMON_MEMORY": "384m",  # master and worker daemons; executors get spark.executor.memory
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",  # small, quick daemons
        }
    )
    for var in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS"):
        env.pop(var, None)
    return env


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        # own session = own process group: the executors the worker forks stay in it, so killpg stops them too
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(procs: list[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM each process group (by the leader's PID), then SIGKILL what is left."""
    for p in reversed(procs):
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        with suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        with suppress(ProcessLookupError):  # also any executor JVM / Python worker left in the group
            os.killpg(p.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):  # pragma: no cover - SIGKILL cannot be ignored
            p.wait(timeout=5)


@contextmanager
def spark_cluster(
    base: Path, workers: int = 2, cores: int = 1, memory: str = "1536m", timeout: float = 90.0
) -> Iterator[Cluster]:
    """Start a master and ``workers`` workers on 127.0.0.1; yield once every worker is ALIVE."""
    if not SPARK_CLASS.is_file():
        raise RuntimeError(f"{SPARK_CLASS} not found: pyspark from pip ships it")
    base.mkdir(parents=True, exist_ok=True)
    (base / "local").mkdir(exist_ok=True)
    env = _env(base)
    port, ui = free_port(), free_port()
    cluster = Cluster(f"spark://{HOST}:{port}", f"http://{HOST}:{ui}", base, [])
    try:
        cluster.procs.append(
            _start(
                [
                    str(SPARK_CLASS),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                base / "master.log",
                env,
            )
        )
        for i in range(workers):
            work = base / f"worker{i}"
            work.mkdir(exist_ok=True)
            cluster.worker_dirs.append(work)
            cluster.procs.append(
                _start(
                    [
                        str(SPARK_CLASS),
                        "org.apache.spark.deploy.worker.Worker",
                        cluster.master_url,
                        "--host",
                        HOST,
                        "--port",
                        str(free_port()),
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(cores),
                        "--memory",
                        memory,
                        "--work-dir",
                        str(work),
                    ],
                    base / f"worker{i}.log",
                    env,
                )
            )
        deadline = time.monotonic() + timeout
        alive = 0
        while True:
            dead = [p.args for p in cluster.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a cluster process exited at start: {dead}\n{cluster.logs_tail()}")
            try:
                alive = cluster.alive_workers()
            except OSError:
                alive = 0  # the master's UI is not up yet
            if alive == workers:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{alive} of {workers} workers alive after {timeout:.0f}s\n{cluster.logs_tail()}"
                )
            time.sleep(0.5)
        yield cluster
    finally:
        stop(cluster.procs)
