"""CSV exports: decoded with the profile's encoding, split with its delimiter (else the one detected)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import IO, Any

from processor.exports.profile import sniff_delimiter


class ByteCount(io.RawIOBase):
    """Counts the bytes `csv_rows` reads from the file (`count`), so progress can be shown as a share of it."""

    def __init__(self) -> None:
        self.raw: IO[bytes] = io.BytesIO()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


def csv_rows(
    path: Path,
    *,
    encoding: str,
    delimiter: str | None,
    skip_rows: int = 0,
    lines: bool = False,
    counted: ByteCount | None = None,
) -> Iterator[tuple[int, Sequence[str]]]:
    """Every record of the file, numbered from 1 (a blank line is an empty record, so numbers match a
    spreadsheet's rows); with `lines`, numbered by the file line it ends on instead (a quoted line break counts).
    Without a delimiter, it is detected from the first non-blank line after `skip_rows` lines (the header). A byte
    order mark left by the encoding is dropped. Decoding errors surface as UnicodeDecodeError while iterating.
    `counted` counts the bytes read (progress)."""
    with path.open("rb") as raw:
        counter = counted or ByteCount()
        counter.raw = raw
        text = io.TextIOWrapper(io.BufferedReader(counter), encoding=encoding, newline="")
        consumed: list[str] = []
        if delimiter is None:
            for line in text:
                consumed.append(line)
                if len(consumed) > skip_rows and line.strip():
                    break
            delimiter = sniff_delimiter(consumed[-1] if consumed else "")
        if consumed:
            consumed[0] = consumed[0].removeprefix("\ufeff")
        elif first := text.readline():
            consumed.append(first.removeprefix("\ufeff"))
        reader = csv.reader(chain(consumed, text), delimiter=delimiter)
        if lines:
            for row in reader:
                yield reader.line_num, row
        else:
            yield from enumerate(reader, start=1)
