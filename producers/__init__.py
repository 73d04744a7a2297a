"""What the processor writes to Kafka: the outbox relay (`relay`, with `handover` for a relay that stopped and
`avro_json` to fit the outbox's JSON into the Avro schemas), dead letters (`dlq`) and their replay (`replay`).
Kafka clients, settings, the wire format and topic creation are the Kafka package's, `processor.kafka`."""
