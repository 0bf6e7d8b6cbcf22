"""Small real data files for tests, and the server/browser plumbing of the end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join("" if v is None else str(v) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def refs(lh, table):  # type: ignore[no-untyped-def]
    """{ref name: snapshot id} read back with PyIceberg (never the CLI's word)."""
    return {name: ref.snapshot_id for name, ref in lh.table(table).metadata.refs.items()}


# --------------------------------------------------------------------------- servers for end-to-end tests
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 90, what: str = "streamlit"
) -> None:
    """Poll ``url`` until it answers 200; fail early when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout}s")


@contextmanager
def running(
    cmd: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    health: str,
    timeout: float = 90,
    what: str = "server",
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` in its own process group, wait until ``health`` answers, stop the group afterwards."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_healthy(health, proc, timeout, what)
            yield proc
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


ROOT = Path(__file__).resolve().parent.parent


def console_env(**wap: str) -> dict[str, str]:
    """This process's environment without any ``WAP_*`` setting, plus ``wap`` (the console's settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    env.update(PYSPARK_PYTHON=sys.executable, **wap)
    return env


def streamlit_cmd(port: int, *args: str) -> list[str]:
    """The command line that serves the console (``streamlit run app.py``) headless on 127.0.0.1:``port``."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        *args,
    ]


@contextmanager
def console(
    env: Mapping[str, str], log: Path, timeout: float = 90, port: int | None = None, args: Sequence[str] = ()
) -> Iterator[str]:
    """The console on a free (or the given) local port with ``env`` and extra streamlit ``args``;
    yields its base URL, stops it after."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    with running(
        streamlit_cmd(port, *args),
        cwd=ROOT,
        env=env,
        log=log,
        health=f"{base}/_stcore/health",
        timeout=timeout,
        what="streamlit",
    ):
        yield base
