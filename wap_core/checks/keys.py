"""Look-ups of the batch's keys in a table's main, for ``unique`` (against main) and ``references``.

Both checks ask which of the batch's keys exist in a big table. The batch's key range (min/max
from the one pass) is pushed into the scan first, so Iceberg skips every file of main whose
min/max miss it (a batch of new keys at the end of the range reads no file of main). When the keys
cannot be pruned that way (new keys spread over main's whole range: random ids, UUIDs, keys in
gaps) main must be read, and the plan decides the cost:

- only main's key columns are read (column pruning), never whole rows;
- main's first key column alone is streamed once past a broadcast of the batch's first key column
  (one value per row, no aggregation of the batch): no shuffle and no ``distinct`` of main's keys
  (which used to shuffle every key of main), and one column read instead of all the key's. Only
  when values are shared (usually none) are main's whole keys with those values read (pruned by
  the IN list), brought to the driver and matched exactly with the batch's whole keys;
- when too many share it (a low-cardinality first key column) or the batch is too big to broadcast,
  the batch's distinct keys with their row counts are joined with main's keys instead (broadcast
  when the batch is small), and only the keys found are de-duplicated and counted.

The counts are exactly those of a left-semi (``unique``) or left-anti (``references``) join of
the batch with main: a key found several times in main counts once; NULL keys never match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wap_core.identifiers import quote_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Past this many batch rows the batch's distinct keys are not forced into a broadcast (Spark plans
# the join itself): a broadcast is held in memory by the driver and every executor.
BROADCAST_MAX_ROWS = 2_000_000
COUNT = "__wap_n"
CANDIDATES_COLLECTED = 10_000  # first-column values shared by the batch and main, brought to the driver
CANDIDATE_KEYS_COLLECTED = 100_000  # main's whole keys holding them, matched exactly with the batch's
# Iceberg's metrics evaluator prunes a scan's files by an IN list of at most this many values (beyond, by range)
IN_LIST_MAX = 200
HEAD_COUNT = "__wap_h"


def key_range_filter(df: DataFrame, column: str, lo: Any, hi: Any) -> DataFrame:
    """``df`` limited to ``column`` in [lo, hi]: Iceberg skips files whose min/max miss the range."""
    from pyspark.sql import functions as F

    if lo is None or hi is None:
        return df.limit(0)
    c = F.col(quote_column(column))
    return df.where(c.isNotNull() & (c >= F.lit(lo)) & (c <= F.lit(hi)))


def _counted(batch: DataFrame, keys: Sequence[Column], batch_rows: int | None) -> DataFrame:
    """The batch's distinct keys with their row counts, hinted for a broadcast when the batch is small."""
    from pyspark.sql import functions as F

    counts = batch.groupBy(*keys).agg(F.count(F.lit(1)).alias(COUNT))
    small = batch_rows is not None and batch_rows <= BROADCAST_MAX_ROWS
    return F.broadcast(counts) if small else counts


def keys_in_main(
    batch: DataFrame,
    main: DataFrame,
    columns: Sequence[str],
    lo: Any,
    hi: Any,
    batch_rows: int | None,
) -> tuple[int, DataFrame]:
    """Rows of ``batch`` whose key (``columns``) exists in ``main``, and those keys (distinct).

    ``lo``/``hi``: the batch's min/max of ``columns[0]`` (pruning of main's files);
    ``batch_rows``: the batch's row count (decides the broadcast). One Spark job for the count;
    the returned frame (the clashing keys) is only evaluated by callers that want examples.
    """
    from pyspark.sql import functions as F

    cols = list(columns)
    keys = [F.col(quote_column(c)) for c in cols]
    main_keys = key_range_filter(main.select(*keys), cols[0], lo, hi)
    if batch_rows is not None and batch_rows <= BROADCAST_MAX_ROWS:
        # main's FIRST key column alone streamed past a broadcast of that column of the batch (no
        # aggregation of the batch, no shuffle of main): the values both share, usually none or few
        first = F.broadcast(batch.select(keys[0]).where(keys[0].isNotNull()))
        main_first = key_range_filter(main.select(keys[0]), cols[0], lo, hi)
        shared = main_first.join(first, on=[cols[0]], how="left_semi").distinct()
        values = [r[0] for r in shared.limit(CANDIDATES_COLLECTED + 1).collect()]
        if not values:
            return 0, main_keys.limit(0)
        if len(values) <= CANDIDATES_COLLECTED:
            # only main's keys with a shared first value are read whole (Iceberg prunes main's files
            # by the IN list) and matched exactly with the batch's keys
            # (a one-column key needs no second read: the shared values are the keys)
            if len(cols) == 1:
                candidates, got = main_first, [(v,) for v in values]
            else:
                candidates = main_keys.where(keys[0].isin(values)).dropDuplicates(cols)
                got = [tuple(r) for r in candidates.limit(CANDIDATE_KEYS_COLLECTED + 1).collect()]
            if len(got) <= CANDIDATE_KEYS_COLLECTED:
                known = F.broadcast(batch.sparkSession.createDataFrame(got, schema=candidates.schema))
                n = batch.select(*keys).join(known, on=cols, how="left_semi").count()
                return n, known.join(batch.select(*keys), on=cols, how="left_semi")
    hits = main_keys.join(_counted(batch.select(*keys), keys, batch_rows), on=cols, how="inner")
    found = hits.dropDuplicates(cols)
    n = found.agg(F.sum(F.col(COUNT)).alias("n")).collect()[0]["n"]
    return int(n or 0), found.select(*keys)


def values_missing(
    batch: DataFrame,
    column: str,
    ref: DataFrame,
    ref_column: str,
    lo: Any,
    hi: Any,
    batch_rows: int | None,
) -> DataFrame:
    """The non-NULL values of ``batch.column`` absent from ``ref.ref_column``: ``value``, ``rows``.

    One row per missing value with the number of batch rows holding it (``rows``). ``lo``/``hi``
    (the batch's min/max of ``column``) prune ``ref``'s files; ``ref`` is streamed once past the
    broadcast distinct values of the batch.
    """
    from pyspark.sql import functions as F

    c = F.col(quote_column(column))
    counts = _counted(batch.where(c.isNotNull()).select(c.alias("value")), [F.col("value")], batch_rows)
    ref_vals = key_range_filter(ref.select(F.col(quote_column(ref_column)).alias("__ref")), "__ref", lo, hi)
    found = ref_vals.join(counts, F.col("__ref") == F.col("value"), "left_semi").dropDuplicates(["__ref"])
    missing = counts.join(found, F.col("value") == F.col("__ref"), "left_anti")
    return missing.select("value", F.col(COUNT).alias("rows"))


def keys_shared_at_head(
    batch: DataFrame,
    head: DataFrame,
    columns: Sequence[str],
    lo: Any,
    hi: Any,
    batch_rows: int | None,
) -> tuple[int, DataFrame]:
    """Rows of ``batch`` (a change's inserted and updated rows) whose key the branch's ``head`` holds in more rows
    than the batch does: a row the change did not write shares the key, so main would hold it twice after
    the publish. An updated row's key, held once at the head, is no clash. Returns the count and those keys.

    Only the head's key columns are read, and only in files whose column bounds may hold one of the batch's
    first-key values: an IN list of at most :data:`IN_LIST_MAX` values (Iceberg prunes each file by it), else
    the batch's key range; the files a change touched are read, the rest of the table only where its
    bounds overlap a changed key. NULL keys never clash (as in :func:`keys_in_main`).
    """
    from pyspark.sql import functions as F

    cols = list(columns)
    keys = [F.col(quote_column(c)) for c in cols]
    counted = _counted(batch.select(*keys), keys, batch_rows)
    firsts = [
        r[0]
        for r in batch.select(keys[0]).where(keys[0].isNotNull()).distinct().limit(IN_LIST_MAX + 1).collect()
    ]
    if not firsts:
        return 0, counted.select(*keys).limit(0)
    near = head.select(*keys)
    if len(firsts) <= IN_LIST_MAX:
        near = near.where(keys[0].isin(firsts))
    else:
        near = key_range_filter(near, cols[0], lo, hi)
    at_head = (
        near.join(counted.select(*keys), on=cols, how="left_semi")
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias(HEAD_COUNT))
    )
    clash = counted.join(at_head, on=cols, how="inner").where(F.col(HEAD_COUNT) > F.col(COUNT))
    n = clash.agg(F.sum(F.col(COUNT)).alias("n")).collect()[0]["n"]
    return int(n or 0), clash.select(*keys)
