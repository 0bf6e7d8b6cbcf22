"""The core stays fully typed: mypy with untyped definitions disallowed, and no streamlit import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wap_core_is_fully_typed() -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "wap_core",
            "--ignore-missing-imports",
            "--disallow-untyped-defs",
            "--no-implicit-optional",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_core_never_imports_streamlit() -> None:
    offenders = [str(f) for f in (ROOT / "wap_core").glob("*.py") if "streamlit" in f.read_text()]
    assert offenders == []
