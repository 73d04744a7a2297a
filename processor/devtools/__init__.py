"""Development tools: the local demo, a local Kafka broker and schema registry, the scripted approver."""
