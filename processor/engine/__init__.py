"""The durable flow engine: every flow (file payments, VRP mandates, VRP payments) on one core.

Modules (imported directly; this package module imports nothing so the modules can use each other without a
cycle): the core `leased` (the leased-flow base), `side_effect` (the guarded side effect), `tokens`, `worker`;
the flows `file_flow`, `mandate_flow`, `vrp_payment_flow` (step handlers and authorization hooks) with their
helpers (`file_events`, `file_payloads`, `vrp_moves`), the intakes `intake` and `vrp_submit`, `vrp` (flow B as
one object), `authorization`, `assembly`, `context`, `banks`, `settings`. See docs/engine.md and docs/vrp.md.
"""
