"""What the processor reads from Kafka: the at-least-once consumer loop (`loop`) and its handlers (`batches`,
`vrp`), with the attempt log kept in the store (`attempts`). Kafka clients, settings and the wire format are the
Kafka package's, `processor.kafka`."""
