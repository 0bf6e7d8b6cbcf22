"""Values Spark returns, as JSON can hold them (the one converter for profiles, checks and diffs)."""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from typing import Any


def jsonable(value: Any) -> Any:
    """A value Spark returned, as JSON can hold it (dates as ISO text, decimals as floats)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if not math.isnan(value) and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)
