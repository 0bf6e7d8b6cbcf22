"""Fault injection for the durability tests: die at a named commit point, like ``kill -9``.

``WAP_FAULT=<point>`` makes the process exit at once (``os._exit(137)``: no ``finally``, no
``atexit``, no flush) when it reaches that point. Unset (always, outside tests) a fault point
costs one dictionary lookup. The points sit at every commit point of the actions that move a
ref: right after the intent row is committed and right after each Iceberg commit, before the
outcome row (see docs/workflow.md, "Journal guarantees").
"""

from __future__ import annotations

import os
import time

FAULT_ENV = "WAP_FAULT"
FAULT_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL

FAULT_POINTS: tuple[str, ...] = (
    # ingest: intent -> CREATE BRANCH -> append the batch -> outcome
    "after_ingest_intent",
    "after_create_branch",
    "after_ingest_commit",
    # publish: intent -> one metadata commit (main moves, branch removed) -> outcome
    "after_publish_intent",
    "after_publish_commit",
    # rebase: intent -> temp branch at main -> replayed batch on it -> swap -> outcome
    "after_rebase_intent",
    "after_rebase_temp_branch",
    "after_rebase_write",
    "after_rebase_swap",
    # discard: intent -> branch removed -> outcome
    "after_discard_intent",
    "after_discard_commit",
    # rollback: intent -> main moved back (one metadata commit) -> outcome
    "after_rollback_intent",
    "after_rollback_commit",
)


def fault_point(name: str) -> None:
    """Exit the process immediately when ``$WAP_FAULT`` names this point (test-only)."""
    if name not in FAULT_POINTS:  # a typo'd point would silently never fire
        raise ValueError(f"unknown fault point {name!r}")
    if os.environ.get(FAULT_ENV) == name:
        os._exit(FAULT_EXIT_CODE)


PAUSE_ENV = "WAP_PAUSE"
PAUSE_POINTS: tuple[str, ...] = (
    # a ref move has read its precondition and not announced its intent yet: a concurrent action
    # may win in between (the race tests hold the loser here)
    "before_publish_intent",
    "before_discard_intent",
    # a publish's intent is journaled and its commit not made yet: the object-store tests stop the store
    # here (tests/test_s3_store.py, a store failing in the middle of a publish)
    "after_publish_intent",
    # an ingest's branch is created and its rows not written yet: the object-store tests stop the store here
    # (tests/test_s3_store.py, a store failing in the middle of an ingest)
    "after_create_branch",
)


def pause_point(name: str) -> None:
    """Sleep when ``$WAP_PAUSE`` is ``<name>=<seconds>`` (test-only: widens a race window to a certainty)."""
    if name not in PAUSE_POINTS:
        raise ValueError(f"unknown pause point {name!r}")
    spec = os.environ.get(PAUSE_ENV)
    if spec:
        point, _, seconds = spec.partition("=")
        if point == name:
            time.sleep(float(seconds or "1"))
