"""CSV exports: decoded with the profile's encoding, split with its delimiter (else the one detected)."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

from processor.exports.profile import sniff_delimiter


def csv_rows(
    path: Path, *, encoding: str, delimiter: str | None, skip_rows: int = 0
) -> Iterator[tuple[int, Sequence[str]]]:
    """Every record of the file, numbered from 1 (a blank line is an empty record, so numbers match a
    spreadsheet's rows). Without a delimiter, it is detected from the first non-blank line after `skip_rows`
    lines (the header). Decoding errors surface as UnicodeDecodeError while iterating."""
    with path.open(encoding=encoding, newline="") as text:
        consumed: list[str] = []
        if delimiter is None:
            for line in text:
                consumed.append(line)
                if len(consumed) > skip_rows and line.strip():
                    break
            delimiter = sniff_delimiter(consumed[-1] if consumed else "")
        reader = csv.reader(chain(consumed, text), delimiter=delimiter)
        yield from enumerate(reader, start=1)
