"""librdkafka's own log lines, collapsed for a person at a terminal (issue 20 point 7).

An unreachable broker makes librdkafka log the same "Connect to ... failed: Connection refused" every few
hundred milliseconds: about 100 lines in 10 s. The commands a person runs (`dispersion status`) install
`collapsed_kafka_logs`: each distinct line (the thread and timing details taken out) is printed once, as it
first happens, and at the end one line says how often each was repeated. `where_kafka_is` names the address and
where it came from, for the one clear line the command prints when it gives up.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from processor.cli.config import load_kafka_settings, optional_config_path
from processor.domain.settings import ConfigError
from processor.kafka.settings import BOOTSTRAP_ENV

_THREAD = re.compile(r"\[thrd:[^\]]*\]:\s*")
_CLIENT = re.compile(r"\[[^\]]*#(consumer|producer|admin)-\d+\]\s*")
_TIMING = re.compile(r"\(after \d+ms in state (\w+)\)")


def distinct(message: str) -> str:
    """A librdkafka line without what changes between its repeats (thread, client number, milliseconds)."""
    text = _CLIENT.sub("", _THREAD.sub("", message))
    return _TIMING.sub(r"(in state \1)", text).strip()


class CollapsedKafkaLog(logging.Handler):
    """Prints each distinct librdkafka line once to `stream` and counts the repeats (see the module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.counts: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Print a line the first time, count it after."""
        text = distinct(record.getMessage())
        self.counts[text] = self.counts.get(text, 0) + 1
        if self.counts[text] == 1:
            self.stream.write(f"kafka: {text}\n")
            self.stream.flush()

    def summary(self) -> list[str]:
        """One line per line that repeated, with how often."""
        return [f"kafka: {text} ({n} times in all)" for text, n in self.counts.items() if n > 1]


@contextmanager
def collapsed_kafka_logs(stream: TextIO | None = None) -> Iterator[CollapsedKafkaLog]:
    """Route the `dispersion.kafka.*` loggers (librdkafka's lines) to a `CollapsedKafkaLog` while the block runs."""
    target = stream or sys.stderr
    logger = logging.getLogger("dispersion.kafka")
    handler = CollapsedKafkaLog(target)
    saved = (logger.handlers[:], logger.propagate, logger.level)
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
        for line in handler.summary():
            target.write(line + "\n")


def where_kafka_is(bootstrap: str, explicit: str | None, config: str | None) -> str:
    """`127.0.0.1:9092 (from --bootstrap)`, `(from [kafka] bootstrap_servers in FILE)` or `(from $VAR)`."""
    if explicit and explicit.strip():
        return f"{bootstrap} (from --bootstrap)"
    path = optional_config_path(config)
    if path is not None:
        try:  # read (and checked) already: an unusable file here only means the address came from elsewhere
            configured = load_kafka_settings(path).bootstrap_servers
        except ConfigError:
            configured = ""
        if configured:
            return f"{bootstrap} (from [kafka] bootstrap_servers in {path})"
    return f"{bootstrap} (from ${BOOTSTRAP_ENV})"
