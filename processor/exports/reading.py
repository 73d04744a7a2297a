"""An export file of any kind read into one batch, as `dispersion submit` reads it: our CSV or JSON layout, a workbook
in our layout, or any CSV or workbook through an export profile. The batch id, when none is given, is derived from
what the payroll pays (`layout.settle_batch_id`). Progress is reported through `Progressing`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from processor.exports.layout import BatchFields, Export, ExportError, Problem, read_csv, read_json, settle_batch_id
from processor.exports.mapping import Explanation
from processor.exports.profile import ExportProfile, kind_mismatch, sniff_delimiter
from processor.exports.profiled import read_profiled, workbook_profile

Kind = Literal["csv", "json", "xlsx"]


class Progressing(Protocol):
    """Where reading reports its progress (throttled unless `force`)."""

    def update(self, text: str, *, force: bool = False) -> None:
        """Show `text`."""


class _CountingReader(io.RawIOBase):
    """Counts the bytes read from a binary file, so progress can be shown as a share of the file."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


def kind_by_extension(name: str) -> Kind:
    """How a file is read when nothing says otherwise: `.json` as JSON, `.xlsx`/`.xlsm` as a workbook, else CSV."""
    lowered = name.lower()
    if lowered.endswith(".json"):
        return "json"
    return "xlsx" if lowered.endswith((".xlsx", ".xlsm")) else "csv"


def read_export(
    path: Path,
    fields: BatchFields,
    defaults: BatchFields,
    progress: Progressing,
    *,
    kind: Kind | None = None,
    encoding: str | None = None,
    delimiter: str | None = None,
    profile: ExportProfile | None = None,
    explain: Callable[[Explanation], None] | None = None,
) -> Export:
    """The batch in `path` (`kind`: else by its extension; a profile reads it as the profile says); ExportError
    listing every problem when it cannot be built. A CSV may also raise UnicodeDecodeError or csv.Error, a file
    past a limit ExportLimitError."""
    fmt = kind or kind_by_extension(path.name)
    size = path.stat().st_size
    now = datetime.now(UTC)
    requested_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if profile is None and fmt == "xlsx":
        profile = workbook_profile(path)  # a workbook in our own layout: our column names in its first row
    if profile is not None:
        export = read_profiled(
            path,
            profile,
            fields,
            requested_at=requested_at,
            defaults=defaults,
            explain=explain,
            on_row=lambda count: progress.update(f"reading {path.name}: {count:,} rows"),
        )
        # the updates while reading are throttled (a workbook's first rows come at once): the real count, once
        progress.update(f"read {path.name}: {len(export.batch.transactions):,} rows", force=True)
        return replace(settle_batch_id(export, submitted_at=now), size=size)
    with path.open("rb") as opened:
        mismatch = kind_mismatch(path.name, fmt, opened.read(8))
    if mismatch is not None:
        raise ExportError([Problem(None, "file", mismatch)])
    if fmt == "json":
        data = path.read_bytes()
        progress.update(f"read {size:,} bytes", force=True)
        return replace(
            settle_batch_id(read_json(data, fields, requested_at=requested_at, defaults=defaults), submitted_at=now),
            size=size,
        )
    with path.open("rb") as raw:
        counter = _CountingReader(raw)
        text = io.TextIOWrapper(io.BufferedReader(counter), encoding=encoding or "utf-8-sig", newline="")
        first = text.readline()
        reader = csv.reader(_chain(first, text), delimiter=delimiter or sniff_delimiter(first))

        def on_row(count: int) -> None:
            share = f"{100 * counter.count / size:.0f}%" if size else ""
            progress.update(f"reading {path.name}: {count:,} rows {share}")

        export = read_csv(
            reader, fields, requested_at=requested_at, defaults=defaults, on_row=on_row, line_of=lambda: reader.line_num
        )
        # the updates above are throttled (the first row often reads the whole file): the real count, once
        progress.update(f"read {path.name}: {len(export.batch.transactions):,} rows 100%", force=True)
    return replace(settle_batch_id(export, submitted_at=now), size=size)


def _chain(first: str, rest: IO[str]) -> Iterator[str]:
    yield first
    yield from rest
