"""Durations written the way people write them: ``14d``, ``36h``, ``90m``, ``30s``, ``2w``, ``1.5h``.

Used by retention settings (``branch_ttl``, ``snapshot_retention``, ``gc --older-than``) and the
``wap.branch-ttl`` table property. No dependency on the rest of wap_core but its exceptions.
"""

from __future__ import annotations

import re
from datetime import timedelta

from wap_core.exceptions import ValidationError

UNITS: dict[str, float] = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """``'36h'`` -> ``timedelta(hours=36)``. Units: s, m, h, d, w; ``0s`` is allowed, negatives are not."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise ValidationError(
            f"invalid {what} {text!r}: use a number and one of s, m, h, d, w (e.g. 14d, 36h)"
        )
    return timedelta(seconds=float(m.group(1)) * UNITS[m.group(2)])


def format_duration(value: timedelta | float) -> str:
    """The largest whole unit that fits (weeks are shown as days): 1209600 s -> ``14d``, 5400 s -> ``90m``."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    for unit in ("d", "h", "m"):
        size = UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:g}s"
