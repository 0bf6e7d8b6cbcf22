"""The suite's JVMs start and finish quickly: C1-only JIT, the serial collector, a class-data archive.

The suite starts a few hundred short-lived JVMs (CLI children, kill tests, console servers, SQL-box workers,
the background lane's runs) on 2 cores, and its own JVM runs many small Spark queries whose generated code
the C2 compiler spends its time on. Measured on this machine, side by side: C1-only (``-XX:TieredStopAtLevel=1``)
and ``-XX:+UseSerialGC`` took a CLI ingest from 33-35 to 20-23 CPU seconds, a CLI audit from 13-14 to 9-12,
and ``tests/test_checks_engine.py`` in-process from 93 to 52; a dynamic class-data archive of a CLI run on top
(``-XX:SharedArchiveFile``, Spark's and the JDK's classes mapped, not parsed again) took the ingest to 18-20
and the audit to 6-7.

How they reach every JVM: ``SPARK_SUBMIT_OPTS``, which ``spark-submit`` puts on its own command line, the
driver's in local mode (``SparkSubmitCommandBuilder``); no ``JAVA_TOOL_OPTIONS`` (the JVM prints it on
stderr, which the one-line-error tests read). The JVM's own log lines (a class archive it cannot map) are off
on stdout, where the CLI's JSON goes; errors still reach stderr.

Tests only: the product's JVM keeps its defaults (C2 pays off in a long-lived console on large batches).
``WAP_TEST_DEFAULT_JVM=1`` turns all of this off.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "SPARK_SUBMIT_OPTS"
OFF_ENV = "WAP_TEST_DEFAULT_JVM"
FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xlog:disable", "-Xlog:all=error:stderr")
ARCHIVE_FLAG = "-XX:SharedArchiveFile="
_ROOT = Path(__file__).resolve().parents[1]
_CHECKS = (
    "demo.t:\n  checks:\n    - not_null: id\n    - unique: id\n    - range: {column: v, min: 0, max: 1}\n"
)


def use(environ: MutableMapping[str, str]) -> None:
    """The quick flags in ``environ``'s ``SPARK_SUBMIT_OPTS`` (kept when already there, e.g. inherited)."""
    if environ.get(OFF_ENV) == "1":
        return
    given = environ.get(ENV, "").split()
    environ[ENV] = " ".join([*given, *(f for f in FLAGS if f not in given)])


def has_archive(environ: MutableMapping[str, str]) -> bool:
    return ARCHIVE_FLAG in environ.get(ENV, "")


def build_archive(environ: MutableMapping[str, str], workdir: Path) -> Path | None:
    """A class-data archive of one CLI ingest (with its audit) run under ``environ``'s flags, added to
    ``environ``'s ``SPARK_SUBMIT_OPTS``; None (nothing added) when the run or the dump failed. The archive fits
    JVMs of the same JDK, class path and flags only; any other JVM ignores it (silently: logs are off)."""
    if environ.get(OFF_ENV) == "1" or has_archive(environ):
        return None
    workdir.mkdir(parents=True, exist_ok=True)
    archive, home = workdir / "spark-classes.jsa", workdir / "lake"
    home.mkdir(exist_ok=True)
    (home / "checks.yml").write_text(_CHECKS)
    source = home / "t.csv"
    source.write_text("id,v,name\n" + "".join(f"{i},{i / 1000},n{i % 7}\n" for i in range(1000)))
    env = {k: v for k, v in environ.items() if not k.startswith("WAP_")}
    env.update(
        WAP_HOME=str(home),
        WAP_CHECKS=str(home / "checks.yml"),
        WAP_CATALOG_NAME="jvmarchive",
        WAP_SHUFFLE_PARTITIONS="2",
        WAP_USER="archive-builder",
        PYSPARK_PYTHON=sys.executable,
    )
    env[ENV] = f"{environ.get(ENV, '')} -XX:ArchiveClassesAtExit={archive}".strip()
    cmd = [sys.executable, "-m", "wap_core", "ingest", "demo.t", str(source), "--branch", "b", "--create"]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not archive.is_file():
        log.warning("no class-data archive (exit %s): %s", done.returncode, done.stderr.strip()[-500:])
        return None
    environ[ENV] = f"{environ.get(ENV, '')} {ARCHIVE_FLAG}{archive}".strip()
    log.info("class-data archive %s built in %.0f s", archive, time.monotonic() - started)
    return archive


def wanted(selected: int) -> bool:
    """Whether a run of ``selected`` tests pays for the archive (~20-30 s of one JVM first): a large run
    does; a few tests do not (``WAP_TEST_CLASS_ARCHIVE=1`` asks for it anyway)."""
    return os.environ.get("WAP_TEST_CLASS_ARCHIVE") == "1" or selected >= 200
