"""The record in a consumed message, decoded the same way by every consumer of the house (batches, VRP mandates
and payments): a message that cannot be read is a verdict for the consumer loop instead."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

import schemas
from consumers.loop import Reject, Retry
from processor.kafka.wire import RegistryUnavailableError, WireCodec


def decoded(codec: WireCodec, message: Message) -> dict[str, Any] | Reject | Retry:
    """The message's record, or what to do with a message that has none to give: a tombstone or undecodable
    bytes are rejected (dead-lettered), an unreachable schema registry means try again."""
    value = message.value()
    if value is None:
        return Reject("tombstone: the message has no value")
    try:
        return codec.decode(value, message.topic())
    except schemas.DecodeError as exc:
        return Reject(f"undecodable: {exc}")
    except RegistryUnavailableError as exc:
        return Retry(f"schema registry unavailable: {exc}")
