"""Benchmark data: TPC-H ``lineitem`` and ``part`` from ``tpchgen-cli``, cached per scale factor.

Batches are real TPC-H rows with their order keys shifted above every key on main,
so each batch is a pure append of new keys (the usual WAP batch).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KEY = ("l_orderkey", "l_linenumber")


def lineitem_checks(ns: str, li: str, part: str | None = None) -> str:
    """The bench's usual checks on the ``lineitem`` table ``ns.li`` (checks.yml): ``not_null``, ``range``,
    ``accepted_values``, ``unique`` against main and, with a ``part`` table, ``references`` into it."""
    out = (
        f"{ns}.{li}:\n  checks:\n"
        "    - not_null: [l_orderkey, l_partkey, l_suppkey]\n"
        "    - range: {column: l_quantity, min: 0, max: 100}\n"
        "    - accepted_values: {column: l_returnflag, values: [A, N, R]}\n"
        "    - unique: [l_orderkey, l_linenumber]\n"
    )
    if part is not None:
        out += f"    - references: {{column: l_partkey, table: {ns}.{part}, ref_column: p_partkey}}\n"
    return out


def _tpchgen() -> str:
    exe = Path(sys.executable).with_name("tpchgen-cli")
    if exe.is_file():
        return str(exe)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli is missing: pip install -r bench/requirements.txt")
    return found


def _fmt(scale: float) -> str:
    return f"{scale:g}".replace(".", "_")


def generate(data_dir: Path, scale: float, tables: tuple[str, ...] = ("lineitem", "part")) -> Path:
    """``data_dir/sf<scale>/<table>.parquet`` for each table, generated once and reused."""
    out = data_dir / f"sf{_fmt(scale)}"
    missing = [t for t in tables if not (out / f"{t}.parquet").is_file()]
    if missing:
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                _tpchgen(),
                "parquet",
                "-s",
                f"{scale:g}",
                "--tables",
                ",".join(missing),
                "--output-dir",
                str(out),
                "--overwrite",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return out


def _plain_strings(t: pa.Table) -> pa.Table:
    """string_view -> string (Spark and older readers prefer the classic layout)."""
    fields = [
        pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type, f.nullable)
        for f in t.schema
    ]
    return t.cast(pa.schema(fields))


def rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def shifted_batch(data_dir: Path, source: Path, index: int, partkeys: int | None = None) -> Path:
    """``source`` lineitem rows with order keys moved to ``(index + 1) * 10**9 + key``: new keys.

    ``partkeys``: fold ``l_partkey`` into ``1..partkeys`` (so one batch references valid parts on
    tables of every scale: SF0.01 has 2,000 parts).
    """
    out = data_dir / "batches" / f"{source.parent.name}_b{index}{f'_p{partkeys}' if partkeys else ''}.parquet"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        t = _plain_strings(pq.read_table(source))
        i = t.schema.get_field_index("l_orderkey")
        t = t.set_column(i, "l_orderkey", pc.add(t["l_orderkey"], pa.scalar((index + 1) * 10**9, pa.int64())))
        if partkeys:
            j = t.schema.get_field_index("l_partkey")
            k = t["l_partkey"]
            wraps = pc.divide(pc.subtract(k, 1), partkeys)  # integer division: keys are positive
            t = t.set_column(
                j, "l_partkey", pc.subtract(k, pc.multiply(wraps, partkeys)).cast(k.type)
            )  # (k - 1) % n + 1
        tmp = out.with_suffix(".tmp")
        pq.write_table(t, tmp)
        tmp.rename(out)
    return out


def split_tail(data_dir: Path, source: Path, tail_fraction: float = 0.1) -> tuple[Path, Path]:
    """Split ``source`` (sorted by order key) into main (first 90%) and batch (the highest keys)."""
    base = data_dir / "split" / source.parent.name
    main, batch = base / "main.parquet", base / "batch.parquet"
    if not (main.is_file() and batch.is_file()):
        base.mkdir(parents=True, exist_ok=True)
        t = _plain_strings(pq.read_table(source))
        keys = t["l_orderkey"]
        cut_at = keys[int(len(t) * (1 - tail_fraction))].as_py()
        is_batch = pc.greater_equal(keys, pa.scalar(cut_at, pa.int64()))
        pq.write_table(t.filter(pc.invert(is_batch)), main, row_group_size=256 * 1024)
        pq.write_table(t.filter(is_batch), batch)
    return main, batch


def spread_batch(data_dir: Path, source: Path, main_max_key: int) -> Path:
    """``source`` lineitem rows with order keys moved into the unused gaps of main's whole key range.

    TPC-H order keys are sparse: in each block of 32 only the first 8 (``32 b + 1 .. 32 b + 8``) are
    used. Order ``i`` of ``source`` (in key order) goes to ``32 b + 20`` with ``b`` spread evenly over
    main's blocks, so every key is new yet the batch's min/max span main's whole range: min/max
    pruning of main's files cannot help (like random or UUID keys in real tables).
    """
    out = data_dir / "batches" / f"{source.parent.name}_spread_{main_max_key}.parquet"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        t = _plain_strings(pq.read_table(source))
        keys = t["l_orderkey"]
        distinct = pc.unique(keys).sort()
        blocks = main_max_key // 32
        idx = pc.index_in(keys, value_set=distinct)  # order i = rank of the key among the batch's keys
        block = pc.divide(pc.multiply(idx.cast(pa.int64()), pa.scalar(blocks, pa.int64())), len(distinct))
        new = pc.add(pc.multiply(block, pa.scalar(32, pa.int64())), pa.scalar(20, pa.int64()))
        t = t.set_column(t.schema.get_field_index("l_orderkey"), "l_orderkey", new.cast(keys.type))
        tmp = out.with_suffix(".tmp")
        pq.write_table(t, tmp)
        tmp.rename(out)
    return out
