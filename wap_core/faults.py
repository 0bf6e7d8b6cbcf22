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

from wap_core import actions

FAULT_ENV = "WAP_FAULT"
FAULT_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL

# every ref-moving action declares its points in its module of wap_core.actions, in the order it
# reaches them (ingest: intent -> CREATE BRANCH -> append the batch -> outcome; publish: intent -> one
# metadata commit -> outcome; ...)
FAULT_POINTS: tuple[str, ...] = actions.FAULT_POINTS


def fault_point(name: str) -> None:
    """Exit the process immediately when ``$WAP_FAULT`` names this point (test-only)."""
    if name not in FAULT_POINTS:  # a typo'd point would silently never fire
        raise ValueError(f"unknown fault point {name!r}")
    if os.environ.get(FAULT_ENV) == name:
        os._exit(FAULT_EXIT_CODE)


PAUSE_ENV = "WAP_PAUSE"
# declared by the actions too: a ref move between its precondition and its intent (the race tests hold
# the loser there), or in the middle of its commits (the object-store tests stop the store there)
PAUSE_POINTS: tuple[str, ...] = actions.PAUSE_POINTS


def pause_point(name: str) -> None:
    """Sleep when ``$WAP_PAUSE`` is ``<name>=<seconds>`` (test-only: widens a race window to a certainty)."""
    if name not in PAUSE_POINTS:
        raise ValueError(f"unknown pause point {name!r}")
    spec = os.environ.get(PAUSE_ENV)
    if spec:
        point, _, seconds = spec.partition("=")
        if point == name:
            time.sleep(float(seconds or "1"))
