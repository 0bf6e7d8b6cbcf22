"""Input edges and the file/secret boundary of the core, on real files, real Spark and a real catalog.

- Confined ingest: server-side paths only under the allowed ingest roots, resolved through symlinks;
  per-batch upload folders; the CLI still reads any path its OS user can read.
- Secrets: catalog passwords masked in CLI errors, the journal and log records.
- Identifiers: full match (no trailing newline, ASCII only), every validation error one line.
- CSV as RFC 4180: quoted line breaks and doubled quotes, malformed rows located at their first
  physical line; an unterminated quote or an over-long field is a malformed row on its line (issue 19).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from helpers import cli_process, lake_env, refs, use_env, write_csv
from sqlalchemy import select

from wap_core import Lakehouse, Settings, TableId
from wap_core.cli import main
from wap_core.config import mask_secrets
from wap_core.exceptions import PathNotAllowedError, SourceError, ValidationError
from wap_core.identifiers import validate_branch, validate_identifier
from wap_core.security.paths import SourcePolicy, allowed_roots, save_upload, uploads_root
from wap_core.store.journal import journal_table
from wap_core.values import to_jsonable
from wap_core.workflow.ingest import ingest
from wap_core.workflow.readers import CSV_MAX_FIELD_CHARS, resolve_sources

T = TableId("demo", "people")
HEADER = ["id", "name", "age"]
URL = "postgresql+psycopg2://u:s3cr3t@127.0.0.1:1/db"


# ----------------------------------------------------------------------------- confined ingest paths (no Spark)
@pytest.fixture
def landing(tmp_path: Path) -> tuple[Settings, Path, Path]:
    """Settings whose only configured root is ``home/landing``, a readable file inside, and a folder outside."""
    home = tmp_path / "home"
    home.mkdir()
    settings = Settings(home=home, catalog_name="edges", user="tester")
    roots = allowed_roots(settings)  # creates the default landing folder
    assert home / "landing" in list(settings.ingest_root_paths)
    assert (
        (home / "landing").is_dir()
        and (home / "landing").resolve() in roots
        and uploads_root(settings).resolve() in roots
    )
    inside = home / "landing" / "ok.csv"
    inside.write_text("id,name,age\n1,ann,30\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("id,name,age\n9,eve,99\n")
    return settings, home / "landing", outside


def _confined(settings: Settings, *sources: str) -> list[str]:
    return resolve_sources(list(sources), policy=SourcePolicy.CONFINED, roots=allowed_roots(settings))[0]


def _refused(settings: Settings, source: str) -> str:
    with pytest.raises(PathNotAllowedError) as info:
        _confined(settings, source)
    msg = str(info.value)
    assert "outside the allowed ingest roots" in msg and str((settings.home / "landing").resolve()) in msg, (
        msg
    )
    assert len(msg.splitlines()) == 1
    return msg


def test_confined_paths_are_refused_outside_the_roots_and_read_inside(
    landing: tuple[Settings, Path, Path],
) -> None:
    settings, root, outside = landing
    assert _confined(settings, str(root / "ok.csv")) == [str((root / "ok.csv").resolve())]
    _refused(settings, "/etc/passwd")
    _refused(settings, str(outside / "secret.csv"))
    _refused(settings, str(root / ".." / ".." / "outside" / "secret.csv"))  # root/../x
    _refused(settings, str(outside / "missing.csv"))  # outside: refused whether or not it exists
    with pytest.raises(SourceError, match="does not exist"):  # inside: the usual error
        _confined(settings, str(root / "missing.csv"))
    # a symlink inside the root that points outside (file and folder)
    (root / "link.csv").symlink_to(outside / "secret.csv")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    _refused(settings, str(root / "link.csv"))
    _refused(settings, str(root / "linkdir" / "secret.csv"))
    # a symlink inside the root to a file inside the root is fine (resolved to its target)
    (root / "alias.csv").symlink_to(root / "ok.csv")
    assert _confined(settings, str(root / "alias.csv")) == [str((root / "ok.csv").resolve())]
    # a relative path is resolved against the working directory, then checked
    cwd = os.getcwd()
    try:
        os.chdir(outside)
        _refused(settings, "secret.csv")
        os.chdir(root)
        assert _confined(settings, "ok.csv") == [str((root / "ok.csv").resolve())]
    finally:
        os.chdir(cwd)


def test_confined_globs_check_the_folder_and_every_match(landing: tuple[Settings, Path, Path]) -> None:
    settings, root, outside = landing
    (root / "more.csv").write_text("id,name,age\n2,bob,40\n")
    assert len(_confined(settings, str(root / "*.csv"))) == 2
    _refused(settings, "/etc/pass*")
    _refused(settings, str(outside / "*.csv"))
    _refused(settings, str(root / ".." / ".." / "outside" / "*.csv"))
    _refused(settings, str(root / "*" / ".." / ".." / ".." / "outside" / "*.csv"))  # '..' after the wildcard
    (root / "sub").mkdir()
    (root / "sub" / "evil.csv").symlink_to(outside / "secret.csv")
    _refused(settings, str(root / "sub" / "*.csv"))  # the match is a symlink leading out
    with pytest.raises(SourceError, match="matches no file"):
        _confined(settings, str(root / "*.nothing"))


def test_configured_roots_and_symlinked_roots(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "in").mkdir(parents=True)
    (data / "in" / "a.csv").write_text("id\n1\n")
    (tmp_path / "alias").symlink_to(data, target_is_directory=True)
    s = Settings.from_env(
        {
            "WAP_HOME": str(tmp_path / "home"),
            "WAP_INGEST_ROOTS": f"{tmp_path / 'alias'}:{tmp_path / 'not_there'}",
        }
    )
    assert s.ingest_root_paths == (tmp_path / "alias", tmp_path / "not_there")
    roots = allowed_roots(s)
    assert (
        data.resolve() in roots and not (tmp_path / "not_there").exists()
    )  # a configured root is never created
    assert not (
        tmp_path / "home" / "landing"
    ).exists()  # the default landing folder only when no root is configured
    assert _confined(s, str(tmp_path / "alias" / "in" / "a.csv")) == [str((data / "in" / "a.csv").resolve())]
    assert _confined(s, str(data / "in" / "a.csv")) == [str((data / "in" / "a.csv").resolve())]
    with pytest.raises(PathNotAllowedError) as info:  # the refusal names the roots that allow something
        _confined(s, "/etc/hostname")
    assert str(data.resolve()) in str(info.value) and "not_there" not in str(info.value)
    # no root at all: a confined ingest reads nothing
    with pytest.raises(PathNotAllowedError, match="none configured"):
        resolve_sources([str(data / "in" / "a.csv")], policy=SourcePolicy.CONFINED, roots=())


def test_uploads_get_a_folder_per_batch_and_are_allowed(landing: tuple[Settings, Path, Path]) -> None:
    settings, _root, _outside = landing
    a = save_upload(settings, "flights.csv", b"id,name,age\n1,a,2\n")
    b = save_upload(settings, "flights.csv", b"id,name,age\n3,b,4\n")
    assert a != b and a.name == b.name == "flights.csv" and a.parent != b.parent
    assert a.read_bytes() == b"id,name,age\n1,a,2\n" and b.read_bytes() == b"id,name,age\n3,b,4\n"
    assert a.parent.parent == b.parent.parent == uploads_root(settings)
    evil = save_upload(settings, "../../etc/passwd", b"x,y\n1,2\n")
    assert evil.name == "passwd" and evil.parent.parent == uploads_root(settings)
    assert save_upload(settings, "..", b"a\n1\n").name == "upload"
    assert _confined(settings, str(a), str(b)) == [str(a.resolve()), str(b.resolve())]


def test_core_ingest_refuses_a_server_path_outside_the_roots_and_journals_it(
    make_lakehouse, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(name="confined", ingest_roots=(tmp_path / "confined" / "landing",))
    (tmp_path / "confined" / "landing").mkdir(parents=True)
    with pytest.raises(PathNotAllowedError, match="outside the allowed ingest roots"):
        ingest(lh, T, ["/etc/passwd"], create=True, fmt="csv")  # the default policy is CONFINED
    assert not lh.tables()
    entry = lh.journal.history(str(T), action="ingest")[0]
    assert entry.outcome == "error" and "outside the allowed ingest roots" in (entry.reason or "")


# ----------------------------------------------------------------------------- the CLI reads any path (Spark)
def _cli_env(monkeypatch: pytest.MonkeyPatch, lh: Lakehouse) -> None:
    use_env(monkeypatch, lake_env(lh.settings, "cli-user"))  # no WAP_INGEST_ROOTS


def test_cli_reads_any_path_its_user_can_read(make_lakehouse, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(name="cli")
    _cli_env(monkeypatch, lh)
    src = write_csv(tmp_path / "elsewhere" / "people.csv", HEADER, [(1, "ann", 30), (2, "bob", 40)])
    env_lh = Lakehouse.from_env()
    assert not Path(src).resolve().is_relative_to((env_lh.settings.home / "landing").resolve())
    with pytest.raises(PathNotAllowedError):  # the same file, confined (as the console would read it)
        ingest(env_lh, T, [src], create=True)
    code = main(["ingest", "demo.people", src, "--create", "--branch", "from_cli"])
    out, err = capsys.readouterr()
    assert (code, out.strip()) == (0, "from_cli"), err
    assert "from_cli" in refs(lh, T)


# ----------------------------------------------------------------------------- secrets
def test_mask_secrets_forms() -> None:
    assert mask_secrets(URL) == "postgresql+psycopg2://u:***@127.0.0.1:1/db"
    assert (
        mask_secrets("jdbc:postgresql://h:5432/db?user=u&password=s3cr3t&ssl=true")
        == "jdbc:postgresql://h:5432/db?user=u&password=***&ssl=true"
    )
    assert (
        mask_secrets("postgresql://u:p@ss/w@h/db then a@b") == "postgresql://u:***@h/db then a@b"
    )  # '@' and '/' in a password
    assert (
        mask_secrets('{"password": "s3cr3t", "uri": "sqlite:////x.db"}')
        == '{"password": "***", "uri": "sqlite:////x.db"}'
    )
    assert (
        mask_secrets("sqlite:////tmp/catalog.db and postgresql://u@h/db")
        == "sqlite:////tmp/catalog.db and postgresql://u@h/db"
    )
    s = Settings(
        home=Path("/tmp/x"), catalog_uri="postgresql://wap:LongerSecret42@db.corp/cat", catalog_name="masked"
    )
    assert (
        s.masked_catalog_uri == "postgresql://wap:***@db.corp/cat"
        and "LongerSecret42" not in s.masked_jdbc_uri
    )
    assert (
        mask_secrets("psql said: auth failed with LongerSecret42") == "psql said: auth failed with ***"
    )  # a known password anywhere


def test_cli_errors_never_show_the_catalog_password(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WAP_HOME", str(tmp_path / "h"))
    # a WapError whose message echoes the argument (a URL pasted where a table was expected)
    assert main(["history", URL]) == 2
    err = capsys.readouterr().err
    assert "s3cr3t" not in err and "u:***@127.0.0.1" in err and len(err.strip().splitlines()) == 1
    # an unreachable catalog: a real process, an unexpected (driver) error, with and without --debug
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    env.update(WAP_HOME=str(tmp_path / "h2"), WAP_CATALOG_URI=URL)
    for debug in ([], ["--debug"]):
        p = cli_process(env, *debug, "tables", timeout=120)
        assert p.returncode == 2, p.stderr
        assert "s3cr3t" not in p.stderr + p.stdout
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith("error: OperationalError") and "127.0.0.1" in last
        if not debug:
            assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_journal_stores_reasons_and_details_masked(make_lakehouse) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(name="journal")
    lh.journal.record(
        user="ops",
        action="discard",
        outcome="discarded",
        table="demo.people",
        branch="b",
        reason=f"catalog {URL} was down",
        details={
            "uri": URL,
            "nested": [{"jdbc": "jdbc:postgresql://h/db?password=s3cr3t"}],
            "password": "s3cr3t",
        },
    )
    with lh.catalog.engine.connect() as conn:  # the stored row itself, not the API's view of it
        row = conn.execute(
            select(journal_table.c.reason, journal_table.c.details).order_by(journal_table.c.id.desc())
        ).first()
    assert row is not None
    assert "s3cr3t" not in row[0] and "u:***@127.0.0.1" in row[0]
    assert "s3cr3t" not in row[1]
    details = json.loads(row[1])
    assert details["uri"] == "postgresql+psycopg2://u:***@127.0.0.1:1/db" and details["password"] == "***"


def test_log_records_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("wap_core.workflow.ingest").warning("connecting to %s", URL)
        logging.getLogger("py4j.clientserver").warning(f"conf uri={URL}")
        try:
            raise RuntimeError(f"cannot reach {URL}")
        except RuntimeError:
            logging.getLogger("wap_core").exception("failed")
    assert len(caplog.records) == 3
    assert "s3cr3t" not in caplog.text and "u:***@127.0.0.1" in caplog.text
    assert all("s3cr3t" not in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- identifiers
@pytest.mark.parametrize(
    "bad",
    [
        "demo.flights\n",
        "branch\n",
        "a\nb",
        "flіghts",
        "ｆlights",
        "flights\u2028",
        "",
        "x" * 129,
        "a\r",
        " a",
    ],
)
def test_identifiers_full_match_and_one_line_errors(bad: str) -> None:
    for validate in (
        validate_identifier,
        validate_branch,
        TableId.parse,
        lambda v: TableId.parse(f"demo.{v}"),
    ):
        with pytest.raises(ValidationError) as info:
            validate(bad)  # type: ignore[operator]
        assert len(str(info.value).splitlines()) == 1, repr(str(info.value))
    assert validate_identifier("x" * 128) == "x" * 128


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["history", "demo.flights\n"], "invalid table name 'flights\\n'"),
        (["publish", "demo.people", "branch\n"], "invalid branch name 'branch\\n'"),
        (["publish", "demo.people", "a\nb"], "invalid branch name 'a\\nb'"),
        (["publish", "demo.people", "br\u0430nch"], "invalid branch name"),  # Cyrillic a
        (["history", "demo." + "x" * 129], "at most 128 characters"),
    ],
)
def test_cli_bad_names_exit_2_with_one_line(
    tmp_path: Path, monkeypatch, capsys, args: list[str], fragment: str
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WAP_HOME", str(tmp_path / "h"))
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: ") and fragment in err, err


def test_validation_and_source_errors_are_one_line_whatever_the_message() -> None:
    assert str(ValidationError("bad\nname\r\nhere")) == "bad\\nname\\r\\nhere"
    assert len(str(SourceError("source /tmp/a\nb.csv does not exist")).splitlines()) == 1


# ----------------------------------------------------------------------------- CSV as RFC 4180 (Spark)
@pytest.fixture
def people(make_lakehouse):  # type: ignore[no-untyped-def]
    lh = make_lakehouse("demo.people:\n  checks:\n    - not_null: [name]\n", name="csv")
    r = ingest(
        lh,
        T,
        [write_csv(lh.settings.home.parent / "seed.csv", HEADER, [(1, "ann", 30)])],
        create=True,
        branch="seed",
    )
    from wap_core.workflow.publish import publish

    publish(lh, T, r.branch)
    return lh


def test_rfc4180_quoted_newlines_and_doubled_quotes_round_trip(people, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = people
    expected = {
        2: "two\nlines, and a comma",
        3: 'she said "hi"',
        4: 'multi\nline "quoted" and, comma\nthird',
        5: "plain",
    }
    src = tmp_path / "rfc.csv"
    src.write_text(
        'id,name,age\n2,"two\nlines, and a comma",22\n3,"she said ""hi""",23\n'
        '4,"multi\nline ""quoted"" and, comma\nthird",24\n5,plain,25\n'
    )
    import csv as pycsv

    with src.open(newline="") as fh:
        assert [r[1] for r in pycsv.reader(fh)][1:] == list(
            expected.values()
        )  # Python agrees: valid RFC 4180
    r = ingest(lh, T, [str(src)], branch="rfc")
    assert (r.malformed_rows, r.rows_written, r.audit.status) == (0, 4, "passed"), to_jsonable(r.audit)
    got = {row.id: row.name for row in lh.spark.table(lh.spark_name(T, "rfc")).where("id > 1").collect()}
    assert got == expected


def test_malformed_rows_after_multiline_records_are_located_at_their_first_line(
    people, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = people
    src = tmp_path / "located.csv"
    src.write_text(
        "id,name,age\n"  # line 1
        '2,"dee\nof two lines",20\n'  # lines 2-3
        "3,eve\n"  # line 4: ragged
        '4,"fay\nsays ""no""\nthrice",x7\n'  # lines 5-7: bad value (age), record starts on line 5
        "5,gus,22,extra\n"  # line 8: ragged
        "6,hal,23\n"  # line 9
    )
    r = ingest(lh, T, [str(src)], branch="located")
    assert (r.rows_written, r.malformed_rows) == (2, 3)
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert check.status == "failed"
    lines = sorted((s["__file"], s["__line"]) for s in check.sample)
    assert lines == [("located.csv", 4), ("located.csv", 5), ("located.csv", 8)], check.sample
    names = {row.id: row.name for row in lh.spark.table(lh.spark_name(T, "located")).collect()}
    assert names == {1: "ann", 2: "dee\nof two lines", 6: "hal"}


def _unreadable_result(lh, src: Path, branch: str) -> tuple[object, list[tuple[str, int]], set[int]]:  # type: ignore[no-untyped-def]
    r = ingest(lh, T, [str(src)], branch=branch)
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert check.status == "failed" and r.audit.status == "failed", to_jsonable(r.audit)
    assert check.failing_rows == r.malformed_rows
    lines = sorted((s["__file"], s["__line"]) for s in check.sample)
    ids = {row.id for row in lh.spark.table(lh.spark_name(T, branch)).select("id").collect()}
    return r, lines, ids


# issue 19 item 6: an unterminated quote, or a field over the limit, is a malformed record on its line
UNREADABLE = [
    pytest.param(  # no line break after the last line
        'id,name,age\n2,ok,20\n3,bo,21\n4,"never closed,22',
        [4],
        {1, 2, 3},
        id="at-end-of-file",
    ),
    pytest.param(  # in the middle, the next quote in the file "closes" it: text after a closing quote
        'id,name,age\n2,ok,20\n3,"open,21\n4,dee,22\n5,"quoted, fine",23\n6,"multi\nline",24\n7,gus,25\n',
        [3],  # the quote of "quoted, fine" closed the one of line 3: reading resumes on line 4
        {1, 2, 4, 5, 6, 7},
        id="in-the-middle",
    ),
    pytest.param(  # in the middle of a long file, no other quote after it
        'id,name,age\n2,"never closed,20\n' + "".join(f"{i},n{i},{i}\n" for i in range(3, 100_000)),
        [2],
        {1, *range(3, 100_000)},
        id="in-the-middle-of-a-long-file",
    ),
    pytest.param(
        f'id,name,age\n2,ok,20\n3,"{"x" * (CSV_MAX_FIELD_CHARS + 10)}",21\n4,dee,22\n',
        [3],
        {1, 2, 4},
        id="field-over-the-limit",
    ),
]


def test_the_unterminated_quote_of_issue_19_no_longer_swallows_the_next_record(
    make_lakehouse, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(None, name="codes")
    codes = TableId("demo", "codes")
    seed = ingest(
        lh, codes, [write_csv(tmp_path / "seed.csv", ["code", "label"], [("Z1", "a")])], create=True
    )
    from wap_core.workflow.publish import publish

    publish(lh, codes, seed.branch)
    src = tmp_path / "codes.csv"
    src.write_text('code,label\nZ2,b\nZ3,"unterminated\nZ4,x')  # the reproducer, exactly
    r = ingest(lh, codes, [str(src)], branch="repro")
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert (r.malformed_rows, r.rows_written, r.audit.status, check.status) == (1, 2, "failed", "failed")
    assert [(s["__file"], s["__line"]) for s in check.sample] == [("codes.csv", 3)]
    assert check.sample[0]["_corrupt_record"] == 'Z3,"unterminated'
    got = {(row.code, row.label) for row in lh.spark.table(lh.spark_name(codes, "repro")).collect()}
    assert got == {("Z1", "a"), ("Z2", "b"), ("Z4", "x")}  # Z4 lands as its own record


@pytest.mark.parametrize(("text", "bad_lines", "landed"), UNREADABLE)
def test_unreadable_csv_records_are_malformed_rows_on_their_line(  # type: ignore[no-untyped-def]
    people, tmp_path: Path, text: str, bad_lines: list[int], landed: set[int]
) -> None:
    lh = people
    src = tmp_path / "broken.csv"
    src.write_text(text)
    main_before = refs(lh, T)["main"]
    r, lines, ids = _unreadable_result(lh, src, "broken")
    assert r.malformed_rows == len(bad_lines), to_jsonable(r.audit)  # type: ignore[attr-defined]
    assert lines == [("broken.csv", n) for n in bad_lines]
    assert ids == landed  # the good rows land in the branch, the unreadable ones never
    assert r.rows_written == len(landed) - 1  # type: ignore[attr-defined]
    assert refs(lh, T)["main"] == main_before


def test_unreadable_records_and_ragged_rows_are_located_together(people, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = people
    a = tmp_path / "a" / "part.csv"
    b = tmp_path / "b" / "part.csv"  # the same file name in another folder
    a.parent.mkdir()
    b.parent.mkdir()
    a.write_text('id,name,age\n2,"two\nlines",20\n3,eve\n4,"open,21\n5,fay,x7\n6,gus,22\n')
    b.write_text("id,name,age\n7,hal,23\n8,ivy\n")
    r = ingest(lh, T, [str(a), str(b)], branch="both")
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert (r.malformed_rows, r.rows_written, check.status) == (4, 3, "failed")
    got = sorted((s["__file"], s["__line"], s["__problem"].split(":")[0]) for s in check.sample)
    assert got == [
        ("part.csv", 3, "ragged or unparsable line"),  # b
        ("part.csv", 4, "ragged or unparsable line"),  # a
        ("part.csv", 5, "unterminated quote"),  # a
        ("part.csv", 6, "bad value in age"),  # a
    ], check.sample
    ids = {row.id for row in lh.spark.table(lh.spark_name(T, "both")).select("id").collect()}
    assert ids == {1, 2, 6, 7}
