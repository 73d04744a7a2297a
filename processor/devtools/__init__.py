"""Development tools: the local demo, a local Kafka broker, the scripted approver."""
