"""Metadata files no pointer references: what a lost race or a killed commit leaves in a table's metadata folder.

A commit writes the table's next ``*.metadata.json`` first and then moves the catalog's pointer to it. A commit
that loses its compare-and-swap (a batch's multi-table commit that lost to another publish writes EVERY
table's next file before the swap), or a process killed between the write and the swap, leaves a file that
nothing points at. A file is an orphan when it is neither the table's current metadata nor in that metadata's
``metadata-log`` (the previous versions Iceberg keeps), and it is older than a grace period: a younger one may
be the next file of a commit still in flight. Files are named ``<version>-<uuid>.metadata.json``, unique
inside the table's metadata folder, so they are compared by name.

The folder is listed through PyArrow's file system of the table's location (the same PyIceberg uses to read
it): the local file system, or S3 with the lakehouse's S3 settings.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

METADATA_SUFFIX = ".metadata.json"
METADATA_PATH_PROPERTY = "write.metadata.path"  # Iceberg's table property: where metadata files go


@dataclass(frozen=True)
class OrphanFile:
    """A metadata file nothing references: its path on its file system, when it was written, its size."""

    path: str
    modified: datetime
    size: int


def metadata_folder(tbl: Table) -> str:
    """Where the table's metadata files are written (its location's ``metadata/`` unless the property says)."""
    return tbl.properties.get(METADATA_PATH_PROPERTY) or f"{tbl.metadata.location.rstrip('/')}/metadata"


def referenced_metadata(tbl: Table) -> set[str]:
    """The names of the metadata files the table references: the current one and its metadata-log."""
    names = {posixpath.basename(tbl.metadata_location)}
    names.update(posixpath.basename(e.metadata_file) for e in tbl.metadata.metadata_log)
    return names


def _file_system(tbl: Table, properties: Mapping[str, str]) -> tuple[FileSystem, str]:
    io = PyArrowFileIO(dict(properties))
    scheme, netloc, path = PyArrowFileIO.parse_location(metadata_folder(tbl), io.properties)
    return io.fs_by_scheme(scheme, netloc), path


def orphan_metadata_files(
    tbl: Table, properties: Mapping[str, str], *, written_before: datetime
) -> list[OrphanFile]:
    """The table's metadata files nothing references, written before ``written_before`` (oldest first)."""
    fs, folder = _file_system(tbl, properties)
    keep = referenced_metadata(tbl)
    out = []
    for info in fs.get_file_info(FileSelector(folder, allow_not_found=True, recursive=False)):
        if (
            info.type != FileType.File
            or not info.base_name.endswith(METADATA_SUFFIX)
            or info.base_name in keep
        ):
            continue
        mtime = info.mtime
        if mtime is None:  # no time, no proof it is old: kept
            continue
        modified = mtime if mtime.tzinfo is not None else mtime.replace(tzinfo=UTC)
        if modified < written_before:
            out.append(OrphanFile(info.path, modified, int(info.size or 0)))
    return sorted(out, key=lambda f: (f.modified, f.path))


def delete_orphans(
    tbl: Table, properties: Mapping[str, str], files: Sequence[OrphanFile]
) -> list[OrphanFile]:
    """Delete ``files`` (found by :func:`orphan_metadata_files`) unless the table references one meanwhile;
    the files deleted."""
    fs, _ = _file_system(tbl, properties)
    keep = referenced_metadata(tbl)
    done = []
    for f in files:
        if posixpath.basename(f.path) in keep:
            continue
        try:
            fs.delete_file(f.path)
        except FileNotFoundError:
            continue  # gone already (another gc)
        done.append(f)
    if done:
        log.info("removed %d orphan metadata file(s) of %s", len(done), metadata_folder(tbl))
    return done
