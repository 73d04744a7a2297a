"""An export file of any kind read into one batch, as `dispersion submit` reads it: our CSV or JSON layout, a workbook
in our layout, or any CSV or workbook through an export profile. The batch id, when none is given, is derived from
what the payroll pays (`layout.settle_batch_id`). Progress is reported through `Progressing`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from processor.exports.layout import BatchFields, Export, ExportError, Problem, read_json, settle_batch_id
from processor.exports.mapping import Explanation
from processor.exports.profile import ExportProfile, format_for, kind_mismatch, our_layout
from processor.exports.profiled import read_profiled

Kind = Literal["csv", "json", "xlsx"]


class Progressing(Protocol):
    """Where reading reports its progress (throttled unless `force`)."""

    def update(self, text: str, *, force: bool = False) -> None:
        """Show `text`."""


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
    listing every problem when it cannot be built (a file that cannot be decoded or parsed too), ExportLimitError
    for a file past a limit. A CSV or workbook without a profile is read through the built-in `our_layout`."""
    fmt = kind or kind_by_extension(path.name)
    size = path.stat().st_size
    now = datetime.now(UTC)
    requested_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if profile is None and fmt == "json":
        export = _json(path, fields, defaults, requested_at)
        progress.update(f"read {size:,} bytes", force=True)
        return replace(settle_batch_id(export, submitted_at=now), size=size)
    if profile is None:  # our own layout, in a CSV file or a workbook
        profile = our_layout("xlsx" if fmt == "xlsx" else "csv", encoding=encoding, delimiter=delimiter)
    name = path.name
    shown = " 100%" if format_for(profile, name) == "csv" else ""  # a CSV's progress shows the share read

    def on_row(count: int, read: int) -> None:
        if count & 255 != 1:
            return  # a line every few seconds at most (`Progress`): no need to write one per row
        share = f" {100 * read / size:.0f}%" if shown and size else ""
        progress.update(f"reading {name}: {count:,} rows{share}")

    export = read_profiled(
        path, profile, fields, requested_at=requested_at, defaults=defaults, explain=explain, on_row=on_row
    )
    # the updates while reading are throttled (the first rows come at once): the real count, once
    progress.update(f"read {name}: {len(export.batch.transactions):,} rows{shown}", force=True)
    return replace(settle_batch_id(export, submitted_at=now), size=size)


def _json(path: Path, fields: BatchFields, defaults: BatchFields, requested_at: datetime) -> Export:
    """Our JSON layout (`read_json`), once the file is seen to be JSON."""
    with path.open("rb") as opened:
        mismatch = kind_mismatch(path.name, "json", opened.read(8))
    if mismatch is not None:
        raise ExportError([Problem(None, "file", mismatch)])
    return read_json(path.read_bytes(), fields, requested_at=requested_at, defaults=defaults)
