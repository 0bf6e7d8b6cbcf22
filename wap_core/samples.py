"""Samples of rows kept as diagnostics: trimmed BEFORE they are serialised, so the JSON is always valid.

A sample travels in an Iceberg snapshot property (``wap.malformed-sample``), whose value has a
budget. Cutting the serialised text to the budget would cut it mid-string (invalid JSON, the sample
lost); instead each value is shortened, rows are capped, and whole rows are dropped until the JSON
fits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from wap_core.values import JsonObject

log = logging.getLogger(__name__)

MAX_ROWS = 10
MAX_VALUE_CHARS = 200
BUDGET_CHARS = 8000  # the snapshot-property budget of one sample
ELLIPSIS = "…"


def trim_value(value: Any, max_chars: int = MAX_VALUE_CHARS) -> Any:
    """Strings longer than ``max_chars`` end in ``…``; other plain values pass; anything else as text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= max_chars else text[:max_chars] + ELLIPSIS


def trim_rows(
    rows: Sequence[JsonObject], max_rows: int = MAX_ROWS, max_chars: int = MAX_VALUE_CHARS
) -> list[JsonObject]:
    """At most ``max_rows`` rows, each value at most ``max_chars`` characters (column names too)."""
    return [
        {str(trim_value(k, max_chars)): trim_value(v, max_chars) for k, v in r.items()}
        for r in list(rows)[:max_rows]
    ]


def sample_json(
    rows: Sequence[JsonObject],
    budget: int = BUDGET_CHARS,
    max_rows: int = MAX_ROWS,
    max_chars: int = MAX_VALUE_CHARS,
) -> str:
    """Valid JSON of the trimmed sample, at most ``budget`` characters (whole rows dropped to fit)."""
    trimmed = trim_rows(rows, max_rows, max_chars)
    text = json.dumps(trimmed, ensure_ascii=False)
    while len(text) > budget and trimmed:
        trimmed.pop()
        text = json.dumps(trimmed, ensure_ascii=False)
    return text


def load_sample(text: str | None) -> list[JsonObject]:
    """A sample read back from a snapshot property; an unreadable one (written before samples were
    trimmed) is logged and read as empty instead of failing the audit or a rebase."""
    if not text:
        return []
    try:
        rows = json.loads(text)
    except ValueError as exc:
        log.warning("unreadable row sample in a snapshot property (%s); ignored", exc)
        return []
    if not isinstance(rows, list):
        log.warning("row sample in a snapshot property is not a list; ignored")
        return []
    return [r for r in rows if isinstance(r, dict)]
