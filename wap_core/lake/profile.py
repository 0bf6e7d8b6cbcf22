"""The column profile as types: a table's profile, each column's, its top values.

One shape for every profile: main's metadata-first profile (:mod:`wap_core.lake.metaprofile`), Spark's
profile of a batch or of main (:mod:`wap_core.analysis.diff`), the stored ones (``wap_profiles``,
``wap_batch_profiles`` in :mod:`wap_core.store.profiles`), the ``drift`` and ``anomaly`` checks and the
review. The stored JSON is :meth:`TableProfile.to_json`'s (byte for byte the rows written before these
types: key order kept), read back by :meth:`TableProfile.from_json` (rows cached before the accuracy
markers included). ``diff --json`` writes a column by :func:`wap_core.values.to_jsonable`, without the
HLL sketch (merge state, never shown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Final, TypeAlias

from wap_core.values import JSON, JsonObject, omit_none

FIELDS: Final = ("rows", "nulls", "null_pct", "distinct", "min", "max", "mean", "quantiles", "top_values")
EXACT: Final = "exact"
APPROXIMATE: Final = "approximate"

Quantiles: TypeAlias = Mapping[str, float]  # {"0.05": value, ...}: the quantile (as text) to its value


class ByKey:
    """Read access by JSON key (``col["batch"]["nulls"]``) for code written against the JSON form.

    The attributes are the interface; this view answers the keys :func:`~wap_core.values.to_jsonable`
    writes (fields left out of the JSON form are not keys).
    """

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if f.metadata.get(JSON, True) is not False)  # type: ignore[arg-type]

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The attribute named ``key`` if it is a JSON key, else ``default``."""
        return getattr(self, key) if key in self else default


@dataclass(frozen=True)
class TopValue(ByKey):
    """One of a column's most frequent values (as text, None for NULL): its count and its share of all rows (percent)."""

    value: Any
    count: int
    pct: float

    @classmethod
    def from_json(cls, d: JsonObject) -> TopValue:
        """A top value back from its JSON form."""
        return cls(d.get("value"), d.get("count", 0), d.get("pct", 0.0))

    def to_json(self) -> JsonObject:
        """The stored JSON form."""
        return {"value": self.value, "count": self.count, "pct": self.pct}


def accuracy_of(d: JsonObject) -> dict[str, str]:
    """``{field: "exact"|"approximate"}`` of a column's JSON form (profiles cached before the markers: derived)."""
    acc = d.get("accuracy")
    if isinstance(acc, dict) and set(acc) >= set(FIELDS):
        return {f: acc[f] for f in FIELDS}
    approx = {*(d.get("approximate") or []), "distinct", "quantiles"}  # HLL and percentile_approx estimates
    return {f: APPROXIMATE if f in approx else EXACT for f in FIELDS}


@dataclass(frozen=True)
class ColumnProfile(ByKey):
    """One column's profile (of main or of a batch).

    ``accuracy`` marks each field of :data:`FIELDS` ``exact`` or ``approximate`` (``approximate`` lists
    the approximate ones); ``hll`` is the base64 HLL sketch of a Spark profile (the distinct count's merge
    state: stored, never shown nor written by ``diff --json``).
    """

    type: str
    kind: str
    rows: int
    nulls: int
    null_pct: float
    distinct: int | None
    min: Any
    max: Any
    mean: float | None
    quantiles: Quantiles | None
    top_values: tuple[TopValue, ...] | None
    accuracy: Mapping[str, str]
    approximate: tuple[str, ...]
    hll: str | None = field(default=None, metadata={JSON: False})

    @classmethod
    def from_json(cls, d: JsonObject) -> ColumnProfile:
        """A column of a profile's JSON form (stored, or ``diff --json``)."""
        acc = accuracy_of(d)
        top = d.get("top_values")
        return cls(
            type=d.get("type", ""),
            kind=d.get("kind", ""),
            rows=d.get("rows", 0),
            nulls=d.get("nulls", 0),
            null_pct=d.get("null_pct", 0.0),
            distinct=d.get("distinct"),
            min=d.get("min"),
            max=d.get("max"),
            mean=d.get("mean"),
            quantiles=d.get("quantiles"),
            top_values=tuple(TopValue.from_json(t) for t in top) if top is not None else None,
            accuracy=acc,
            approximate=tuple(
                d["approximate"]
                if d.get("approximate") is not None
                else (f for f in FIELDS if acc[f] == APPROXIMATE)
            ),
            hll=d.get("hll"),
        )

    def to_json(self) -> JsonObject:
        """The stored JSON form (with the sketch), keys in the order the stored rows have them."""
        return {
            "type": self.type,
            "kind": self.kind,
            "rows": self.rows,
            "nulls": self.nulls,
            "null_pct": self.null_pct,
            "distinct": self.distinct,
            "hll": self.hll,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "quantiles": dict(self.quantiles) if self.quantiles is not None else None,
            "top_values": [t.to_json() for t in self.top_values] if self.top_values is not None else None,
            "accuracy": dict(self.accuracy),
            "approximate": list(self.approximate),
        }


@dataclass(frozen=True)
class ProfileSample(ByKey):
    """What a metadata-first profile's bounded sample read: rows, data files read, data files in all."""

    rows: int
    files: int
    files_total: int

    @classmethod
    def from_json(cls, d: JsonObject) -> ProfileSample:
        """The sample back from its JSON form."""
        return cls(int(d.get("rows", 0)), int(d.get("files", 0)), int(d.get("files_total", 0)))


@dataclass(frozen=True)
class TableProfile(ByKey):
    """A profile of a table's rows (main at a snapshot, or a batch): its row count and each column's profile.

    Main's profile also says how it was made: ``source`` (``scan`` | ``metadata`` | ``merged: ...``),
    ``basis`` in words and, for a metadata-first one, the ``sample`` it read. A batch's profile has none.
    """

    __json__: ClassVar[tuple[str, ...]] = ("rows", "columns", "source", "basis", "sample")

    rows: int
    columns: Mapping[str, ColumnProfile]
    source: str | None = field(default=None, metadata={JSON: omit_none})
    basis: str | None = field(default=None, metadata={JSON: omit_none})
    sample: ProfileSample | None = field(default=None, metadata={JSON: omit_none})

    def column(self, name: str) -> ColumnProfile | None:
        """One column's profile by name (None: no such column)."""
        return self.columns.get(name)

    @classmethod
    def from_json(cls, d: JsonObject) -> TableProfile:
        """A profile back from its stored JSON form."""
        sample = d.get("sample")
        return cls(
            rows=d.get("rows", 0),
            columns={str(n): ColumnProfile.from_json(c) for n, c in (d.get("columns") or {}).items()},
            source=d.get("source"),
            basis=d.get("basis"),
            sample=ProfileSample.from_json(sample) if sample else None,
        )

    def to_json(self) -> JsonObject:
        """The stored JSON form: ``rows``, ``columns`` (each with its sketch), then what is set of
        ``source``, ``basis`` and ``sample``."""
        out: JsonObject = {"rows": self.rows, "columns": {n: c.to_json() for n, c in self.columns.items()}}
        if self.source is not None:
            out["source"] = self.source
        if self.basis is not None:
            out["basis"] = self.basis
        if self.sample is not None:
            out["sample"] = {
                "rows": self.sample.rows,
                "files": self.sample.files,
                "files_total": self.sample.files_total,
            }
        return out
