"""Evaluation: every check's aggregates in one pass over the batch, then pure-Python verdicts.

1. Each check's measurement is looked up in the result cache by (table, batch head, fingerprint);
   only the checks without one are measured.
2. The pass: every aggregate of those checks (keyed ``<check name>::<local name>``) and the row
   count in one global aggregation of the batch. When checks need duplicate statistics of a key
   (``unique``), the batch is grouped by the key(s) in a second Spark job submitted at the same
   time (each job reads only its columns; the aggregates keep whole-stage generated code, and the
   grouping runs while the aggregation scans). A batch read as one split (known from the snapshot
   summaries) runs each query in that one task, counts a key's duplicates with one window count,
   and, when large, spreads its aggregates over :data:`AGGREGATE_JOBS` concurrent jobs so both
   cores work (:class:`PassPlan`). Row-level checks are judged and their failing rows sampled as
   soon as the aggregates are known, while the grouping may still run; the sample read's
   projection is parsed and analysed meanwhile. Aggregates observed while ingest wrote the batch
   (``precomputed``) are not computed again.
3. Look-ups beyond the pass (main, other tables), then one job sampling every failing row check.
4. Measurements are stored; verdicts (:meth:`CheckSpec.judge`) never run Spark, so a threshold
   change is judged from the cache.

A broken check (unknown column, bad SQL, a runtime error) is an ``error`` result; when the pass
fails, the checks are measured one by one to find it, and the others still run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wap_core.checks.base import (
    CheckResult,
    CheckSpec,
    MainContext,
    Measurement,
    jsonable,
    row_dict,
    short_error,
)
from wap_core.identifiers import quote_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from wap_core.checks.parsing import Suite

log = logging.getLogger(__name__)

SEP = "::"
ROWS = "_rows"
DUP_KEYS_COLLECTED = 10_000  # duplicated keys brought to the driver as they are (beyond: counted by Spark)
SPLIT_ROWS = 200_000  # a one-split batch of at least this many rows spreads its aggregates over ...
AGGREGATE_JOBS = 2  # ... this many concurrent jobs (measured: 600k rows 0.80 -> 0.70 s; 60k rows slower)
DUP_ROWS_COLLECTED = 20_000  # rows of duplicated keys brought to the driver by the one-task window count
DUP_EXAMPLES = 3
SAMPLE_OVERSAMPLING = 4  # a failing row is kept for the sample with probability ~ 4 n / failing rows
PREFIX_RATE = 16  # ... ~ 16 n / failing rows when a prefix of the batch is read (the read stops early)


class MeasurementCache(Protocol):
    """Where measurements of one batch head are kept (see :class:`wap_core.checks.store.ResultCache`)."""

    def load(self, fingerprints: Sequence[str]) -> dict[str, Measurement]:
        """The stored measurements among ``fingerprints``, by fingerprint."""
        ...

    def save(self, measurements: Mapping[str, Measurement]) -> None:
        """Store measurements by fingerprint."""
        ...


@dataclass
class Evaluation:
    """The results of a suite on one batch, with the measurements they were judged on."""

    results: list[CheckResult]
    rows: int
    measurements: dict[str, Measurement] = field(default_factory=dict)  # by check name
    measured: list[str] = field(default_factory=list)  # names measured now (the others came from the cache)


def metric_name(check: str, local: str) -> str:
    """The name of a check's aggregate in the pass: the check's name, ``::``, the local name."""
    return f"{check}{SEP}{local}"


def _alias(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _named(aggs: Mapping[str, str]) -> list[str]:
    return [f"{text} AS {_alias(name)}" for name, text in aggs.items()]


def suite_aggregates(checks: Sequence[CheckSpec], ctx: MainContext | None) -> dict[str, str]:
    """The plain aggregates of ``checks`` keyed by check name, plus the row count."""
    out = {ROWS: "count(1)"}
    for spec in checks:
        out.update({metric_name(spec.name, k): v for k, v in spec.aggregates(ctx).items()})
    return out


def observed_metrics(suite: Suite) -> list[Column]:
    """The suite's aggregates in a form ``DataFrame.observe`` can collect while the batch is written.

    Keyed by check name (``<check>::<local>``, and ``_rows``). Checks whose aggregates depend on
    stored state (``drift``) are left to the audit. Raises when any check cannot be built; callers
    then audit the written batch with its own pass.
    """
    from pyspark.sql import functions as F

    return [F.expr(t) for t in _named(suite_aggregates(suite.checks, None))]


def _aggregate(
    batch: DataFrame, plain: Mapping[str, str], planned: Callable[[], None] | None = None
) -> Measurement:
    """The ``plain`` aggregates in one global aggregation of the batch (whole-stage generated code).

    ``planned`` is called once the query is planned, before it runs (at once without aggregates;
    not at all when planning fails).
    """
    if not plain:
        if planned is not None:
            planned()
        return {}
    query = batch.selectExpr(*_named(plain))
    if planned is not None:
        query._jdf.queryExecution().executedPlan()  # the plan is kept: collect() runs this one
        planned()
    return query.collect()[0].asDict()


@dataclass(frozen=True)
class PassPlan:
    """How the pass runs on this batch (decided from metadata before it starts).

    ``one_task``: the batch is read as one split, so each query runs in one task and a key grouping
    needs no shuffle. ``aggregate_jobs``: the aggregates are spread over that many concurrent jobs
    (each reads only its checks' columns), so a large one-split batch keeps both cores busy.
    """

    one_task: bool = False
    aggregate_jobs: int = 1


def _split_aggregates(plain: Mapping[str, str], ways: int) -> list[dict[str, str]]:
    """``plain`` in ``ways`` parts of about as many expressions, each check's aggregates together."""
    by_check: dict[str, dict[str, str]] = {}
    for name, text in plain.items():
        by_check.setdefault(name.split(SEP, 1)[0], {})[name] = text
    parts: list[dict[str, str]] = [{} for _ in range(max(1, ways))]
    for group in sorted(by_check.values(), key=len, reverse=True):
        min(parts, key=len).update(group)
    return [p for p in parts if p]


def _run(
    batch: DataFrame,
    plain: Mapping[str, str],
    keys: Mapping[str, tuple[str, ...]],
    then: Callable[[Measurement], None] | None = None,
    meanwhile: Callable[[], None] | None = None,
    plan: PassPlan | None = None,
) -> Measurement:
    """``plain`` aggregates and, per check in ``keys``, ``dup_rows``/``dup_keys``/``dup_examples``.

    With both, the aggregation and the key grouping are concurrent Spark jobs (the aggregates on
    other threads that inherit this thread's job group): each reads only the columns it needs, the
    aggregates stay in generated code, and the grouping runs while the aggregation scans. The
    aggregate queries are planned first, so that the grouping's planning does not compete with
    theirs for the cores: they are on the critical path (the failing-row read waits for them), the
    grouping is not. ``then`` gets the aggregates as soon as they are all known, on the thread that
    finished last, while the grouping may still run (the engine starts the failing-row sample read
    there). ``meanwhile`` runs once the aggregates are planned, beside the grouping (on a thread of
    its own) while they may still run: driver-side preparation that must not wait for them.
    """
    plan = plan or PassPlan()
    parts = _split_aggregates(plain, plan.aggregate_jobs) if plain else []
    if not keys and meanwhile is None and len(parts) <= 1:
        values = _aggregate(batch, plain)
        if then is not None:
            then(values)
        return values
    if not parts and then is None:
        return _group(batch, keys, plan.one_task)
    from pyspark import InheritableThread

    shared = _SharedPass(batch, max(1, len(parts)), then)
    # no part: one side still runs (``then`` runs, once; the grouping waits for its "planned")
    sides = [
        InheritableThread(
            target=shared.aggregates_then, args=(part,), name=f"wap-aggregates-{i}", daemon=True
        )
        for i, part in enumerate(parts or [{}])
    ]
    helpers = list(sides)
    for side in sides:
        side.start()
    try:
        shared.all_planned.wait()
        if meanwhile is not None and keys:
            beside = InheritableThread(
                target=shared.run_meanwhile, args=(meanwhile,), name="wap-prepare", daemon=True
            )
            helpers.append(beside)
            beside.start()
        grouped = _group(batch, keys, plan.one_task) if keys else {}
        if meanwhile is not None and not keys:
            meanwhile()
    finally:
        for helper in helpers:
            helper.join()
    if shared.error is not None:
        raise shared.error
    return {**shared.values, **grouped}


class _SharedPass:
    """What the threads of one concurrent pass share: the aggregates found so far, the first error.

    The grouping is planned once every aggregate query is (``all_planned``): the aggregates, on the
    critical path (the sample read waits for them), are analysed and planned without the grouping's
    planning competing for the cores; the grouping then plans and runs while they run.
    """

    def __init__(self, batch: DataFrame, parts: int, then: Callable[[Measurement], None] | None) -> None:
        self.batch, self.then = batch, then
        self.lock = threading.Lock()
        self.values: Measurement = {}
        self.left = self.unplanned = parts
        self.error: BaseException | None = None
        self.all_planned = threading.Event()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc

    def one_planned(self) -> None:
        with self.lock:
            self.unplanned -= 1
            if self.unplanned <= 0:
                self.all_planned.set()

    def aggregates_then(self, part: dict[str, str]) -> None:
        try:
            got = _aggregate(self.batch, part, self.one_planned)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            with self.lock:
                self._fail(exc)
                self.left -= 1
            self.all_planned.set()
            return
        with self.lock:
            self.values.update(got)
            self.left -= 1
            last = self.left == 0 and self.error is None
        if last and self.then is not None:
            try:
                self.then(dict(self.values))
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                self._fail(exc)

    def run_meanwhile(self, prepare: Callable[[], None]) -> None:
        try:
            prepare()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            self._fail(exc)


def _group(batch: DataFrame, keys: Mapping[str, tuple[str, ...]], one_task: bool = False) -> Measurement:
    """Per check in ``keys``: ``dup_rows``, ``dup_keys`` and ``dup_examples`` from one grouping of the batch."""
    from pyspark.sql import functions as F

    groups: dict[tuple[str, ...], list[str]] = {}
    for name, cols in keys.items():
        groups.setdefault(tuple(cols), []).append(name)
    if one_task and len(groups) == 1:
        (cols,) = groups
        found = _duplicated_rows(batch, cols)
        if found is not None:
            return {metric_name(name, k): v for name in groups[cols] for k, v in found.items()}
    n = F.col("__n")
    if len(groups) == 1:
        (cols,) = groups
        counted = batch.groupBy(*[F.col(quote_column(c)) for c in cols]).agg(F.count(F.lit(1)).alias("__n"))
        fields = {0: [(c, c) for c in cols]}
    else:
        # one grouping per key: explode each row into one struct per key (other keys NULL) and count
        types = {c: batch.schema[c].dataType for cols in groups for c in cols}
        slots = [(g, j, c) for g, cols in enumerate(groups) for j, c in enumerate(cols)]
        structs = [
            F.struct(
                F.lit(g).alias("__g"),
                *[
                    (F.col(quote_column(c)) if sg == g else F.lit(None).cast(types[c])).alias(f"__k{sg}_{j}")
                    for sg, j, c in slots
                ],
            )
            for g in range(len(groups))
        ]
        exploded = batch.select(F.explode(F.array(*structs)).alias("__s")).select("__s.*")
        counted = exploded.groupBy(*exploded.columns).agg(F.count(F.lit(1)).alias("__n"))
        fields = {g: [(f"__k{g}_{j}", c) for j, c in enumerate(cols)] for g, cols in enumerate(groups)}
    # Only the duplicated keys leave the grouping: usually few, so they are collected as they are
    # (counts and examples on the driver, no second aggregation stage); past DUP_KEYS_COLLECTED the
    # statistics are aggregated by Spark instead.
    dups = [r.asDict() for r in counted.where(n > 1).limit(DUP_KEYS_COLLECTED + 1).collect()]
    values: Measurement = {}
    if len(dups) > DUP_KEYS_COLLECTED:
        g_ = F.col("__g") if len(groups) > 1 else None
        stats = []
        for g in range(len(groups)):
            dup = (n > 1) & (g_ == g) if g_ is not None else n > 1
            stats += [F.sum(F.when(dup, n)).alias(f"r{g}"), F.count(F.when(dup, n)).alias(f"k{g}")]
        row = counted.agg(*stats).collect()[0]
        totals = {g: (int(row[f"r{g}"] or 0), int(row[f"k{g}"] or 0)) for g in range(len(groups))}
    else:
        totals = {
            g: (
                sum(d["__n"] for d in dups if d.get("__g", 0) == g),
                sum(1 for d in dups if d.get("__g", 0) == g),
            )
            for g in range(len(groups))
        }
    for g, names in enumerate(groups.values()):
        mine = [d for d in dups if d.get("__g", 0) == g][:DUP_EXAMPLES]
        examples = [{**{c: d[f] for f, c in fields[g]}, "count": d["__n"]} for d in mine]
        for name in names:
            values[metric_name(name, "dup_rows")], values[metric_name(name, "dup_keys")] = totals[g]
            values[metric_name(name, "dup_examples")] = examples
    return values


def _duplicated_rows(batch: DataFrame, cols: tuple[str, ...]) -> Measurement | None:
    """``dup_rows``, ``dup_keys`` and ``dup_examples`` of one key on a batch read in ONE task, or None
    when more than :data:`DUP_ROWS_COLLECTED` rows share a key (the grouping then counts them).

    A window count over the key sorts the batch's key columns once; the hash grouping would hash
    every key twice in that task (its partial and final aggregation, with no exchange between).
    Rows of the same key (NULLs included) count together, as in ``GROUP BY``.
    """
    key = ", ".join(quote_column(c) for c in cols)
    counted = batch.selectExpr(
        *[quote_column(c) for c in cols], f"count(1) OVER (PARTITION BY {key}) AS `__n`"
    )
    rows = counted.where("`__n` > 1").limit(DUP_ROWS_COLLECTED + 1).collect()
    if len(rows) > DUP_ROWS_COLLECTED:
        return None
    per_key: dict[tuple[Any, ...], int] = {}
    try:
        for r in rows:
            per_key[tuple(r[: len(cols)])] = int(r["__n"])
        ordered = sorted(per_key.items(), key=lambda kv: [(v is not None, v) for v in kv[0]])
    except TypeError:  # key values Python cannot hash or order (arrays, maps): the grouping counts them
        return None
    examples = [{**dict(zip(cols, k, strict=True)), "count": n} for k, n in ordered[:DUP_EXAMPLES]]
    return {"dup_rows": len(rows), "dup_keys": len(per_key), "dup_examples": examples}


def _measure_pass(
    batch: DataFrame,
    aggs: dict[str, dict[str, str]],
    keys: dict[str, tuple[str, ...]],
    precomputed: Measurement | None,
    errors: dict[str, BaseException],
    then: Callable[[Measurement], None] | None = None,
    meanwhile: Callable[[], None] | None = None,
    plan: PassPlan | None = None,
) -> Measurement:
    plan = plan or PassPlan()
    plain = {ROWS: "count(1)"}
    for name, texts in aggs.items():
        plain.update({metric_name(name, k): v for k, v in texts.items()})
    values: Measurement = {}
    if precomputed is not None and ROWS in precomputed:
        values = {k: v for k, v in precomputed.items() if k in plain}
        plain = {k: v for k, v in plain.items() if k not in values}
    known = dict(values)
    if not plain and not keys:
        if then is not None:
            then(known)
        return values
    try:
        values.update(
            _run(
                batch, plain, keys, None if then is None else lambda v: then({**known, **v}), meanwhile, plan
            )
        )
        return values
    except Exception as exc:  # noqa: BLE001 - isolate the broken check(s) below
        log.info(
            "the one pass failed (%s); measuring the checks one by one to find the broken one",
            short_error(exc),
        )
    single = PassPlan(one_task=plan.one_task)
    if ROWS in plain:
        values.update(_run(batch, {ROWS: plain[ROWS]}, {}, plan=single))
    for name in dict.fromkeys([*aggs, *keys]):
        mine = {k: v for k, v in plain.items() if k.startswith(name + SEP) and k[: len(name)] == name}
        try:
            values.update(_run(batch, mine, {name: keys[name]} if name in keys else {}, plan=single))
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            errors[name] = exc
    return values


def evaluate(
    batch: DataFrame,
    suite: Suite,
    ctx: MainContext,
    sample_rows: int = 5,
    precomputed: Measurement | None = None,
    cache: MeasurementCache | None = None,
    single_split: bool = False,
    rows_hint: int | None = None,
) -> Evaluation:
    """Evaluate ``suite`` on the new rows ``batch``. Never raises for a broken check.

    ``precomputed`` holds aggregates observed while exactly these rows were written (see
    :func:`observed_metrics`); ``cache`` the stored measurements of this batch head;
    ``single_split`` tells that the batch is known, from metadata, to be read as one split
    (:func:`wap_core.lake.batch.single_split`), so Spark need not plan the read to find out;
    ``rows_hint`` its row count from metadata (a large one-split batch spreads its aggregates
    over :data:`AGGREGATE_JOBS` concurrent jobs).
    """
    specs = list(suite.checks)
    errors: dict[str, BaseException] = {}
    fingerprints, measurements, todo = _from_cache(specs, ctx, cache, errors)
    # 1. what the pass must compute (SQL text only; no Spark work yet)
    aggs, keys = _pass_inputs(todo, ctx, errors)
    todo = [s for s in todo if s.name not in errors]
    batch, plan = _plan_pass(batch, todo, single_split, rows_hint)

    # 2. the pass (also when everything is cached but nothing tells the row count)
    rows: int | None = next((int(m[ROWS]) for m in measurements.values() if m.get(ROWS) is not None), None)
    fresh: dict[str, Measurement] = {}
    values: Measurement = {}
    if todo or rows is None:
        values = _the_pass(batch, todo, aggs, keys, ctx, precomputed, sample_rows, plan, fresh, errors)
        rows = int(values.get(ROWS) or 0)
    todo = [s for s in todo if s.name not in errors]

    # 3. each check's own look-ups (the checks not measured with the aggregates above)
    _measure([s for s in todo if s.name not in fresh], values, rows, batch, ctx, fresh, errors)

    # 4. samples of failing rows: one job for every failing row-level check not sampled yet
    _sample_failing(batch, [s for s in todo if s.name not in errors], fresh, sample_rows)
    fresh = {name: m for name, m in fresh.items() if name not in errors}
    _store_fresh(fresh, fingerprints, measurements, cache)

    # 5. verdicts: pure Python
    results = _verdicts(specs, measurements, errors, ctx)
    return Evaluation(results, rows or 0, measurements, list(fresh))


def _plan_pass(
    batch: DataFrame, todo: list[CheckSpec], single_split: bool, rows_hint: int | None
) -> tuple[DataFrame, PassPlan]:
    """The batch as the pass reads it (one task where it can) and how the pass spreads its work."""
    if not todo:
        return batch, PassPlan()
    if single_split:
        batch, one_task = batch.coalesce(1), True
    else:
        batch, one_task = _one_task(batch)
    large = rows_hint is not None and rows_hint >= SPLIT_ROWS
    return batch, PassPlan(one_task, AGGREGATE_JOBS if one_task and large else 1)


def _the_pass(
    batch: DataFrame,
    todo: list[CheckSpec],
    aggs: dict[str, dict[str, str]],
    keys: dict[str, tuple[str, ...]],
    ctx: MainContext,
    precomputed: Measurement | None,
    sample_rows: int,
    plan: PassPlan,
    fresh: dict[str, Measurement],
    errors: dict[str, BaseException],
) -> Measurement:
    """The one pass's values. Row-level checks are measured, and their failing rows sampled, into
    ``fresh`` as soon as the aggregates are known: on the aggregates' thread, while a key grouping
    may still run."""
    early = [s for s in todo if s.row_level and s.name not in keys]
    # the sample read's projection (every early check's failure flag), parsed and analysed while the
    # aggregates run, so that once they are known only the read's filter is left to build
    flagged = _FailureFlags(batch, early) if early and sample_rows > 0 else None

    def rows_known(v: Measurement) -> None:
        if v.get(ROWS) is not None:
            _measure(early, v, int(v[ROWS]), batch, ctx, fresh, errors)
            _sample_failing(batch, early, fresh, sample_rows, flagged)

    return _measure_pass(
        batch,
        {n: a for n, a in aggs.items() if a},
        keys,
        precomputed,
        errors,
        rows_known if early else None,
        flagged.prepare if flagged is not None else None,
        plan,
    )


def _store_fresh(
    fresh: dict[str, Measurement],
    fingerprints: dict[str, str],
    measurements: dict[str, Measurement],
    cache: MeasurementCache | None,
) -> None:
    """Add the new measurements to ``measurements`` and to the cache, under their fingerprints."""
    for name, m in fresh.items():
        measurements[name] = jsonable(m)
    if cache is not None and fresh:
        cache.save({fingerprints[n]: measurements[n] for n in fresh})


def _from_cache(
    specs: list[CheckSpec],
    ctx: MainContext,
    cache: MeasurementCache | None,
    errors: dict[str, BaseException],
) -> tuple[dict[str, str], dict[str, Measurement], list[CheckSpec]]:
    """``(fingerprints, measurements found in the cache, the checks still to measure)``; broken ones in ``errors``."""
    fingerprints: dict[str, str] = {}
    for spec in specs:
        try:
            fingerprints[spec.name] = spec.fingerprint(ctx)
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            errors[spec.name] = exc
    cached: dict[str, Measurement] = {}
    if cache is not None and fingerprints:
        cached = cache.load(list(fingerprints.values()))
    measurements: dict[str, Measurement] = {}
    todo: list[CheckSpec] = []
    for spec in specs:
        if spec.name in errors:
            continue
        fp = fingerprints[spec.name]
        if fp in cached:
            measurements[spec.name] = cached[fp]
        else:
            todo.append(spec)
    return fingerprints, measurements, todo


def _pass_inputs(
    todo: list[CheckSpec], ctx: MainContext, errors: dict[str, BaseException]
) -> tuple[dict[str, dict[str, str]], dict[str, tuple[str, ...]]]:
    """The aggregates (SQL text) and key groupings the one pass computes for ``todo``."""
    aggs: dict[str, dict[str, str]] = {}
    keys: dict[str, tuple[str, ...]] = {}
    for spec in todo:
        try:
            aggs[spec.name] = spec.aggregates(ctx)
            k = spec.key_columns()
            if k:
                keys[spec.name] = tuple(k)
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            errors[spec.name] = exc
    return aggs, keys


def _verdicts(
    specs: list[CheckSpec],
    measurements: dict[str, Measurement],
    errors: dict[str, BaseException],
    ctx: MainContext,
) -> list[CheckResult]:
    """Each check judged on its measurement (pure Python); a broken check is an error result."""
    results: list[CheckResult] = []
    for spec in specs:
        if spec.name in errors:
            log.info("check %s is broken: %s", spec.name, short_error(errors[spec.name]))
            results.append(spec.error(errors[spec.name]))
            continue
        try:
            results.append(spec.judge(measurements[spec.name], ctx))
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            log.warning("check %s could not be judged: %s", spec.name, short_error(exc))
            results.append(spec.error(exc))
    return results


def _one_task(batch: DataFrame) -> tuple[DataFrame, bool]:
    """``batch`` as one partition when it is read as ONE split anyway (a small batch: one file, one row
    group): no shuffle can add parallelism to it, so every aggregation (the pass, the key grouping)
    runs in that one task, with no exchange and no second stage or job. True when so."""
    if batch.rdd.getNumPartitions() == 1:
        return batch.coalesce(1), True
    return batch, False


def _measure(
    specs: Sequence[CheckSpec],
    values: Measurement,
    rows: int,
    batch: DataFrame,
    ctx: MainContext,
    fresh: dict[str, Measurement],
    errors: dict[str, BaseException],
) -> None:
    """Each spec's measurement from the pass's ``values`` plus its own look-ups, into ``fresh``."""
    for spec in specs:
        prefix = spec.name + SEP
        m: Measurement = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        m[ROWS] = rows
        try:
            fresh[spec.name] = spec.measure_more(m, batch, ctx)
        except Exception as exc:  # noqa: BLE001 - a broken check is a result, not a crash
            errors[spec.name] = exc


def _sample_failing(
    batch: DataFrame,
    specs: Sequence[CheckSpec],
    fresh: dict[str, Measurement],
    n: int,
    flagged: _FailureFlags | None = None,
) -> None:
    """Up to ``n`` failing rows of every failing row-level check in ``specs`` not sampled yet, from ONE
    filtered read of the batch (no shuffle, no per-check scan).

    The pass told how many rows fail each check; a failing row is kept with probability about
    ``rate * n / failing`` (all of them when few fail), decided by a hash of the row, so one read
    returns a few dozen rows per check, the same on every run. When every check's kept rows are
    dense enough, the read stops early: the ``limit`` ends the scan once a prefix of the batch holds
    about twice the rows each check needs (:data:`PREFIX_RATE`); a check left short then (failing
    rows bunched at the end) is sampled again by a full read, thinned as before.
    """
    checks = [
        s
        for s in specs
        if s.name in fresh
        and s.row_level
        and int(fresh[s.name].get("fail") or 0) > 0
        and "sample" not in fresh[s.name]
    ]
    if not checks or n <= 0:
        return
    for spec in checks:
        fresh[spec.name]["sample"] = []
    failing = {spec.name: int(fresh[spec.name].get("fail") or 0) for spec in checks}
    try:
        # the share of the batch a prefix read must cover so each check expects 2 n kept rows
        kept = {name: min(f, PREFIX_RATE * n) for name, f in failing.items()}
        share = max((2 * n / k if k else 1.0) for k in kept.values())
        short = checks
        if share < 1.0:
            cap = max(1, int(sum(kept.values()) * share))
            complete = _sample_read(batch, checks, fresh, n, PREFIX_RATE, cap, flagged)
            short = [s for s in checks if len(fresh[s.name]["sample"]) < min(n, failing[s.name])]
            if complete or not short:
                return
            for spec in short:
                fresh[spec.name]["sample"] = []
        cap = 10 * SAMPLE_OVERSAMPLING * n * len(short)
        _sample_read(batch, short, fresh, n, SAMPLE_OVERSAMPLING, cap, flagged)
    except Exception as exc:  # noqa: BLE001 - samples are diagnostics; the verdicts stand
        log.warning("could not sample the failing rows: %s", short_error(exc))


def _bucket(cols: Sequence[str]) -> str:
    """A row's sampling bucket in [0, 1e6): a hash of every column (the same row, the same bucket)."""
    return f"pmod(xxhash64({', '.join(cols)}), 1000000)"


class _FailureFlags:
    """The batch with a bucket column and each candidate row check's failure flag, built ahead.

    :meth:`prepare` parses and analyses that projection (tens of milliseconds of driver work)
    while the pass runs, so the sample read only adds its filter on these columns. Thread-safe;
    a check whose condition cannot be built leaves the read to build its own query.
    """

    PREFIX = "__wap_"

    def __init__(self, batch: DataFrame, checks: Sequence[CheckSpec]) -> None:
        self.batch = batch
        self.index = {spec.name: i for i, spec in enumerate(checks)}
        self._checks = list(checks)
        self._lock = threading.Lock()
        self._frame: DataFrame | None = None
        self._prepared = False

    @property
    def bucket(self) -> str:
        """The bucket column's name."""
        return f"{self.PREFIX}bucket"

    def flag(self, check: str) -> str:
        """The failure flag column's name of ``check``."""
        return f"{self.PREFIX}fail{self.index[check]}"

    def prepare(self) -> None:
        """Build the projection once (a no-op afterwards)."""
        with self._lock:
            if self._prepared:
                return
            self._prepared = True
            if any(c.startswith(self.PREFIX) for c in self.batch.columns):
                return  # the batch's own columns could clash with ours: no projection ahead
            cols = [quote_column(c) for c in self.batch.columns]
            try:
                self._frame = self.batch.selectExpr(
                    *cols,
                    f"{_bucket(cols)} AS {_alias(self.bucket)}",
                    *[
                        f"coalesce(({s.fail_sql()}), false) AS {_alias(self.flag(s.name))}"
                        for s in self._checks
                    ],
                )
            except Exception as exc:  # noqa: BLE001 - the read then builds its own query, per check
                log.info("sample projection not built ahead: %s", short_error(exc))

    def frame_for(self, checks: Sequence[CheckSpec]) -> DataFrame | None:
        """The prepared projection when it flags every one of ``checks``, else None."""
        if not all(spec.name in self.index for spec in checks):
            return None
        self.prepare()
        return self._frame


def _sample_read(
    batch: DataFrame,
    checks: list[CheckSpec],
    fresh: dict[str, Measurement],
    n: int,
    rate: int,
    cap: int,
    flagged: _FailureFlags | None = None,
) -> bool:
    """One filtered read keeping a failing row with probability ``rate * n / failing``, at most ``cap``
    rows; fills each check's sample up to ``n``. True when the read covered the whole batch."""
    # built as SQL text (parsed by Spark once) rather than from ~100 Column objects, one Py4J call
    # each: on a small batch those calls cost as much as the read itself. The check predicates are
    # the same texts the pass's ``count_if`` aggregates embed. With ``flagged`` prepared they are
    # already columns: only the filter is parsed now, and each row's checks are told apart here.
    ahead = flagged.frame_for(checks) if flagged is not None else None
    thresholds: list[int | None] = []
    for spec in checks:
        failing = int(fresh[spec.name].get("fail") or 0)
        keep = min(1.0, rate * n / failing) if failing else 1.0
        thresholds.append(int(keep * 1_000_000) if keep < 1.0 else None)
    if ahead is not None and flagged is not None:
        bucket, flag_cols = flagged.bucket, [flagged.flag(spec.name) for spec in checks]
        conds = [
            _alias(f) if t is None else f"({_alias(f)} AND {_alias(bucket)} < {t})"
            for f, t in zip(flag_cols, thresholds, strict=True)
        ]
        found = [row_dict(r) for r in ahead.where(" OR ".join(conds)).limit(cap).collect()]
        hits = [
            [
                j
                for j, (f, t) in enumerate(zip(flag_cols, thresholds, strict=True))
                if d[f] and (t is None or d[bucket] < t)
            ]
            for d in found
        ]
        found = [{k: v for k, v in d.items() if not k.startswith(flagged.PREFIX)} for d in found]
    else:
        cols = [quote_column(c) for c in batch.columns]
        conds = []
        for spec, t in zip(checks, thresholds, strict=True):
            cond = f"coalesce(({spec.fail_sql()}), false)"
            conds.append(cond if t is None else f"({cond} AND {_bucket(cols)} < {t})")
        selected = [f"{c} AS `__fail{i}`" for i, c in enumerate(conds)]
        rows = batch.where(" OR ".join(conds)).selectExpr(*cols, *selected).limit(cap).collect()
        found = [row_dict(r) for r in rows]
        hits = [[j for j in range(len(checks)) if d.pop(f"__fail{j}")] for d in found]
    for d, js in zip(found, hits, strict=True):
        for j in js:
            sample = fresh[checks[j].name]["sample"]
            if len(sample) < n:
                sample.append(dict(d))
    rows_read = len(found)
    return rows_read < cap
