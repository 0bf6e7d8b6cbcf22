"""Roles enforced in the core: the access file, the role matrix through the CLI and the console.

One module-scoped lakehouse ``demo.people`` (built once: first batch published, then ``late``
forked before a second publish so main moved under it, then ``bad`` failing its audit and
``good`` passing). Refusals cost no Spark; the few allowed paths that write run last.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import app_test, lake_env, lake_settings, refs, run_cli, seed_tables, use_env, write_csv
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore
from wap_core.cli import main
from wap_core.exceptions import AccessDeniedError, AccessFileError, RefusedError
from wap_core.security.access import (
    RULES,
    Permission,
    Role,
    decide,
    load_access,
    parse_access,
    roles_of,
)
from wap_core.session import Identity, Session
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

T = TableId("demo", "people")
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n"
HEADER = ["id", "name"]
ACCESS = """\
roles:                      # cumulative: viewer < steward < approver < admin
  viewer: [vic@corp.test]
  steward: [sam@corp.test]
  approver: [ann@corp.test]
  admin: [ops-bot, root]
"""
USERS = {
    "viewer": "vic@corp.test",
    "steward": "sam@corp.test",
    "approver": "ann@corp.test",
    "admin": "ops-bot",
    "none": "eve@x",
}
RANK = {"none": 0, "viewer": 1, "steward": 2, "approver": 3, "admin": 4}
_names = itertools.count(1)


# ============================================================================= the access file
def test_good_file_parses_to_cumulative_roles() -> None:
    p = parse_access(
        ACCESS.replace("[vic@corp.test]", '["*"]')
        + 'policies:\n  "*": {approvals: 0}\n  demo.flights: {approvals: 1}\n',
        "acc.yml",
    )
    assert p.enabled and p.path == "acc.yml"
    assert p.role_of("sam@corp.test") is Role.STEWARD
    assert p.role_of("SAM@Corp.Test") is Role.STEWARD  # e-mails match case-insensitively
    assert (
        p.role_of("ROOT") is Role.VIEWER and p.role_of("root") is Role.ADMIN
    )  # OS users exactly ("*" gives ROOT viewer)
    assert p.role_of("anyone") is Role.VIEWER  # "*" = every signed-in user
    assert p.role_of("") is None
    assert [r.label for r in p.roles_of("ann@corp.test")] == ["viewer", "steward", "approver"]
    assert p.members(Role.ADMIN) == ("ops-bot", "root")
    assert (
        dict(p.policies or {}) == {"*": {"approvals": 0}, "demo.flights": {"approvals": 1}}
        and p.policies_line == 6
    )
    assert parse_access(ACCESS, "a").role_of("eve@x") is None  # no "*": no role
    assert parse_access("roles:\n  admin: []\n", "a").grants == ()
    assert parse_access(ACCESS + "policies:\n", "a").policies == {}


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("roles:\n  viewer: [a, b\n", 3, "invalid YAML"),
        ("roles:\n  viewer: [a]\n  owner: [b]\n", 3, "unknown role 'owner'"),
        ("roles:\n  steward: sam@corp.test\n", 2, "role 'steward' must be a list of users"),
        ("roles:\n  approver:\n", 2, "role 'approver' must be a list of users"),
        ("roles:\n  admin: {root: 1}\n", 2, "role 'admin' must be a list of users"),
        ("rolez:\n  viewer: [a]\n", 1, "unknown key 'rolez'; expected one of: roles, policies, cli_identity"),
        ("roles:\n  viewer: [a]\n\nowners: [b]\n", 4, "unknown key 'owners'"),
        ("", 1, "the file is empty"),
        ("# only a comment\n", 1, "the file is empty"),
        ("policies:\n  '*': {approvals: 0}\n", 1, "missing 'roles'"),
        ("- viewer\n- admin\n", 1, "must be a mapping with 'roles'"),
        ("roles: [viewer, admin]\n", 1, "'roles' must be a mapping"),
        (
            "roles:\n  viewer: [a]\n  steward:\n    - sam\n    - 42\n",
            5,
            "expected a user name (text), got '42'",
        ),
        ("roles:\n  viewer: [a]\n  viewer: [b]\n", 3, "role 'viewer' is given twice"),
        ("roles:\n  viewer: [a, A]\n", 2, None),  # OS users are case-sensitive: a and A are two users
        ("roles:\n  viewer: [a@x, A@X]\n", 2, "user 'A@X' is listed twice"),
        ("roles:\n  Admin: [root]\n", 2, "write the role in lower case"),
        ("roles:\n  viewer: ['a b']\n", 2, "invalid user name 'a b'"),
        ("roles:\n  viewer: [a]\npolicies: [1]\n", 3, "'policies' must be a mapping"),
        ("roles:\n  viewer: [a]\nroles:\n  admin: [b]\n", 3, "'roles' is given twice"),
    ],
)
def test_broken_file_names_file_and_line(tmp_path: Path, text: str, line: int, fragment: str | None) -> None:
    path = tmp_path / "access.yml"
    path.write_text(text)
    if fragment is None:
        assert load_access(path).role_of("A") is Role.VIEWER
        return
    with pytest.raises(AccessFileError) as info:
        load_access(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_missing_file_is_off_and_everyone_admin_and_cache_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "access.yml"
    off = load_access(path)
    assert not off.enabled and off.path == str(path)
    assert off.role_of("anyone") is Role.ADMIN and decide(off, "anyone", Permission.FORCE_PUBLISH).allowed
    path.write_text(ACCESS)
    first = load_access(path)
    assert first.role_of("sam@corp.test") is Role.STEWARD
    assert load_access(path) is first  # unchanged file: the cached policy
    path.write_text(ACCESS.replace("steward: [sam@corp.test]", "steward: [sam@corp.test, tom@corp.test]"))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert load_access(path).role_of("tom@corp.test") is Role.STEWARD
    path.write_text("roles: [oops\n")
    with pytest.raises(AccessFileError):
        load_access(path)  # a broken file is an error, never "everyone is admin"
    path.unlink()
    path.symlink_to(tmp_path / "gone.yml")
    with pytest.raises(AccessFileError, match="dangling"):
        load_access(path)


def test_one_table_decides_every_permission() -> None:
    assert {p: RULES[p].needed for p in Permission} == {
        Permission.READ: Role.VIEWER,
        Permission.INGEST: Role.STEWARD,
        Permission.AUDIT: Role.STEWARD,
        Permission.REBASE: Role.STEWARD,
        Permission.DISCARD: Role.STEWARD,
        Permission.COMMENT: Role.STEWARD,
        Permission.QUARANTINE: Role.STEWARD,
        Permission.PUBLISH: Role.APPROVER,
        Permission.APPROVE: Role.APPROVER,
        Permission.FORCE_PUBLISH: Role.ADMIN,
        Permission.ADMIN: Role.ADMIN,
    }
    policy = parse_access(ACCESS, "a")
    for role, user in USERS.items():
        for perm, rule in RULES.items():
            d = decide(policy, user, perm)
            assert d.allowed == (RANK[role] >= rule.needed), (role, perm)
            assert d.needed is rule.needed and d.user == user
    d = decide(policy, "sam@corp.test", Permission.PUBLISH)
    assert (
        d.message == "sam@corp.test (steward) may not publish: approver role needed"
        and d.role is Role.STEWARD
    )
    assert (
        decide(policy, "eve@x", Permission.INGEST).message
        == "eve@x (no role) may not ingest: steward role needed"
    )
    assert (
        decide(policy, "ann@corp.test", Permission.FORCE_PUBLISH).message
        == "ann@corp.test (approver) may not force publish: admin role needed"
    )
    assert (
        decide(policy, "ann@corp.test", Permission.ADMIN, action="gc").message
        == "ann@corp.test (approver) may not gc: admin role needed"
    )
    assert decide(policy, "ann@corp.test", Permission.ADMIN, action="gc").action == "gc"
    assert (
        roles_of(policy, "ops-bot") == [Role.VIEWER, Role.STEWARD, Role.APPROVER, Role.ADMIN]
        and roles_of(policy, "eve@x") == []
    )


# ============================================================================= one lakehouse for the matrices
@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("access")
    settings = lake_settings(
        home, f"acc{next(_names)}", SUITE, access_path=home / "roles" / "access.yml", ingest_roots=(home,)
    )
    lh = Lakehouse(settings)
    src = home / "src"
    seed_tables(lh, [T], src, HEADER)
    assert ingest(lh, T, [write_csv(src / "late.csv", HEADER, [(3, "cy")])], branch="late").audit.passed
    ingest(lh, T, [write_csv(src / "bump.csv", HEADER, [(4, "dee")])], branch="bump")
    publish(lh, T, "bump")  # main moves under ``late``
    assert not ingest(
        lh, T, [write_csv(src / "bad.csv", HEADER, [(5, None), (5, "eli")])], branch="bad"
    ).audit.passed
    assert ingest(lh, T, [write_csv(src / "good.csv", HEADER, [(6, "fay")])], branch="good").audit.passed
    write_csv(src / "fresh.csv", HEADER, [(7, "gus")])
    # Roles from now on (the seeder above acted before the file existed: everyone was admin).
    settings.access_file.parent.mkdir()
    settings.access_file.write_text(ACCESS)
    return lh


ACCESS_UNSET = Path("(WAP_ACCESS unset)")  # cli(access=...): no WAP_ACCESS (and no $WAP_HOME/access.yml)


def _env(lh: Lakehouse, user: str, access: Path | None = None) -> dict[str, str]:
    env = lake_env(lh.settings, user, WAP_ACCESS=str(access or lh.settings.access_file))
    if access == ACCESS_UNSET:
        assert not (lh.settings.home / "access.yml").exists()
        del env["WAP_ACCESS"]
    return env


def cli(lh: Lakehouse, user: str, *args: str, access: Path | None = None) -> tuple[int, str, str]:
    """``python -m wap_core`` in-process (same Spark session) as ``user`` (WAP_USER)."""
    return run_cli(_env(lh, user, access), *args)


def _last(lh: Lakehouse) -> Any:
    return lh.journal.history(limit=1)[0]


# (needed role, verb in the message, journal action, journal table, journal branch, refused args, allowed-probe args)
# An allowed probe targets something missing: it passes authorization and stops at a cheap exit-2 error.
ACTIONS: dict[str, tuple[str, str, str, str | None, str | None, list[str], list[str]]] = {
    "ingest": (
        "steward",
        "ingest",
        "ingest",
        "demo.people",
        "try1",
        ["ingest", "demo.people", "SRC", "--branch", "try1"],
        ["ingest", "demo.people", "/no/such/file.csv", "--branch", "try2"],
    ),
    "audit": (
        "steward",
        "audit",
        "audit",
        "demo.people",
        "bad",
        ["audit", "demo.people", "bad"],
        ["audit", "demo.people", "nope"],
    ),
    "rebase": (
        "steward",
        "rebase",
        "rebase",
        "demo.people",
        "late",
        ["rebase", "demo.people", "late"],
        ["rebase", "demo.people", "nope"],
    ),
    "discard": (
        "steward",
        "discard",
        "discard",
        "demo.people",
        "bad",
        ["discard", "demo.people", "bad", "--reason", "r"],
        ["discard", "demo.people", "nope", "--reason", "r"],
    ),
    "publish": (
        "approver",
        "publish",
        "publish",
        "demo.people",
        "good",
        ["publish", "demo.people", "good"],
        ["publish", "demo.people", "nope"],
    ),
    "force publish": (
        "admin",
        "force publish",
        "publish",
        "demo.people",
        "bad",
        ["publish", "demo.people", "bad", "--force", "--reason", "r"],
        ["publish", "demo.people", "nope", "--force", "--reason", "r"],
    ),
    "read": ("viewer", "read", "read", None, None, ["branches", "--json"], ["branches", "--json"]),
    # the probe's SQL reads another table: past authorization, the SQL guard refuses it (exit 2)
    "query": (
        "viewer",
        "read",
        "read",
        "demo.people",
        None,
        ["query", "demo.people", "SELECT count(*) AS n FROM ref_view"],
        ["query", "demo.people", "SELECT * FROM nope"],
    ),
}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("role", list(RANK))
def test_cli_role_matrix(lake: Lakehouse, role: str, action: str) -> None:
    needed, verb, jaction, jtable, jbranch, refused_args, probe_args = ACTIONS[action]
    user = USERS[role]
    if action == "force publish" and RANK[role] < RANK["approver"]:
        needed, verb = "approver", "publish"  # refused at publish already
    before = refs(lake, T)
    last_id = _last(lake).id
    args = [lake.settings.home / "src" / "fresh.csv" if a == "SRC" else a for a in refused_args]
    if RANK[role] >= RANK[needed] and not (action == "force publish" and role != "admin"):
        # the query probe's guard runs in this process's driver, not in a SQL-box worker of its own (a JVM
        # start each): authorization comes before either (explore.bounded_query_rows)
        code, out, err = run_cli({**_env(lake, user), "WAP_QUERY_ISOLATION": "driver"}, *probe_args)
        assert "may not" not in err and code in (0, 2), (code, err)
        assert not [
            e
            for e in lake.journal.history(limit=20)
            if e.id > last_id and e.details.get("code") == "forbidden"
        ]
        return
    code, out, err = cli(lake, user, *map(str, args))
    label = role if role != "none" else "no role"
    message = f"{user} ({label}) may not {verb}: {needed} role needed"
    assert (code, err) == (1, f"error: {message}\n")
    assert out == ""
    e = _last(lake)
    assert e.id > last_id
    assert (e.user, e.action, e.outcome, e.reason, e.details, e.table, e.branch) == (
        user,
        jaction,
        "refused",
        message,
        {"code": "forbidden"},
        jtable,
        jbranch,
    )
    assert refs(lake, T) == before  # main and every branch unchanged (PyIceberg)


def test_core_refuses_reads_for_a_user_without_a_role(lake: Lakehouse) -> None:
    snap = refs(lake, T)["main"]
    for call in (
        lambda: explore.run_sql(lake, T, snap, "SELECT * FROM ref_view", user="eve@x"),
        lambda: explore.rows(lake, T, snap, user="eve@x"),
    ):
        with pytest.raises(AccessDeniedError) as info:
            call()
        assert str(info.value) == "eve@x (no role) may not read: viewer role needed"
        assert (
            info.value.reason_code == "forbidden"
            and isinstance(info.value, RefusedError)
            and info.value.exit_code == 1
        )
    e = _last(lake)
    assert (e.user, e.action, e.outcome, e.table) == ("eve@x", "read", "refused", "demo.people")
    # the authorization every action calls (the session's), with a more specific action name
    with pytest.raises(
        AccessDeniedError, match=r"^ann@corp.test \(approver\) may not gc: admin role needed$"
    ):
        Session(lake, Identity("ann@corp.test")).authorize(Permission.ADMIN, table=T, action="gc")
    assert (_last(lake).action, _last(lake).details) == ("gc", {"code": "forbidden"})
    Session(lake, Identity("root")).authorize(
        Permission.ADMIN, table=T, action="gc"
    )  # allowed: nothing raised


def test_whoami(lake: Lakehouse, tmp_path: Path) -> None:
    code, out, _ = cli(lake, "SAM@Corp.Test", "whoami", "--json")
    assert code == 0 and json.loads(out) == {"user": "SAM@Corp.Test", "roles": ["viewer", "steward"]}
    code, out, _ = cli(lake, "eve@x", "whoami", "--json")
    assert code == 0 and json.loads(out) == {"user": "eve@x", "roles": []}
    code, out, _ = cli(lake, "root", "whoami")
    assert code == 0 and out == "root\nroles: viewer, steward, approver, admin\n"
    # No access file (WAP_ACCESS unset, no $WAP_HOME/access.yml): everyone is admin, and whoami says so.
    code, out, err = cli(lake, "anybody", "whoami", "--json", access=ACCESS_UNSET)
    assert code == 0 and json.loads(out) == {
        "user": "anybody",
        "roles": ["viewer", "steward", "approver", "admin"],
    }
    code, out, err = cli(lake, "anybody", "whoami", access=ACCESS_UNSET)
    assert "access control is off" in err
    # WAP_ACCESS naming a file that is not there is an error naming it, never "everyone is admin"
    code, out, err = cli(lake, "anybody", "whoami", "--json", access=tmp_path / "none.yml")
    assert (code, out) == (2, "") and err.startswith(f"error: {tmp_path / 'none.yml'}: the access file")


def test_no_access_file_everyone_is_admin_and_broken_file_is_exit_2(lake: Lakehouse, tmp_path: Path) -> None:
    before = refs(lake, T)
    # no file: a user listed nowhere passes every gate (the probe stops later, at the missing branch)
    code, _, err = cli(
        lake,
        "eve@x",
        "publish",
        "demo.people",
        "nope",
        "--force",
        "--reason",
        "r",
        access=ACCESS_UNSET,
    )
    assert code == 2 and "does not exist" in err
    broken = tmp_path / "broken.yml"
    broken.write_text("roles:\n  viewer: [vic@corp.test]\n  superuser: [eve@x]\n")
    for args in (
        ["whoami", "--json"],
        ["publish", "demo.people", "good"],
        ["ingest", "demo.people", "/no/such.csv"],
        ["branches"],
    ):
        code, out, err = cli(lake, "ops-bot", *args, access=broken)
        assert (code, out) == (2, ""), args
        assert err == f"error: {broken}:3: unknown role 'superuser': use viewer, steward, approver, admin\n"
    assert refs(lake, T) == before


def test_cli_has_no_user_override(lake: Lakehouse) -> None:
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf), pytest.raises(SystemExit) as info:
        main(["whoami", "--user", "root"])
    assert info.value.code == 2 and "unrecognized arguments: --user" in buf.getvalue()


# ============================================================================= the console (AppTest)
@pytest.fixture
def console(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lakehouse]:
    import streamlit as st

    use_env(monkeypatch, _env(lake, "nobody"))
    st.cache_data.clear()  # the console's metadata caches are per process: no other test's tables
    yield lake
    st.cache_data.clear()


def _app(
    user: str | None = None,
    page: str | None = None,
    secrets: dict[str, Any] | None = None,
    st_user: dict[str, Any] | None = None,
    **query: str,
) -> AppTest:
    if user is not None:
        os.environ["WAP_USER"] = user  # the console fixture's monkeypatch restores it
    return app_test(page, secrets=secrets, st_user=st_user, **query)


def _buttons(at: AppTest) -> dict[str, Any]:
    return {b.label: b for b in at.button}


def _texts(elements: Any) -> str:
    """The elements' Markdown bodies as read on screen: the console escapes user text (``ann\\@corp\\.test``)."""
    # (and puts an invisible word joiner in ``://``, ``www.`` and after ``@`` so no autolink forms)
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", "\n".join(str(e.value) for e in elements)).replace(
        "\u2060", ""
    )


def _plain(md: str | None) -> str:
    """A help tooltip's Markdown as read on screen (escapes and the invisible word joiner dropped)."""
    return (md or "").replace("\\", "").replace("\u2060", "")


@pytest.mark.parametrize("role", ["viewer", "steward", "approver", "admin"])
def test_console_review_buttons_follow_the_role(console: Lakehouse, role: str) -> None:
    user = USERS[role]
    rank = RANK[role]
    at = _app(user, "pages/review.py", table="demo.people", branch="bad")
    assert f"Role: {role}" in _texts(at.sidebar.caption)
    b = _buttons(at)
    for label, needed, verb in (
        ("Re-run audit", "steward", "audit"),
        ("Discard", "steward", "discard"),
        ("Force publish", "admin", "force publish"),
    ):
        assert b[label].disabled == (rank < RANK[needed]), label
        if rank < RANK[needed]:
            message = f"{user} ({role}) may not {verb}: {needed} role needed"
            assert _plain(b[label].help) == message
            assert message in _plain(_texts(at.caption))
    assert b["Publish"].disabled  # the audit failed, whoever you are
    at = _app(user, "pages/review.py", table="demo.people", branch="good")
    assert _buttons(at)["Publish"].disabled == (rank < RANK["approver"])
    # no green "Ready to publish" beside a locked button (issue 40 item 12)
    ready = "Ready to publish:" in _texts(at.success)
    assert ready == (rank >= RANK["approver"]), _texts([*at.success, *at.info])
    assert ("Publishable by an approver:" in _texts(at.info)) == (rank < RANK["approver"])
    if rank < RANK["approver"]:
        assert (
            _plain(_buttons(at)["Publish"].help) == f"{user} ({role}) may not publish: approver role needed"
        )
    if role in ("viewer", "steward"):
        at = _app(user, "pages/review.py", table="demo.people", branch="late")
        assert _buttons(at)["Rebase"].disabled == (role == "viewer")
        at = _app(user, "pages/ingest.py")
        submit = _buttons(at)["Ingest and audit"]
        assert submit.disabled == (role == "viewer")
        if role == "viewer":
            assert _plain(submit.help) == "vic@corp.test (viewer) may not ingest: steward role needed"


def test_console_core_refuses_when_a_page_calls_anyway(console: Lakehouse) -> None:
    """A page that forgot to disable its button: the core refuses, journals, and nothing moves."""
    before = refs(console, T)

    def forgetful_page() -> None:
        import streamlit as st

        from pages import _common as ui
        from wap_core import TableId, api

        ctx = ui.context()  # the page's session: who acts, as every page opens it
        if st.button("Discard anyway"):
            with ui.wap_errors():
                api.discard(ctx, TableId("demo", "people"), "bad", reason="page forgot")
        if st.button("Force anyway"):
            with ui.wap_errors():
                api.publish(ctx, TableId("demo", "people"), "bad", force=True, reason="page forgot")

    os.environ["WAP_USER"] = "vic@corp.test"
    at = AppTest.from_function(forgetful_page, default_timeout=60)
    at.run()
    at.button[0].click().run()
    assert _texts(at.error) == "vic@corp.test (viewer) may not discard: steward role needed"
    os.environ["WAP_USER"] = "ann@corp.test"
    at.button[1].click().run()
    assert _texts(at.error) == "ann@corp.test (approver) may not force publish: admin role needed"
    assert refs(console, T) == before
    e = console.journal.history(str(T), branch="bad", limit=2)
    assert [(x.user, x.action, x.outcome) for x in e] == [
        ("ann@corp.test", "publish", "refused"),
        ("vic@corp.test", "discard", "refused"),
    ]


def test_console_no_role_broken_file_and_access_off(
    console: Lakehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app("eve@x")
    assert "eve@x (no role) may not read: viewer role needed" in _plain(_texts(at.error))
    assert not at.dataframe and not at.title and "Catalog" not in _texts(at.sidebar.caption)
    broken = tmp_path / "broken.yml"
    broken.write_text("roles:\n  viewer: vic@corp.test\n")
    monkeypatch.setenv("WAP_ACCESS", str(broken))
    at = _app("root")
    assert f"{broken}:2: role 'viewer' must be a list of users" in _plain(_texts(at.error))
    assert not at.dataframe and not at.title
    # a configured access file that is not there stops the console naming it (issue 19 item 4: never fail open)
    monkeypatch.setenv("WAP_ACCESS", str(tmp_path / "none.yml"))
    at = _app("eve@x")
    assert _plain(_texts(at.error)).replace("\u2060", "") == (
        f"{tmp_path / 'none.yml'}: the access file (WAP_ACCESS) does not exist; a configured access file "
        "never means 'access control off' (unset WAP_ACCESS for that)"
    )
    assert not at.dataframe and not at.title and "Catalog" not in _texts(at.sidebar.caption)
    monkeypatch.delenv("WAP_ACCESS")  # unset, and no $WAP_HOME/access.yml: access control is off
    assert not (console.settings.home / "access.yml").exists()
    at = _app("eve@x")
    captions = _texts(at.sidebar.caption)
    assert (
        "Role: admin (access control is off" in captions
        and "sign-in is off (single-user local mode)" in captions
    )
    assert at.title[0].value == "Overview"


AUTH = {
    "auth": {
        "redirect_uri": "http://127.0.0.1:1/oauth2callback",
        "cookie_secret": "0123456789abcdef0123",
        "client_id": "wap",
        "client_secret": "s",
        "server_metadata_url": "http://127.0.0.1:1/.well-known/openid-configuration",
    }
}


def test_console_with_sign_in_shows_only_the_sign_in_screen_to_anonymous(console: Lakehouse) -> None:
    at = _app("root", secrets=AUTH, st_user={"is_logged_in": False})  # WAP_USER is ignored once sign-in is on
    assert [t.value for t in at.title] == ["WAP Console"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.sidebar.caption and not at.dataframe and not at.metric
    assert "people" not in str(at.main) and console.settings.catalog_name not in str(at)
    at = _app(
        "root",
        "pages/review.py",
        secrets=AUTH,
        st_user={"is_logged_in": False},
        table="demo.people",
        branch="bad",
    )
    assert [b.label for b in at.button] == ["Sign in"] and not at.dataframe


def test_console_with_sign_in_acts_as_the_signed_in_user(console: Lakehouse) -> None:
    signed = {"is_logged_in": True, "email": "ann@corp.test", "sub": "ann"}
    at = _app("root", "pages/review.py", secrets=AUTH, st_user=signed, table="demo.people", branch="good")
    captions = _texts(at.sidebar.caption)
    assert "Signed in as **ann@corp.test**" in captions and "Role: approver" in captions
    assert "sign-in is off" not in captions
    b = _buttons(at)
    assert (
        "Sign out" in b
        and not b["Publish"].disabled
        and b["Publish"].help == "Fast-forward main to this branch"
    )
    # no e-mail claim: the OIDC subject
    at = _app("eve@x", secrets=AUTH, st_user={"is_logged_in": True, "sub": "ops-bot"})
    assert "Signed in as **ops-bot**" in _texts(at.sidebar.caption) and "Role: admin" in _texts(
        at.sidebar.caption
    )
    # an e-mail the provider did not verify is no identity: the subject is used (here: no role)
    at = _app(
        "root",
        secrets=AUTH,
        st_user={"is_logged_in": True, "sub": "x-1", "email": "root", "email_verified": False},
    )
    assert "x-1 (no role) may not read: viewer role needed" in _plain(_texts(at.error))


# ============================================================================= allowed paths (they write: last)
def test_allowed_paths_through_the_cli(lake: Lakehouse) -> None:
    src = str(lake.settings.home / "src" / "fresh.csv")
    code, out, err = cli(lake, "sam@corp.test", "ingest", "demo.people", src, "--branch", "fresh")
    assert (code, out) == (0, "fresh\n"), err
    assert cli(lake, "sam@corp.test", "discard", "demo.people", "fresh", "--reason", "test batch")[0] == 0
    head_bad = refs(lake, T)["bad"]
    code, out, err = cli(
        lake, "ops-bot", "publish", "demo.people", "bad", "--force", "--reason", "known duplicate, accepted"
    )
    assert code == 0 and "(forced)" in out, err
    assert refs(lake, T)["main"] == head_bad and "bad" not in refs(lake, T)
    code, _, err = cli(lake, "sam@corp.test", "rebase", "demo.people", "good")
    assert code == 0, err
    assert cli(lake, "sam@corp.test", "audit", "demo.people", "good")[0] == 0
    head_good = refs(lake, T)["good"]
    code, _, err = cli(lake, "ann@corp.test", "publish", "demo.people", "good")
    assert code == 0, err
    assert refs(lake, T)["main"] == head_good
    code, out, _ = cli(lake, "vic@corp.test", "branches", "--json")
    assert code == 0 and [b["branch"] for b in json.loads(out)] == ["late"]
    code, out, err = cli(
        lake, "vic@corp.test", "query", "demo.people", "SELECT count(*) AS n FROM ref_view", "--json"
    )
    assert (code, json.loads(out or "null")) == (0, [{"n": 6}]), err  # first 2 + bump 1 + bad 2 + good 1
    hist = [(e.user, e.action, e.branch, e.outcome) for e in lake.journal.history(str(T), limit=8)]
    assert ("ann@corp.test", "publish", "good", "published") in hist
    assert ("ops-bot", "publish", "bad", "forced") in hist
    assert ("sam@corp.test", "discard", "fresh", "discarded") in hist
    assert ("sam@corp.test", "ingest", "fresh", "written") in hist
    assert ("sam@corp.test", "audit", "good", "passed") in hist  # the re-audit after the rebase
    # the audit inside sam's ingest is part of the ingest (journaled as sam's audit, never refused)
    assert ("sam@corp.test", "audit", "fresh", "passed") in [
        (e.user, e.action, e.branch, e.outcome) for e in lake.journal.history(str(T), limit=20)
    ]
