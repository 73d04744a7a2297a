"""A child process for the poison-restart test: the processor's consumer loop as `dispersion processor` builds it
(same configuration file, group, static instance name, store-kept attempt log, dead-letter publisher, batch
intake), except that handing it the batch named on the command line kills the process at once (`os._exit`), as
running out of memory would. Nothing is cleaned up, committed or released.

    python poison_child.py CONFIG INSTANCE BATCH_ID      # exits with CRASHED when it meets BATCH_ID
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime

from confluent_kafka import Message

from consumers.attempts import StoreAttempts
from consumers.batches import BatchHandler, EngineIntake
from consumers.loop import AtLeastOnceConsumer, Verdict
from processor.cli.config import load_config
from processor.kafka.clients import consumer_config, producer_config
from processor.kafka.settings import settings_from
from processor.store import Store, load_cipher
from producers.dlq import DeadLetterPublisher
from schemas.topics import BATCHES_TOPIC, DLQ_TOPIC

CRASHED = 70


def main(config_path: str, instance: str, fatal_key: str) -> None:
    config = load_config(config_path)
    kafka = settings_from(config.kafka)
    store = Store.open(config.processor.store, cipher=load_cipher(), pool_size=2)
    intake = BatchHandler(EngineIntake(store, integrations=config.integrations), wire=kafka.wire)

    def handle(message: Message) -> Verdict:
        if message.key() == fatal_key.encode():
            os._exit(CRASHED)  # the whole process goes, mid-handling
        return intake(message)

    dead_letters = DeadLetterPublisher(
        producer_config(kafka, f"dlq-{instance}"), topic=kafka.topic(DLQ_TOPIC), wire=kafka.wire
    )
    consumer = AtLeastOnceConsumer(
        consumer_config(kafka, "processor", instance=instance, **{"client.id": f"dispersion-processor-{instance}"}),
        [kafka.topic(BATCHES_TOPIC)],
        handle,
        dead_letters,
        attempts=StoreAttempts(store, lambda: datetime.now(UTC)),
    )
    consumer.run(threading.Event())


if __name__ == "__main__":
    main(*sys.argv[1:4])
