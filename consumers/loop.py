"""An at-least-once Kafka consumer loop: a message's offset is committed only after its handler durably accepted
it, or after its dead letter was acknowledged. A poison message never stops the loop.

    consumer = AtLeastOnceConsumer(consumer_config(settings, "batches"), [topic], handler, dead_letters)
    consumer.run(stop)           # until `stop` (a threading.Event) is set: commit what is done, leave the group

The handler gets each message in partition order and answers with a verdict: `Accept` (done: the offset may
move), `Retry(reason)` (a passing failure such as the store being down: try the same message again later, never
skip it) or `Reject(reason)` (dead-letter it first). The loop knows nothing of what the handler talks to. It
must be quick and must not wait on the bank: the engine's intake only
writes to the store, so the time between two polls stays far below `max.poll.interval.ms` whatever the bank does.

Failures:
- the handler answers `Retry` (the database is down or busy, the schema registry cannot serve), or the dead
  letter is not acknowledged: the
  message is retried in place (seek back, back off up to `max_backoff` seconds, poll again), never skipped;
- the handler raises anything else (a bug that this message triggers): retried `poison_attempts` times, then
  dead-lettered with the exception as the reason, so one message cannot stop its partition for good;
- the message kills the process (out of memory, a crash in a library): each attempt is counted in an
  `AttemptLog` *before* the message is handed to the handler, so the restarts count too; once a message has had
  `poison_attempts` attempts, the next delivery dead-letters it ("not handled after N attempts") without handing
  it over again. The processor injects a log kept in its store (consumers/attempts.py), which outlives the
  process; the default one lives in memory (enough for handler exceptions). A passing failure (`Retry`, a dead
  letter not acknowledged) is not counted; an attempt log that cannot be written is a passing failure too.

Static group membership: a consumer configured for a named instance (`processor.kafka.clients.consumer_config` with
`instance=NAME`) joins with `group.instance.id = NAME` unless `[kafka] static_membership = false`. The broker then
keeps the instance's partitions for it until `session.timeout.ms` (45 s) passes, so an instance restarted under the
same name within that time takes them back at once, without a rebalance; the price is that a stopped static member's
partitions wait that long before they move (it does not leave the group on close). Two live instances must never
share a name: the broker fences the older one, whose loop then stops with `ConsumerFencedError`.

Offsets are committed synchronously, explicitly (the offset after each handled message), after every polled
batch; on a rebalance the partitions being revoked are committed first, and on shutdown everything handled is
committed before `close()` leaves the group. A redelivered message (after a crash between acceptance and commit)
reaches the handler again, which recognises it (a duplicate batch id changes nothing).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import Counter, Gauge

from processor.kafka.clients import new_consumer
from producers.dlq import DeadLetterError

log = structlog.get_logger("consumers")

# Failures that are not the message's fault: it is retried where it is, never skipped or dead-lettered.

CONSUMED = Counter("dispersion_consumed_messages_total", "Messages handled by the consumers", ["topic", "outcome"])
CONSUMER_LAG = Gauge("dispersion_consumer_lag", "Messages behind the end of the partition", ["topic", "partition"])


@dataclass(frozen=True)
class Accept:
    """The message is durably taken care of (or was a duplicate): its offset may move."""

    outcome: str = "accepted"  # a label for logs and metrics: accepted, duplicate, ...


@dataclass(frozen=True)
class Retry:
    """The message could not be taken now for a passing reason: retry it in place later (never skipped)."""

    reason: str


@dataclass(frozen=True)
class Reject:
    """The message cannot be accepted: dead-letter it with `reason`, then move its offset."""

    reason: str
    batch_id: str | None = None


Verdict = Accept | Retry | Reject
Handler = Callable[[Message], Verdict]


def route(handlers: Mapping[str, Handler]) -> Handler:
    """One handler over several topics: each message goes to its topic's handler (so one consumer, one group
    member, serves every input topic of a processor)."""

    def handle(message: Message) -> Verdict:
        handler = handlers.get(message.topic() or "")
        if handler is None:
            return Reject(f"no handler for topic {message.topic()!r}")
        return handler(message)

    return handle


class DeadLetterSink(Protocol):
    """Where rejected messages go (`producers.dlq.DeadLetterPublisher`); returns only once acknowledged."""

    def publish(self, message: Any, reason: str, *, batch_id: str | None = None) -> None: ...


class AttemptLog(Protocol):
    """Counts the attempts at each message (`topic`, `partition`, `offset`); may raise when it cannot (the loop
    then retries the message later, without handing it over)."""

    def begin(self, topic: str, partition: int, offset: int) -> int:
        """Count one more attempt, before the handler runs; the attempts so far, this one included."""
        ...

    def retract(self, topic: str, partition: int, offset: int) -> None:
        """Take back the attempt just begun: it ended in a passing failure."""
        ...

    def clear(self, topic: str, partition: int, below: int) -> None:
        """Forget the partition's messages before offset `below`: they are done."""
        ...


class MemoryAttempts:
    """An `AttemptLog` in memory: counts handler exceptions, forgets everything when the process ends."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int, int], int] = {}

    def begin(self, topic: str, partition: int, offset: int) -> int:
        """Count one more attempt; the attempts so far."""
        slot = (topic, partition, offset)
        self._counts[slot] = self._counts.get(slot, 0) + 1
        return self._counts[slot]

    def retract(self, topic: str, partition: int, offset: int) -> None:
        """Take back the last attempt."""
        slot = (topic, partition, offset)
        left = self._counts.get(slot, 0) - 1
        if left > 0:
            self._counts[slot] = left
        else:
            self._counts.pop(slot, None)

    def clear(self, topic: str, partition: int, below: int) -> None:
        """Forget the partition's messages before `below`."""
        for slot in [s for s in self._counts if s[0] == topic and s[1] == partition and s[2] < below]:
            del self._counts[slot]


class ConsumerFencedError(KafkaException):
    """The broker fenced this consumer: another live member of the group joined with the same `group.instance.id`
    (two instances with one name). Fatal: the consumer cannot continue."""


def _record_lag(stats_json: str, assigned: set[tuple[str, int]]) -> None:
    # Only partitions this member owns now: statistics gathered before a revoke can be served after it (close()
    # serves queued callbacks), and would bring back the series the revoke removed.
    try:
        stats = json.loads(stats_json)
        for topic, data in stats.get("topics", {}).items():
            for partition, pdata in data.get("partitions", {}).items():
                lag = pdata.get("consumer_lag", -1)
                if partition != "-1" and (topic, int(partition)) in assigned and isinstance(lag, int) and lag >= 0:
                    CONSUMER_LAG.labels(topic, partition).set(lag)
    except (ValueError, AttributeError):
        pass  # statistics are best effort


def _forget_lag(partitions: list[TopicPartition], assigned: set[tuple[str, int]]) -> None:
    # Another member reports these now; a series left behind would show a stale lag forever.
    for p in partitions:
        assigned.discard((p.topic, p.partition))
        with contextlib.suppress(KeyError):
            CONSUMER_LAG.remove(p.topic, str(p.partition))


class AtLeastOnceConsumer:
    """A consumer-group member that hands messages to a handler and commits only what is done."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topics: Sequence[str],
        handler: Handler,
        dead_letters: DeadLetterSink,
        *,
        max_batch: int = 100,
        poll_timeout: float = 0.5,
        max_backoff: float = 10.0,
        poison_attempts: int = 3,
        attempts: AttemptLog | None = None,
    ) -> None:
        self.topics = list(topics)
        self.handler = handler
        self.dead_letters = dead_letters
        self.max_batch = max_batch
        self.poll_timeout = poll_timeout
        self.max_backoff = max_backoff
        self.poison_attempts = poison_attempts
        self._assigned: set[tuple[str, int]] = set()
        self._consumer = new_consumer({"stats_cb": lambda stats: _record_lag(stats, self._assigned), **config})
        self._group_id = str(config.get("group.id", ""))
        self._instance_id = config.get("group.instance.id")
        self._done: dict[tuple[str, int], int] = {}  # handled, not yet committed: next offset per partition
        self.attempts: AttemptLog = attempts or MemoryAttempts()
        self._backoff = 0.0
        self._subscribed = False
        self._closed = False
        self.handled = 0

    # -- group membership ---------------------------------------------------------------------------------------

    def _subscribe(self) -> None:
        if not self._subscribed:
            self._consumer.subscribe(
                self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            self._subscribed = True

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned.update((p.topic, p.partition) for p in partitions)
        log.info("partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self.commit(only=revoked)
        _forget_lag(partitions, self._assigned)
        log.info("partitions_revoked", partitions=sorted(f"{t}[{p}]" for t, p in revoked))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member owns them now; what we handled is redelivered there and recognised as duplicates.
        for p in partitions:
            self._done.pop((p.topic, p.partition), None)
        _forget_lag(partitions, self._assigned)
        log.warning("partitions_lost", partitions=[f"{p.topic}[{p.partition}]" for p in partitions])

    # -- committing ---------------------------------------------------------------------------------------------

    def commit(self, only: set[tuple[str, int]] | None = None) -> None:
        """Commit the offsets of handled messages (synchronously); a failure is logged, never raised, since the
        messages will be redelivered and recognised."""
        slots = [slot for slot in self._done if only is None or slot in only]
        if not slots:
            return
        offsets = [TopicPartition(topic, partition, self._done[(topic, partition)]) for topic, partition in slots]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("commit_failed", error=str(exc.args[0] if exc.args else exc))
        for slot in slots:
            below = self._done.pop(slot)
            try:
                self.attempts.clear(slot[0], slot[1], below)
            except Exception as exc:  # a stale count of a done message: it only matters if that message returns
                log.warning("attempts_clear_failed", topic=slot[0], partition=slot[1], error=str(exc))

    # -- the loop -----------------------------------------------------------------------------------------------

    def poll_once(self, timeout: float | None = None) -> int:
        """Poll one batch, handle it in order, commit; returns how many messages were handled."""
        self._subscribe()
        messages = self._consumer.consume(self.max_batch, self.poll_timeout if timeout is None else timeout)
        handled = 0
        for index, message in enumerate(messages):
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() == KafkaError._FATAL:
                    raise self._fatal(error)
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer_error", error=str(error))
                continue
            if not self._handle(message):
                self._rewind(messages[index:])
                break
            handled += 1
        self.commit()
        self.handled += handled
        return handled

    def _fatal(self, error: KafkaError) -> KafkaException:
        # librdkafka reports a fatal consumer error as _FATAL with the cause in the text; a fence by a member with
        # the same group.instance.id is the one an operator can cause (and must fix), so it gets its own message.
        text = str(error)
        if error.code() in (KafkaError._FENCED, KafkaError.FENCED_INSTANCE_ID) or "group.instance.id" in text:
            instance = self._instance_id or "?"
            return ConsumerFencedError(
                f"Kafka fenced this consumer: another live member of group {self._group_id!r} uses "
                f"group.instance.id {instance!r}. Instance names (--instance) must be unique among running "
                f"instances; this one stops ({text})"
            )
        return KafkaException(error)

    def _handle(self, message: Message) -> bool:
        """Handle one message; False when it must be retried (the caller rewinds)."""
        topic, partition, offset = message.topic() or "", message.partition() or 0, message.offset() or 0
        try:
            attempts = self.attempts.begin(topic, partition, offset)  # before the handler: a crash counts
        except Exception as exc:  # the log cannot be written (its store is down): a passing failure
            log.warning("message_retry_later", topic=topic, partition=partition, offset=offset, error=str(exc))
            return False
        try:
            if attempts > self.poison_attempts:
                # Earlier attempts never finished (they took the process down) or failed: not handed over again.
                verdict: Verdict = Reject(
                    f"not handled after {attempts - 1} attempts (the process stopped while handling it, or the "
                    "handler failed); not handed to the handler again"
                )
                log.error("message_gave_up", topic=topic, partition=partition, offset=offset, attempts=attempts - 1)
            else:
                try:
                    verdict = self.handler(message)
                except DeadLetterError:
                    raise
                except Exception as exc:
                    log.exception("handler_failed", topic=topic, partition=partition, offset=offset, attempt=attempts)
                    if attempts < self.poison_attempts:
                        return False
                    verdict = Reject(f"processing failed {attempts} times: {type(exc).__name__}: {exc}")
            if isinstance(verdict, Retry):
                self._retract(topic, partition, offset)
                log.warning(
                    "message_retry_later", topic=topic, partition=partition, offset=offset, error=verdict.reason
                )
                return False
            if isinstance(verdict, Reject):
                self.dead_letters.publish(message, verdict.reason, batch_id=verdict.batch_id)
                CONSUMED.labels(topic, "dead_letter").inc()
            else:
                CONSUMED.labels(topic, verdict.outcome).inc()
        except DeadLetterError as exc:
            self._retract(topic, partition, offset)
            log.warning("message_retry_later", topic=topic, partition=partition, offset=offset, error=str(exc))
            return False
        self._done[(topic, partition)] = offset + 1
        self._backoff = 0.0
        return True

    def _retract(self, topic: str, partition: int, offset: int) -> None:
        try:
            self.attempts.retract(topic, partition, offset)
        except Exception as exc:  # counted once too often: at worst dead-lettered one attempt early
            log.warning("attempts_retract_failed", topic=topic, partition=partition, offset=offset, error=str(exc))

    def _rewind(self, remaining: Sequence[Message]) -> None:
        """Seek every partition in `remaining` back to its first unhandled message, so nothing is skipped."""
        first: dict[tuple[str, int], int] = {}
        for message in remaining:
            if message.error() is None:
                key = (message.topic() or "", message.partition() or 0)
                first.setdefault(key, message.offset() or 0)
        for (topic, partition), offset in first.items():
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:  # the partition was revoked meanwhile: its new owner reads it
                log.warning("seek_failed", topic=topic, partition=partition, error=str(exc))
        self._backoff = min(self.max_backoff, max(0.2, self._backoff * 2))

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set; then commit and leave the group."""
        log.info("consumer_started", topics=self.topics)
        try:
            while not stop.is_set():
                self.poll_once()
                if self._backoff:
                    stop.wait(self._backoff)
        finally:
            self.close()

    def close(self) -> None:
        """Commit what was handled and leave the group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.commit()
        self._consumer.close()
        log.info("consumer_stopped", topics=self.topics, handled=self.handled)
