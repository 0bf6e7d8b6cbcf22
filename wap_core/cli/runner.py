"""Run one command: parse, identify the user, reconcile once, dispatch, print errors as one line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from wap_core import api
from wap_core.cli.commands import COMMANDS, SUBCOMMANDS
from wap_core.cli.output import EXIT_ERROR, EXIT_OK, print_traceback, printable_streams
from wap_core.cli.parser import parse_args
from wap_core.config import mask_secrets
from wap_core.exceptions import WapError, one_line

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: exit code 0 success, 1 refused or audit failed, 2 bad input or error. Whatever it prints
    shows control characters escaped (:func:`wap_core.cli.output.printable_streams`)."""
    with printable_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    api.set_spark_log_level("warn" if args.debug else "error")
    _log_to_stderr(args.debug)
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (``branches --json | head -1``): end quietly. Point stdout at /dev/null
        # so the interpreter's final flush does not raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
            pass
        return EXIT_OK
    except WapError as exc:
        if args.debug:
            print_traceback()
        store = store_failure_line(args, exc)  # the object store down / refusing / bucket missing: name it
        print(f"error: {store or mask_secrets(str(exc))}", file=sys.stderr)
        return EXIT_ERROR if store else exc.exit_code
    except KeyboardInterrupt:  # pragma: no cover
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - unexpected: one line unless --debug
        if args.debug:
            print_traceback()
        store = store_failure_line(args, exc)
        if store:
            print(f"error: {store}", file=sys.stderr)
            return EXIT_ERROR
        print(f"error: {unexpected_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        _drain_notifications()


class _OneLineFormatter(logging.Formatter):
    """A log record as one line, its message only: no traceback (``--debug`` shows them in full)."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(mask_secrets(record.getMessage()))


def _log_to_stderr(debug: bool) -> None:
    """Warnings and errors logged during the command go to stderr, as Python's last-resort handler would
    print them, but one line each unless ``--debug``: a failure (the object store down in the middle of
    a publish) is never followed by a Python or Java stack. An embedding program's (or pytest's)
    logging configuration is left alone."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter() if debug else _OneLineFormatter())
    root.addHandler(handler)


def _drain_notifications() -> None:
    """Give this command's queued notifications a bounded grace period (``exit_grace_seconds``); the rest stays
    in the outbox for the next process or the console to deliver."""
    try:
        api.drain_notifications()
    except Exception:
        log.exception("could not wait for queued notifications")


def _run(args: argparse.Namespace) -> int:
    # The start-up every face shares (wap_core.api.start): a configured file or folder (or an ingest
    # root's bucket) that is not there is exit 2, naming it. Whoever runs the CLI already holds the
    # catalog's credentials; roles still apply (the access file), the same as in the console.
    # The acting user: WAP_TOKEN's, or WAP_USER / the OS user unless access.yml says cli_identity: token.
    ctx = api.open_context(api.start(args.home), service=True)
    if args.command not in _NO_RECONCILE:
        api.recover(ctx)  # recovery is a step: crashed actions are resolved once, before the command reads
    return {**COMMANDS, **SUBCOMMANDS}[args.command](args, ctx)


# Commands that read no table nor the journal: no recovery step before them.
_NO_RECONCILE = frozenset({"whoami", "notify-test"})


def store_failure_line(args: argparse.Namespace, exc: BaseException) -> str | None:
    """A failure of the object store (down, refused credentials, missing bucket) as one line naming the
    endpoint (wap_core.lake.errors, the same line the console's pages show; a Spark error that does not name its
    cause is checked against the store itself); None when the store is not to blame."""
    return api.store_failure(exc, args.home)  # None when the settings themselves are broken


def unexpected_line(exc: BaseException) -> str:
    """An unexpected error as one line: Spark's ``ERROR_CLASS: message`` for a Spark/Py4J error (never a
    Py4J object name), else the exception's type and first line; secrets masked."""
    if api.is_spark_error(exc):
        return api.spark_error_line(exc)
    first = (mask_secrets(str(exc)).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {first}"
