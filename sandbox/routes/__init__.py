"""The Starlette routes of the sandbox, thin: parse the request, call the logic (sandbox.oauth for the
authorization server; filecheck, settlement, vrp_rules, idempotency for the resource server), turn the
result into a response. sandbox.app composes them and adds fault injection and the error shapes.
"""
