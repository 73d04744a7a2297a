"""The fault plan's JSON format and its decisions, without a server (the handler is a plain coroutine)."""

from __future__ import annotations

import json

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox.faults import DroppedResponse, FaultPlan, FaultRule


def make_request(path: str = "/x", headers: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": path, "headers": raw, "query_string": b""})


class Counter:
    """A handler that counts its calls and answers with a chosen status."""

    def __init__(self, status: int = 201) -> None:
        self.calls = 0
        self.status = status

    async def __call__(self, request: Request) -> Response:
        self.calls += 1
        return JSONResponse({"n": self.calls}, self.status)


async def outcomes(plan: FaultPlan, operation: str, n: int, handler: Counter | None = None) -> list[int]:
    handler = handler or Counter()
    return [(await plan.run(operation, make_request(), handler)).status_code for _ in range(n)]


def test_empty_plan_passes_through() -> None:
    assert FaultPlan().rules == []
    assert FaultPlan.from_json({}).rules == []
    assert FaultPlan.from_json([]).rules == []


async def test_times_applies_to_the_next_n_matching_calls_only() -> None:
    plan = FaultPlan.from_json({"rules": [{"operation": "token", "fault": "error", "status": 503, "times": 2}]})
    handler = Counter(200)
    assert await outcomes(plan, "par", 1, handler) == [200]  # another operation: untouched, not counted
    assert await outcomes(plan, "token", 4, handler) == [503, 503, 200, 200]
    assert handler.calls == 3  # errors answer before the handler runs: nothing committed
    stats = plan.stats()["rules"][0]
    assert (stats["matched"], stats["fired"], stats["remaining"]) == (4, 2, 0)


async def test_skip_lets_the_first_calls_through() -> None:
    plan = FaultPlan.from_json([{"operation": "token", "fault": "error", "skip": 2, "times": 1}])
    assert await outcomes(plan, "token", 4) == [201, 201, 500, 201]


async def test_seeded_rate_is_reproducible_and_close_to_the_rate() -> None:
    spec = {"seed": 42, "rules": [{"operation": "*", "fault": "error", "probability": 0.3}]}
    first = await outcomes(FaultPlan.from_json(spec), "file-payments.create", 400)
    second = await outcomes(FaultPlan.from_json(spec), "file-payments.create", 400)
    other_seed = await outcomes(FaultPlan.from_json({**spec, "seed": 43}), "file-payments.create", 400)
    assert first == second
    assert first != other_seed
    assert 80 <= first.count(500) <= 160  # 30 % of 400 = 120, wide bounds: the seed fixes it anyway


async def test_rules_keep_separate_rngs() -> None:
    """Adding a rule for another operation does not change the pattern of an existing one."""
    rate = {"operation": "token", "fault": "error", "probability": 0.5}
    alone = FaultPlan.from_json({"seed": 7, "rules": [rate]})
    with_other = FaultPlan.from_json(
        {"seed": 7, "rules": [rate, {"operation": "par", "fault": "error", "probability": 0.5}]}
    )
    pattern_alone = await outcomes(alone, "token", 50)
    pattern_mixed = []
    for _ in range(50):
        pattern_mixed += await outcomes(with_other, "token", 1)
        await outcomes(with_other, "par", 1)
    assert pattern_alone == pattern_mixed


async def test_rate_limit_sets_retry_after_and_resource_shape() -> None:
    plan = FaultPlan.from_json([{"operation": "file-payments.*", "fault": "rate_limit", "retry_after": 7}])
    request = make_request(headers={"x-fapi-interaction-id": "4d1f4f3a-3b4e-4b52-9d7e-0b7e3c2f2f10"})
    response = await plan.run("file-payments.get", request, Counter(200))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-fapi-interaction-id"] == "4d1f4f3a-3b4e-4b52-9d7e-0b7e3c2f2f10"
    body = json.loads(bytes(response.body))
    assert body["Code"] == "UK.OBIE.UnexpectedError"
    assert body["Message"].startswith("too_many_requests")
    assert body["Errors"][0]["ErrorCode"] == "UK.OBIE.UnexpectedError"


@pytest.mark.parametrize(
    ("operation", "status", "expected_error"),
    [("token", 500, "server_error"), ("par", 503, "temporarily_unavailable"), ("discovery", 500, "server_error")],
)
async def test_oauth_operations_get_the_oauth_shape(operation: str, status: int, expected_error: str) -> None:
    plan = FaultPlan.from_json([{"operation": operation, "fault": "error", "status": status}])
    response = await plan.run(operation, make_request(), Counter(200))
    assert response.status_code == status
    assert json.loads(bytes(response.body))["error"] == expected_error
    assert set(json.loads(bytes(response.body))) == {"error", "error_description"}


async def test_message_signature_gets_plain_text() -> None:
    plan = FaultPlan.from_json([{"operation": "message-signature", "fault": "error"}])
    response = await plan.run("message-signature", make_request(), Counter(200))
    assert response.status_code == 500
    assert response.media_type == "text/plain"


async def test_admin_operations_are_never_faulted() -> None:
    plan = FaultPlan.from_json([{"operation": "*", "fault": "error"}, {"operation": "admin.*", "fault": "drop"}])
    assert await outcomes(plan, "admin.counts", 3) == [201, 201, 201]
    assert all(rule.matched == 0 for rule in plan.rules)


async def test_wildcards_do_not_cover_the_openapi_document_but_its_name_does() -> None:
    wildcard = FaultPlan.from_json([{"operation": "*", "fault": "error"}])
    assert await outcomes(wildcard, "openapi", 1) == [201]
    exact = FaultPlan.from_json([{"operation": "openapi", "fault": "error"}])
    assert await outcomes(exact, "openapi", 1) == [500]


async def test_glob_and_operation_lists() -> None:
    plan = FaultPlan.from_json([{"operations": ["token", "domestic-vrp*.create"], "fault": "error", "status": 502}])
    assert await outcomes(plan, "token", 1) == [502]
    assert await outcomes(plan, "domestic-vrps.create", 1) == [502]
    assert await outcomes(plan, "domestic-vrp-consents.create", 1) == [502]
    assert await outcomes(plan, "domestic-vrps.get", 1) == [201]


async def test_first_firing_outcome_wins_and_later_rules_keep_their_times() -> None:
    plan = FaultPlan.from_json(
        [
            {"operation": "token", "fault": "error", "status": 503, "times": 1},
            {"operation": "token", "fault": "rate_limit", "times": 1},
        ]
    )
    assert await outcomes(plan, "token", 3) == [503, 429, 201]


async def test_commit_then_fail_runs_the_handler_and_answers_500() -> None:
    plan = FaultPlan.from_json([{"operation": "file-payments.create", "fault": "commit_then_fail", "times": 1}])
    handler = Counter(201)
    assert await outcomes(plan, "file-payments.create", 2, handler) == [500, 201]
    assert handler.calls == 2  # the first call did commit


async def test_commit_then_fail_leaves_refused_requests_alone_and_keeps_its_times() -> None:
    plan = FaultPlan.from_json([{"operation": "file-payments.create", "fault": "commit_then_fail", "times": 1}])
    assert await outcomes(plan, "file-payments.create", 1, Counter(400)) == [400]
    assert plan.rules[0].remaining == 1
    assert await outcomes(plan, "file-payments.create", 2, Counter(201)) == [500, 201]


async def test_drops_return_a_response_that_never_completes() -> None:
    plan = FaultPlan.from_json([{"operation": "x", "fault": "drop"}, {"operation": "y", "fault": "commit_then_drop"}])
    handler = Counter(201)
    dropped = await plan.run("x", make_request(), handler)
    assert isinstance(dropped, DroppedResponse) and handler.calls == 0
    committed = await plan.run("y", make_request(), handler)
    assert isinstance(committed, DroppedResponse) and handler.calls == 1
    assert committed.status_code == 201
    declared = dict(committed.raw_headers)[b"content-length"]
    assert int(declared) > len(b'{"n":1}')  # more than will ever be sent


async def test_latency_jitter_is_seeded() -> None:
    spec = {"seed": "s", "rules": [{"operation": "*", "fault": "latency", "latency_ms": 0, "jitter_ms": 100}]}
    a, b = FaultPlan.from_json(spec).rules[0], FaultPlan.from_json(spec).rules[0]
    delays_a = [a.delay_seconds() for _ in range(5)]
    assert delays_a == [b.delay_seconds() for _ in range(5)]
    assert all(0.0 <= d <= 0.1 for d in delays_a)
    assert len(set(delays_a)) > 1


def test_round_trip_through_json() -> None:
    spec = {
        "seed": 3,
        "rules": [
            {"operation": "token", "fault": "latency", "latency_ms": 50, "jitter_ms": 10, "phase": "after"},
            {"operations": ["par"], "fault": "error", "status": 503, "retry_after": 2, "probability": 0.25},
            {"operation": "*", "fault": "rate_limit", "retry_after": 5, "times": 3, "comment": "burst"},
            {"operation": "file-payments.create", "fault": "commit_then_drop", "skip": 1},
        ],
    }
    plan = FaultPlan.from_json(spec)
    again = FaultPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again.to_json() == plan.to_json()
    assert [r.fault for r in again.rules] == ["latency", "error", "rate_limit", "commit_then_drop"]
    assert again.rules[0].phase == "after" and again.rules[1].retry_after == 2 and again.rules[2].times == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("nope", "must be a JSON object"),
        ({"rules": {}}, "rules must be a list"),
        ({"rulez": []}, "unknown field(s) rulez"),
        ({"seed": 1.5, "rules": []}, "seed must be"),
        ([{"fault": "error"}], "exactly one of operation or operations"),
        ([{"operation": "x", "operations": ["y"], "fault": "error"}], "exactly one of"),
        ([{"operation": "", "fault": "error"}], "non-empty strings"),
        ([{"operation": "x", "fault": "explode"}], "fault must be one of"),
        ([{"operation": "x", "fault": "error", "probability": 1.5}], "probability must be between 0 and 1"),
        ([{"operation": "x", "fault": "error", "probability": True}], "probability must be a number"),
        ([{"operation": "x", "fault": "error", "times": -1}], "times must be at least 0"),
        ([{"operation": "x", "fault": "error", "times": 1.5}], "times must be an integer"),
        ([{"operation": "x", "fault": "error", "status": 404}], "status must be between 500 and 599"),
        ([{"operation": "x", "fault": "rate_limit", "status": 503}], "must be 429"),
        ([{"operation": "x", "fault": "rate_limit", "retry_after": -3}], "retry_after must be between 0 and 86400"),
        ([{"operation": "x", "fault": "latency"}], "latency_ms is required"),
        ([{"operation": "x", "fault": "latency", "latency_ms": 10**400}], "latency_ms must be between 0 and 600000"),
        ([{"operation": "x", "fault": "latency", "latency_ms": 5, "phase": "during"}], "phase must be"),
        ([{"operation": "x", "fault": "drop", "latency_ms": 5}], "latency_ms not allowed for fault drop"),
        ([{"operation": "x", "fault": "drop", "colour": "red"}], "unknown field(s) colour"),
        ([1], "rules[0] must be an object"),
    ],
)
def test_invalid_plans_are_refused_with_a_clear_message(data: object, message: str) -> None:
    with pytest.raises(ValueError, match="fault plan") as info:
        FaultPlan.from_json(data)
    assert message in str(info.value)


def test_rule_counters_start_at_zero() -> None:
    rule = FaultRule.from_json({"operation": "x", "fault": "error", "times": 2}, 0, 0)
    assert (rule.matched, rule.fired, rule.remaining) == (0, 0, 2)
