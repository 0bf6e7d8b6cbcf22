"""Values as JSON can hold them: Spark's values (:func:`jsonable`) and the core's results (:func:`to_jsonable`).

:func:`to_jsonable` is the one serializer of the core's dataclasses and enums (every ``--json`` of the
CLI, the orchestrators' XComs, the stored audits, the notification payloads). A dataclass is written
field by field, in order; what its JSON form renames, drops or adds is declared on the class, not coded:

* ``field(metadata={"json": "key"})`` writes the field under another key;
* ``field(metadata={"json": False})`` leaves it out;
* ``field(metadata={"json": view})`` writes ``view(value)`` (a view may answer :data:`OMIT`);
* ``__json__: ClassVar[tuple[str, ...]]`` lists what is written, in order: field names and names of
  properties or methods (called without arguments) whose values are added; ``...`` stands for the
  fields not named (in their order). Without it every field is written.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import math
from collections.abc import Mapping
from enum import Enum
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, overload

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

JSON: Final = "json"  # the key of a dataclass field's metadata that shapes its JSON (see the module's doc)


class _Omit(Enum):
    OMIT = "omit"


OMIT: Final = _Omit.OMIT  # a view's answer: leave the key out
JsonOrder: TypeAlias = tuple[str | EllipsisType, ...]  # a class's ``__json__``
# A JSON object (``json.loads``/``json.dumps``): the one shape of untyped payloads that cross a signature
# (stored JSON, journal details, webhook bodies, orchestrator XComs).
JsonObject: TypeAlias = dict[str, Any]
# The same, read-only (a parsed YAML or JSON mapping handed on without being changed).
JsonMapping: TypeAlias = Mapping[str, Any]
# A row's values by column name as Spark gives them (``Row.asDict()``) or a result's fields by name before
# they are typed: values of any Python type, not yet JSON.
Record: TypeAlias = dict[str, Any]


def seconds_view(seconds: float) -> float:
    """A duration in seconds as the JSON forms show it: to the millisecond (a field's ``json`` view)."""
    return round(seconds, 3)


def omit_none(value: Any) -> Any:
    """A field's ``json`` view that leaves the key out while the value is None."""
    return OMIT if value is None else value


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


@overload
def to_jsonable(obj: DataclassInstance) -> JsonObject: ...


@overload
def to_jsonable(obj: object) -> Any: ...


def to_jsonable(obj: object) -> Any:
    """``obj`` as plain JSON values (dict, list, str, int, float, bool, None), for ``json.dumps``.

    Dataclasses as objects (shaped by their declarations, see the module's doc), enums as their
    values, times as ISO 8601, decimals as whole numbers or floats, bytes as hex, tuples and sets as
    lists; anything else as its ``str`` (a :class:`~wap_core.identifiers.TableId`, a path).
    """
    if isinstance(obj, Enum):
        return to_jsonable(obj.value)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {key: to_jsonable(value) for key, value in _items(obj)}
    if isinstance(obj, Mapping):
        return {_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, decimal.Decimal):
        return int(obj) if obj == obj.to_integral_value() else float(obj)
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        return obj.isoformat()
    if isinstance(obj, bytes):
        return obj.hex()
    return str(obj)


def _key(key: Any) -> Any:
    """A mapping's key as ``json.dumps`` writes it (str, numbers, bools and None it writes itself)."""
    if isinstance(key, Enum):
        return _key(key.value)
    return key if key is None or isinstance(key, (str, int, float, bool)) else str(key)


def _items(obj: Any) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a dataclass's JSON form, in order (``__json__`` and the fields' metadata)."""
    by_name = {f.name: f for f in dataclasses.fields(obj)}
    order: tuple[Any, ...] = getattr(type(obj), "__json__", (...,))
    named = {n for n in order if isinstance(n, str)}
    out: list[tuple[str, Any]] = []
    for entry in order:
        for name in [n for n in by_name if n not in named] if entry is ... else [entry]:
            f = by_name.get(name)
            if f is None:  # a property or a method: its value is added
                value = getattr(obj, name)
                out.append((name, value() if callable(value) else value))
                continue
            how = f.metadata.get(JSON, True)
            value = getattr(obj, name)
            if how is False:
                continue
            if callable(how):
                value = how(value)
                if value is OMIT:
                    continue
            out.append((how if isinstance(how, str) else name, value))
    return out
