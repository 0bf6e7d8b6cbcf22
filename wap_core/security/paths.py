"""Where server-side sources may be read from: the allowed ingest roots and per-batch upload folders.

A confined ingest (the console: :attr:`SourcePolicy.CONFINED`, the default of
:func:`wap_core.workflow.ingest.ingest`) reads only files under the allowed roots: the configured
``WAP_INGEST_ROOTS`` (``:``-separated, default ``$WAP_HOME/landing``) and the uploads root
``$WAP_HOME/uploads``. Every path is resolved through symlinks (``..`` and symlinks pointing out
are refused); a glob's folder must lie under a root and each of its matches is checked again.
The CLI passes :attr:`SourcePolicy.ANY`: whoever runs it already holds the catalog's credentials,
so it reads any path its OS user can read.
"""

from __future__ import annotations

import glob
import logging
import os
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from wap_core.config import Settings
from wap_core.exceptions import PathNotAllowedError, SourceError

log = logging.getLogger(__name__)
_MAGIC = frozenset("*?[")


class SourcePolicy(str, Enum):
    """Which server-side paths an ingest may read."""

    CONFINED = "confined"  # only under the allowed ingest roots (the console; the safe default)
    ANY = "any"  # any path the OS user can read (the CLI and trusted in-process callers such as the demo)


def uploads_root(settings: Settings) -> Path:
    """``$WAP_HOME/uploads``: the console's uploads, one folder per batch; always an allowed root."""
    return settings.home / "uploads"


def allowed_roots(settings: Settings) -> tuple[Path, ...]:
    """The roots a confined ingest may read under, resolved through symlinks: the configured ingest
    roots and the uploads root. The default landing folder (``$WAP_HOME/landing``) is created on first
    use; a configured root is never created (a typo must not become an empty allowed folder) and is
    left out while it does not exist."""
    if not settings.ingest_roots:
        (settings.home / "landing").mkdir(parents=True, exist_ok=True)
    uploads_root(settings).mkdir(parents=True, exist_ok=True)
    roots: list[Path] = []
    for root in (*settings.ingest_root_paths, uploads_root(settings)):
        try:
            resolved = root.expanduser().resolve(strict=True)
        except OSError:
            log.warning("ingest root %s does not exist; it allows nothing until it is created", root)
            continue
        if resolved.is_dir() and resolved not in roots:
            roots.append(resolved)
    return tuple(roots)


def describe_roots(settings: Settings) -> str:
    """The allowed roots as one line, for messages and the Ingest page."""
    return ", ".join(str(r) for r in (*settings.ingest_root_paths, uploads_root(settings)))


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def _refuse(shown: str, roots: Sequence[Path]) -> PathNotAllowedError:
    where = ", ".join(str(r) for r in roots) or "none configured"
    return PathNotAllowedError(
        f"source {shown!r} is outside the allowed ingest roots ({where}); "
        "put the file under one of them, upload it, or ask an admin to add its folder to WAP_INGEST_ROOTS"
    )


def confine(path: str | Path, roots: Sequence[Path]) -> Path:
    """The real path of ``path`` (symlinks resolved) if it lies under one of ``roots`` (resolved).

    A path outside is refused whether or not it exists, so a refusal never tells whether a file
    outside the roots exists; a path inside that does not exist is a SourceError.
    """
    shown = str(path)
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path.cwd() / p
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable folder, or a symlink loop
        try:
            lexical = p.resolve(strict=False)
        except (OSError, RuntimeError):
            raise _refuse(shown, roots) from None
        if _inside(lexical, roots):
            raise SourceError(f"source {shown} does not exist") from None
        raise _refuse(shown, roots) from None
    if not _inside(real, roots):
        raise _refuse(shown, roots)
    return real


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard component (``/in/2013/*.csv`` -> ``/in/2013``)."""
    p = Path(pattern).expanduser()
    base: list[str] = []
    for part in p.parts:
        if any(ch in part for ch in _MAGIC):
            break
        base.append(part)
    out = Path(*base) if base else Path(".")
    return out if out.is_absolute() else Path.cwd() / out


def expand_confined(pattern: str, roots: Sequence[Path]) -> list[Path]:
    """Expand a glob under the roots: its folder must lie under a root and every match is confined.

    The pattern is normalized first (``in/*/../../x`` is ``x``), so ``..`` after a wildcard cannot
    walk out of the roots before the folder is checked.
    """
    shown = pattern
    pattern = os.path.normpath(os.path.expanduser(pattern))
    base = _glob_base(pattern)
    try:
        base_real = base.resolve(strict=False)
    except (OSError, RuntimeError):
        raise _refuse(shown, roots) from None
    if not _inside(base_real, roots):  # checked before expanding: no hint whether files outside exist
        raise _refuse(shown, roots)
    matched = sorted(glob.glob(pattern))
    if not matched:
        raise SourceError(f"source pattern {shown!r} matches no file")
    return [confine(m, roots) for m in matched]


def sanitize_filename(name: str) -> str:
    """A safe file name for an upload: basename only, [A-Za-z0-9._-], no leading dots, at most 200 characters."""
    base = Path(name.replace("\\", "/")).name
    clean = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "._-" else "_" for ch in base).lstrip(".")
    return clean[:200] or "upload"


def new_upload_dir(settings: Settings) -> Path:
    """A fresh folder for one uploaded batch: ``$WAP_HOME/uploads/<UTC timestamp>_<uuid>`` (created)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S_%fZ")
    folder = uploads_root(settings) / f"{stamp}_{uuid.uuid4().hex}"
    folder.mkdir(parents=True, exist_ok=False)
    return folder


def save_upload(settings: Settings, filename: str, data: bytes) -> Path:
    """Write an uploaded file into its own new batch folder and return its path.

    Two uploads of the same name never overwrite each other: each goes to a new folder, and the
    file is created exclusively (``O_EXCL``), never through a pre-existing file or symlink.
    """
    target = new_upload_dir(settings) / sanitize_filename(filename)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return target
