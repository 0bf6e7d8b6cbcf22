"""The CLI contract: commands, exit codes, JSON keys, one-line errors without tracebacks."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import backend_env
from helpers import cli_process, lake_env, refs, run_cli, use_env, write_csv

from wap_core import TableId
from wap_core.cli import main

SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n"
HEADER = ["id", "name"]


@pytest.fixture
def cli(make_lakehouse, monkeypatch):  # type: ignore[no-untyped-def]
    """Run ``python -m wap_core`` in-process (same Spark session) against a fresh lakehouse."""
    lh = make_lakehouse(SUITE)
    use_env(monkeypatch, {**lake_env(lh.settings, "cli-user"), **backend_env(lh.settings)}, unset=())

    def run(*args: str) -> tuple[int, str, str]:
        return run_cli({}, *args, unset=())  # in the environment set above

    run.lh = lh  # type: ignore[attr-defined]
    return run


def test_full_lifecycle_through_the_cli(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = cli.lh
    t = TableId("demo", "people")
    code, out, err = cli(
        "ingest",
        "demo.people",
        write_csv(tmp_path / "a.csv", HEADER, [(1, "ann"), (2, "bob")]),
        "--create",
        "--branch",
        "first",
    )
    assert (code, out.strip()) == (0, "first"), err
    assert cli("publish", "demo.people", "first")[0] == 0
    code, out, _ = cli(
        "ingest",
        "demo.people",
        write_csv(tmp_path / "b.csv", HEADER, [(3, None), (3, "cy")]),
        "--branch",
        "bad",
    )
    assert (code, out.strip()) == (1, "bad")  # audit failed
    code, out, _ = cli("ingest", "demo.people", write_csv(tmp_path / "c.csv", HEADER, [(4, "dee")]))
    good = out.strip()
    assert code == 0 and good.startswith("audit_")

    code, out, _ = cli("branches", "--json")
    rows = json.loads(out)
    assert code == 0 and {(r["table"], r["branch"], r["status"]) for r in rows} == {
        ("demo.people", "bad", "failed"),
        ("demo.people", good, "passed"),
    }
    assert all({"created", "rows_added", "main_moved"} <= set(r) for r in rows)

    code, out, _ = cli("audit", "demo.people", "bad", "--json")
    audit = json.loads(out)
    assert code == 1 and audit["status"] == "failed"
    by_name = {c["name"]: c for c in audit["checks"]}
    assert by_name["not_null(name)"]["failing_rows"] == 1 and by_name["unique(id)"]["failing_rows"] == 2
    assert all({"name", "type", "status", "observed", "failing_rows"} <= set(c) for c in audit["checks"])

    code, out, _ = cli("diff", "demo.people", "bad", "--json")
    diff = json.loads(out)
    assert (
        code == 0 and diff["rows_added"] == 2 and diff["rows_deleted"] == 0 and diff["schema_changes"] == []
    )
    code, out, _ = cli("diff", "demo.people", "bad", "--key", "id", "--json")
    keyed = json.loads(out)["keyed"]
    assert code == 0 and (keyed["keys_added"], keyed["rows_changed"], keyed["keys_removed"]) == (2, 0, 0)
    assert keyed["duplicate_keys_branch"] == 1  # id 3 twice in the batch
    assert cli("diff", "demo.people", "bad", "--key", "nope")[0] == 2  # unknown key column: clear error
    name_col = next(c for c in diff["columns"] if c["name"] == "name")
    assert name_col["batch"]["null_pct"] == 50.0 and name_col["main"]["null_pct"] == 0.0

    main_before = refs(lh, t)["main"]
    code, _, err = cli("publish", "demo.people", "bad")
    assert code == 1 and err.startswith("error: publish of demo.people bad refused: the latest audit failed")
    assert refs(lh, t)["main"] == main_before
    assert cli("publish", "demo.people", "bad", "--force")[0] == 2  # --force without --reason
    code, _, _ = cli("discard", "demo.people", "bad", "--reason", "duplicate ids")
    assert code == 0 and "bad" not in refs(lh, t)
    assert cli("publish", "demo.people", good)[0] == 0
    assert cli("publish", "demo.people", good)[0] == 0  # already published: no-op success

    code, out, _ = cli("history", "--json")
    hist = json.loads(out)
    assert all({"at", "user", "action", "table", "branch", "outcome", "reason"} <= set(h) for h in hist)
    actions = [(h["action"], h["branch"], h["outcome"]) for h in hist]
    assert ("discard", "bad", "discarded") in actions and ("publish", "bad", "refused") in actions
    assert {h["user"] for h in hist} == {"cli-user"}
    assert next(h for h in hist if h["action"] == "discard")["reason"] == "duplicate ids"
    code, out, _ = cli("tables", "--json")
    assert code == 0 and json.loads(out)[0]["table"] == "demo.people" and json.loads(out)[0]["rows"] == 3


def _seed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``demo.people`` created through the CLI: one row, in branch ``seed``."""
    code, _, err = cli(
        "ingest",
        "demo.people",
        write_csv(tmp_path / "a.csv", HEADER, [(1, "ann")]),
        "--create",
        "--branch",
        "seed",
    )
    assert code == 0, err


def test_rebase_through_the_cli(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _seed(cli, tmp_path)
    cli("publish", "demo.people", "seed")
    cli("ingest", "demo.people", write_csv(tmp_path / "b.csv", HEADER, [(2, "bob")]), "--branch", "b1")
    cli("ingest", "demo.people", write_csv(tmp_path / "c.csv", HEADER, [(3, "cy")]), "--branch", "b2")
    assert cli("publish", "demo.people", "b1")[0] == 0
    code, _, err = cli("publish", "demo.people", "b2")
    assert code == 1 and "rebase" in err
    rows = json.loads(cli("branches", "--json")[1])
    assert rows[0]["main_moved"] is True
    code, out, _ = cli("rebase", "demo.people", "b2", "--json")
    assert code == 0 and json.loads(out)["outcome"] == "rebased"
    assert json.loads(cli("branches", "--json")[1])[0]["status"] == "passed"  # the rebase audited it
    assert cli("audit", "demo.people", "b2")[0] == 0
    assert cli("publish", "demo.people", "b2")[0] == 0


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["publish", "x; DROP TABLE y", "b"], 2, "invalid table name"),
        (["publish", "demo.people", "x'; DROP TABLE y"], 2, "invalid branch name"),
        (["audit", "demo.nope", "b"], 2, "table demo.nope does not exist"),
        (["ingest", "demo.people", "/no/such/file.csv"], 2, "does not exist"),
        (["ingest", "demo.people", "--format", "xml", "f.xml"], 2, "invalid choice"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
def test_bad_input_exit_2_with_one_clear_line(cli, args: list[str], code: int, fragment: str) -> None:  # type: ignore[no-untyped-def]
    got, _, err = cli(*args) if args[0] != "frobnicate" and "xml" not in args else _argparse(args)
    assert got == code
    assert fragment in err
    assert "Traceback" not in err


def test_control_bytes_in_a_message_never_reach_the_terminal(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 25: a CSV header holding a terminal escape (an OSC title change) is named in a multi-line error;
    whatever the CLI prints shows each control byte as its escape, never the byte itself."""
    _seed(cli, tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,\x1b]0;pwn\x07name\r\n1,ann\n")
    code, out, err = cli("ingest", "demo.people", str(bad))
    assert code == 2 and "\\x1b]0;pwn\\x07name" in err, err
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out + err), repr(err)


def test_a_local_file_with_a_colon_in_its_name_is_ingested(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 25 item 6: ``:`` is legal in a file name, but Hadoop reads ``a:b.csv`` as scheme ``a``; the file
    is read through a sanitized link and the batch's provenance keeps its real name (a glob over it too)."""
    _seed(cli, tmp_path)
    src = tmp_path / "in"
    write_csv(src / "2024-01-01T00:00:00.csv", HEADER, [(2, "bob")])
    write_csv(src / "plain.csv", HEADER, [(3, "cy")])
    code, out, err = cli("ingest", "demo.people", str(src / "*.csv"), "--branch", "colon", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["rows_written"] == 2 and res["malformed_rows"] == 0
    assert res["sources"] == [str((src / n).resolve()) for n in ("2024-01-01T00:00:00.csv", "plain.csv")]


def _argparse(args: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        try:
            main(args)
        except SystemExit as exc:
            return int(exc.code or 0), "", buf.getvalue()
    return 0, "", buf.getvalue()


def test_broken_checks_file_is_exit_2_with_file_and_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _seed(cli, tmp_path)
    Path(cli.lh.settings.checks_file).write_text(
        "demo.people:\n  checks:\n    - not_null: [name]\n    - uniqe: [id]\n"
    )
    code, _, err = cli("audit", "demo.people", "seed")
    assert code == 2 and f"{cli.lh.settings.checks_file}:4: unknown check type 'uniqe'" in err


def test_subprocess_cli_errors_are_one_line_and_debug_adds_the_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "WAP_HOME": str(tmp_path / "lh")}
    p = cli_process(env, "publish", "demo.t", "x;y", timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "error: invalid branch name 'x;y': use only letters, digits and '_' (not starting with a digit), at most 128 characters"
    ]
    p = cli_process(env, "--debug", "publish", "demo.t", "x;y", timeout=120)
    assert p.returncode == 2 and "Traceback" in p.stderr
    p = cli_process(env, "tables", "--json", timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout) == []


def test_every_subcommand_has_one_handler() -> None:
    """The parser's subcommands and the handler table name the same commands, one handler each."""
    import argparse

    from wap_core.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    assert len(set(COMMANDS.values())) == len(COMMANDS)
