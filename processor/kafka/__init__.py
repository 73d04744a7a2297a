"""The Kafka package: everything the processor needs to talk to Kafka, used by the layers above the engine
(`consumers/`, `producers/`, `processor.api`, `processor.cli`, `processor.devtools`, `benchmarks/`) and by none
below them (an import contract in pyproject.toml).

- `settings`: the deployment's `[kafka]` table (broker, group, topic names, wire format, extra client properties);
- `clients`: the one factory of producers, consumers and admin clients, and their configurations;
- `wire`: the deployment's wire format (`WireCodec`) and confluent-kafka's schema registry client, beside the pure
  single-object codec of `schemas/`;
- `topics`: creating the topics and registering their schemas (`dispersion topics`);
- `records`: a parsed payroll batch as the `payroll.batches` record (what `dispersion submit` produces).

What the processor writes (the outbox relay, dead letters, their replay) is in `producers/`; what it reads (the
consumer loop and its handlers) in `consumers/`. See docs/architecture.md.
"""
