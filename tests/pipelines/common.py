"""What the orchestrator tests share: a lakehouse in the environment (as a pipeline sees it) and a second user."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from wap_core import Lakehouse, Settings, TableId
from wap_core.states import Action

SERVICE = "etl-bot"  # the pipeline's service identity (WAP_USER)
STEWARD, APPROVER, ADMIN = "sam@corp.test", "ann@corp.test", "root"
ACCESS = f"""\
roles:
  viewer: ["*"]
  steward: [{STEWARD}]
  approver: [{SERVICE}, {APPROVER}]
  admin: [{ADMIN}]
policies:
  "*": {{approvals: 0}}
  demo.reviewed: {{approvals: 1, author_cannot_approve: true}}
"""
CHECKS = """\
demo.orders:
  checks:
    - not_null: [name]
demo.reviewed:
  checks:
    - not_null: [name]
demo.jobs:
  checks:
    - not_null: [name]
    - unique: [id]
"""
HEADER = ["id", "name"]
GOOD = [(1, "ann"), (2, "bob")]
BAD = [(3, ""), (4, "dan")]  # an empty name: the not_null check fails


def lakehouse_env(home: Path, catalog: str) -> dict[str, str]:
    """The WAP_* variables of a fresh lakehouse in ``home`` (checks, roles, notify's console_url)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "checks.yml").write_text(CHECKS)
    (home / "access.yml").write_text(ACCESS)
    (home / "notify.yml").write_text("console_url: http://console.test:8501\n")
    return {
        "WAP_HOME": str(home),
        "WAP_USER": SERVICE,
        "WAP_CATALOG_NAME": catalog,
        "WAP_SHUFFLE_PARTITIONS": "2",
    }


def as_user(user: str) -> Lakehouse:
    """The lakehouse of the environment, acting as ``user`` (a person in the console)."""
    return Lakehouse(Settings.from_env(user=user))


def audited_branches(lh: Lakehouse, table: TableId) -> set[str]:
    """The branches of ``table`` the journal has an audit of (empty while the table does not exist)."""
    if table not in lh.tables():
        return set()
    return {e.branch for e in lh.journal.history(str(table), action=Action.AUDIT, limit=200) if e.branch}


def audited_branch(lh: Lakehouse, table: TableId, before: set[str], timeout: float = 240) -> str:
    """The branch of the first audit of ``table`` on a branch not in ``before``: waits for it.

    By branch, not by time: a batch the previous test published seconds ago was audited "recently" too,
    and acting on it (gone by now) failed the run while the pipeline waited for a decision forever.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = audited_branches(lh, table) - before
        if new:
            return min(new)
        time.sleep(0.5)
    raise TimeoutError(f"no new audit of {table} within {timeout}s")


class Person(threading.Thread):
    """A second user acting in the console while the pipeline runs: waits for the audit, then ``act``s."""

    def __init__(self, table: TableId, act: Callable[[str], object], settle: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.table, self.act, self.settle = table, act, settle
        self.before = audited_branches(as_user("observer"), table)  # batches of earlier runs
        self.branch: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.branch = audited_branch(as_user("observer"), self.table, self.before)
            time.sleep(self.settle)  # the pipeline is waiting by now: the decision comes while it waits
            self.act(self.branch)
        except BaseException as exc:  # reported by the test
            self.error = exc


def env_of(home: Path, catalog: str) -> None:
    os.environ.update(lakehouse_env(home, catalog))
