"""The durable flow engine: intake, the file-payment flow (flow A), and the worker that runs due flows.

Modules (imported directly; this package module imports nothing so `processor.engine.authorization` can use the
engine's building blocks without a cycle): `context`, `banks`, `settings`, `intake`, `file_flow`, `worker`.
See docs/engine.md.
"""
