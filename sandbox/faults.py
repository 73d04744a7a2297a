"""Fault injection per operation: latency, 5xx, 429 with Retry-After, dropped connections, commit-then-fail.

A plan is an ordered list of rules (JSON format in docs/sandbox-faults.md). For each call of a named
operation the plan:

1. sleeps for every matching latency rule that fires with ``"phase": "before"`` (delays add up);
2. picks the first matching non-latency rule that fires; ``error``, ``rate_limit`` and ``drop`` answer
   without running the handler (nothing is committed);
3. runs the handler; ``commit_then_fail`` / ``commit_then_drop`` then throw away its successful response
   (the resource exists, the client does not learn it);
4. sleeps for every matching latency rule that fires with ``"phase": "after"`` (committed, answer late).

A rule fires when its operation pattern matches, its ``skip`` count is used up, it has ``times`` left (if
set) and a draw of its own seeded RNG falls under ``probability``. Each rule keeps its RNG and counters,
so rules do not disturb each other and a seed reproduces the same pattern for the same sequence of calls.
Decisions are taken without awaiting, so concurrent requests on the event loop never race on counters.

Admin operations (``admin.*``) are never faulted; ``openapi`` only by a rule naming it exactly, so
readiness probes of test harnesses are not consumed by ``"*"`` rules.
"""

from __future__ import annotations

import asyncio
import fnmatch
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

Handler = Callable[[Request], Awaitable[Response]]
Kind = Literal["latency", "error", "rate_limit", "drop", "commit_then_fail", "commit_then_drop"]

KINDS: tuple[str, ...] = ("latency", "error", "rate_limit", "drop", "commit_then_fail", "commit_then_drop")
OAUTH_OPERATIONS = frozenset({"discovery", "token", "par", "authorization-url"})
TEXT_OPERATIONS = frozenset({"message-signature", "consent-page", "consent-decision"})
WILDCARD_EXEMPT = frozenset({"openapi"})
INTERACTION = "x-fapi-interaction-id"
_RULE_KEYS = frozenset(
    {
        "operation",
        "operations",
        "fault",
        "probability",
        "times",
        "skip",
        "latency_ms",
        "jitter_ms",
        "phase",
        "status",
        "retry_after",
        "comment",
    }
)


def _number(value: object, name: str, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    """A JSON number within bounds (bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ValueError(f"{name} must be a number")
    try:
        out = float(value)
    except OverflowError:
        out = float("inf")
    if out != out or out == float("inf") or out < minimum or (maximum is not None and out > maximum):
        bound = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
        raise ValueError(f"{name} must be {bound}")
    return out


def _integer(value: object, name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """A JSON integer within bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise ValueError(f"{name} must be {bound}")
    return value


@dataclass
class FaultRule:
    """One rule of a plan, with its own RNG and counters."""

    operations: tuple[str, ...]
    fault: Kind
    probability: float = 1.0
    times: int | None = None
    skip: int = 0
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    phase: Literal["before", "after"] = "before"
    status: int = 500
    retry_after: int | None = None
    comment: str | None = None
    matched: int = 0
    fired: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def matches(self, operation: str) -> bool:
        """Whether this rule covers `operation` (exact name, `*`, or a glob such as `file-payments.*`)."""
        for pattern in self.operations:
            if pattern == operation:
                return True
            if operation not in WILDCARD_EXEMPT and fnmatch.fnmatchcase(operation, pattern):
                return True
        return False

    @property
    def remaining(self) -> int | None:
        """How many more times the rule may fire (None: unlimited)."""
        return None if self.times is None else max(self.times - self.fired, 0)

    def decide(self, operation: str) -> bool:
        """Count a matching call and say whether the rule fires on it (synchronous: no races)."""
        if not self.matches(operation):
            return False
        self.matched += 1
        if self.matched <= self.skip:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        # Draw only when the probability is below 1, so `times` rules leave the RNG stream untouched.
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return False
        self.fired += 1
        return True

    def refund(self) -> None:
        """Undo a firing that did not take effect (commit-then-* on a refused request)."""
        self.fired -= 1

    def delay_seconds(self) -> float:
        """The latency of one firing: `latency_ms` plus a uniform jitter in [0, `jitter_ms`]."""
        jitter = self.rng.uniform(0.0, self.jitter_ms) if self.jitter_ms > 0 else 0.0
        return (self.latency_ms + jitter) / 1000.0

    def to_json(self) -> dict[str, Any]:
        """The rule's JSON form (as accepted by `FaultPlan.from_json`)."""
        out: dict[str, Any] = {"operations": list(self.operations), "fault": self.fault}
        if self.probability != 1.0:
            out["probability"] = self.probability
        if self.times is not None:
            out["times"] = self.times
        if self.skip:
            out["skip"] = self.skip
        if self.fault == "latency":
            out["latency_ms"] = self.latency_ms
            if self.jitter_ms:
                out["jitter_ms"] = self.jitter_ms
            out["phase"] = self.phase
        if self.fault in ("error", "commit_then_fail", "rate_limit"):
            out["status"] = self.status
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        if self.comment is not None:
            out["comment"] = self.comment
        return out

    def stats(self) -> dict[str, Any]:
        """The rule plus its counters."""
        return {**self.to_json(), "matched": self.matched, "fired": self.fired, "remaining": self.remaining}

    @classmethod
    def from_json(cls, data: object, index: int, seed: int | str) -> FaultRule:
        """Parse and validate one rule; raise ValueError naming the offending field."""
        where = f"rules[{index}]"
        if not isinstance(data, dict):
            raise ValueError(f"{where} must be an object")
        unknown = sorted(set(data) - _RULE_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if ("operation" in data) == ("operations" in data):
            raise ValueError(f"{where}: give exactly one of operation or operations")
        raw_ops = [data["operation"]] if "operation" in data else data["operations"]
        if not isinstance(raw_ops, list) or not raw_ops or not all(isinstance(o, str) and o for o in raw_ops):
            raise ValueError(f"{where}: operation(s) must be non-empty strings")
        fault = data.get("fault")
        if fault not in KINDS:
            raise ValueError(f"{where}.fault must be one of {', '.join(KINDS)}")
        rule = cls(operations=tuple(raw_ops), fault=fault)
        rule.rng = random.Random(f"{seed}:{index}")
        if "probability" in data:
            rule.probability = _number(data["probability"], f"{where}.probability", maximum=1.0)
        if data.get("times") is not None:
            rule.times = _integer(data["times"], f"{where}.times")
        if "skip" in data:
            rule.skip = _integer(data["skip"], f"{where}.skip")
        if "comment" in data:
            if not isinstance(data["comment"], str):
                raise ValueError(f"{where}.comment must be a string")
            rule.comment = data["comment"]
        rule._parse_kind_fields(data, where)
        return rule

    def _parse_kind_fields(self, data: dict[str, Any], where: str) -> None:
        allowed: dict[str, frozenset[str]] = {
            "latency": frozenset({"latency_ms", "jitter_ms", "phase"}),
            "error": frozenset({"status", "retry_after"}),
            "rate_limit": frozenset({"retry_after", "status"}),
            "drop": frozenset(),
            "commit_then_fail": frozenset({"status"}),
            "commit_then_drop": frozenset(),
        }
        specific = {"latency_ms", "jitter_ms", "phase", "status", "retry_after"}
        misplaced = sorted((set(data) & specific) - allowed[self.fault])
        if misplaced:
            raise ValueError(f"{where}: {', '.join(misplaced)} not allowed for fault {self.fault}")
        if self.fault == "latency":
            if "latency_ms" not in data:
                raise ValueError(f"{where}.latency_ms is required for latency")
            self.latency_ms = _number(data["latency_ms"], f"{where}.latency_ms", maximum=600_000)
            if "jitter_ms" in data:
                self.jitter_ms = _number(data["jitter_ms"], f"{where}.jitter_ms", maximum=600_000)
            phase = data.get("phase", "before")
            if phase not in ("before", "after"):
                raise ValueError(f"{where}.phase must be before or after")
            self.phase = phase
        elif self.fault == "rate_limit":
            self.status = 429
            if "status" in data and data["status"] != 429:
                raise ValueError(f"{where}.status must be 429 for rate_limit")
            self.retry_after = _integer(data.get("retry_after", 1), f"{where}.retry_after", maximum=86_400)
        elif self.fault in ("error", "commit_then_fail"):
            self.status = _integer(data.get("status", 500), f"{where}.status", minimum=500, maximum=599)
            if data.get("retry_after") is not None:
                self.retry_after = _integer(data["retry_after"], f"{where}.retry_after", maximum=86_400)


class DroppedResponse(Response):
    """Sends the status line and headers, then ends the ASGI call without the body.

    uvicorn then closes the connection ("returned without completing response"), so the client sees
    the connection closed before a complete response (httpx: `RemoteProtocolError`). An in-process
    ASGI transport has no connection to close (httpx's `ASGITransport` fails on the unfinished response).
    """

    def __init__(
        self, status_code: int = 500, headers: list[tuple[bytes, bytes]] | None = None, declared_length: int = 64
    ) -> None:
        super().__init__(b"", status_code=status_code)
        base = [(k, v) for k, v in (headers or []) if k.lower() != b"content-length"]
        # A declared length that never arrives: the client must notice the body is incomplete.
        self.raw_headers = [*base, (b"content-length", str(max(declared_length, 1)).encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Start the response and stop there."""
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})


def _error_response(operation: str, request: Request, status: int, retry_after: int | None) -> Response:
    """An injected error in the shape the operation's clients expect."""
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if status == 429:
        reason = "too_many_requests"
        text = f"rate limit exceeded; retry after {retry_after} s (injected by the sandbox fault plan)"
    elif status == 503:
        reason = "service_unavailable"
        text = "the service is temporarily unavailable (injected by the sandbox fault plan)"
    else:
        reason = "server_error"
        text = "the server failed to process the request (injected by the sandbox fault plan)"
    if operation in OAUTH_OPERATIONS:
        error = "server_error" if status == 500 else "temporarily_unavailable"
        return JSONResponse({"error": error, "error_description": f"{reason}: {text}"}, status, headers)
    if operation in TEXT_OPERATIONS:
        return PlainTextResponse(f"{reason}: {text}", status, headers)
    value = request.headers.get(INTERACTION)
    if value is not None:
        headers[INTERACTION] = value
    message = f"{reason}: {text}"
    body = {
        "Code": "UK.OBIE.UnexpectedError",
        "Message": message,
        "Errors": [{"ErrorCode": "UK.OBIE.UnexpectedError", "Message": message}],
    }
    return JSONResponse(body, status, headers)


def _with_background(response: Response, background: BackgroundTask | None) -> Response:
    """Keep the handler's background work (part of what it committed) on the replacement response."""
    if background is not None and response.background is None:
        response.background = background
    return response


class FaultPlan:
    """The faults configured for a run: an ordered list of rules and the seed of their RNGs."""

    def __init__(self, rules: list[FaultRule] | None = None, seed: int | str = 0) -> None:
        self.rules: list[FaultRule] = list(rules or [])
        self.seed = seed

    async def run(self, operation: str, request: Request, handler: Handler) -> Response:
        """Run the handler for `operation`, applying any fault configured for it."""
        if operation.startswith("admin.") or not self.rules:
            return await handler(request)
        before = 0.0
        after = 0.0
        outcome: FaultRule | None = None
        for rule in self.rules:
            if rule.fault == "latency":
                if rule.decide(operation):
                    delay = rule.delay_seconds()
                    if rule.phase == "before":
                        before += delay
                    else:
                        after += delay
            elif outcome is None and rule.decide(operation):
                outcome = rule
        if before > 0:
            await asyncio.sleep(before)
        if outcome is not None and outcome.fault in ("error", "rate_limit"):
            return _error_response(operation, request, outcome.status, outcome.retry_after)
        if outcome is not None and outcome.fault == "drop":
            return DroppedResponse()
        response = await handler(request)
        if outcome is not None:
            response = self._after_commit(operation, request, outcome, response)
        if after > 0:
            await asyncio.sleep(after)
        return response

    @staticmethod
    def _after_commit(operation: str, request: Request, rule: FaultRule, response: Response) -> Response:
        """Hide a committed result from the client; a refused request keeps its own answer."""
        if response.status_code >= 400:
            rule.refund()
            return response
        if rule.fault == "commit_then_fail":
            failed = _error_response(operation, request, rule.status, rule.retry_after)
            return _with_background(failed, response.background)
        body = getattr(response, "body", b"")
        dropped = DroppedResponse(response.status_code, list(response.raw_headers), len(body) + 1)
        return _with_background(dropped, response.background)

    def to_json(self) -> dict[str, Any]:
        """The plan in its JSON form."""
        return {"seed": self.seed, "rules": [rule.to_json() for rule in self.rules]}

    def stats(self) -> dict[str, Any]:
        """The plan with each rule's counters (`matched`, `fired`, `remaining`)."""
        return {"seed": self.seed, "rules": [rule.stats() for rule in self.rules]}

    @classmethod
    def from_json(cls, data: object) -> FaultPlan:
        """Build a plan from its JSON form: `{"seed": ..., "rules": [...]}` or a bare list of rules.

        Raises ValueError with a message naming the offending field.
        """
        seed: int | str = 0
        if isinstance(data, list):
            raw_rules: object = data
        elif isinstance(data, dict):
            unknown = sorted(set(data) - {"seed", "rules", "comment"})
            if unknown:
                raise ValueError(f"fault plan: unknown field(s) {', '.join(unknown)}")
            raw_seed = data.get("seed", 0)
            if isinstance(raw_seed, bool) or not isinstance(raw_seed, int | str):
                raise ValueError("fault plan: seed must be an integer or a string")
            seed = raw_seed
            raw_rules = data.get("rules", [])
        else:
            raise ValueError('fault plan must be a JSON object {"seed": ..., "rules": [...]} or a list of rules')
        if not isinstance(raw_rules, list):
            raise ValueError("fault plan: rules must be a list")
        try:
            rules = [FaultRule.from_json(raw, i, seed) for i, raw in enumerate(raw_rules)]
        except ValueError as exc:
            raise ValueError(f"fault plan: {exc}") from None
        return cls(rules, seed)
