"""Small real data files for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join("" if v is None else str(v) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def refs(lh, table):  # type: ignore[no-untyped-def]
    """{ref name: snapshot id} read back with PyIceberg (never the CLI's word)."""
    return {name: ref.snapshot_id for name, ref in lh.table(table).metadata.refs.items()}
