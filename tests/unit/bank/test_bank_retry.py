"""The retry policy's decisions, and the loop that applies them (with a recorded, instant sleep)."""

from __future__ import annotations

import pytest

from processor.bank import errors
from processor.bank.retry import RESEND_MIN_DELAY, RetryPolicy, run_with_retries

POLICY = RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=4.0, max_elapsed=30.0, max_retry_after=10.0)


def http_error(status: int, body: bytes = b"", retry_after: str | None = None) -> errors.BankHTTPError:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return errors.error_from_response(status, headers, body, operation="op")


@pytest.mark.parametrize(
    "error",
    [
        errors.ConnectError("refused"),
        errors.Timeout("read timeout"),
        errors.ConnectionDropped("reset"),
        http_error(500),
        http_error(503),
        http_error(429),
    ],
    ids=["connect", "timeout", "dropped", "500", "503", "429"],
)
def test_transient_errors_are_retried_with_backoff(error: errors.BankError) -> None:
    decision = POLICY.decide(error, attempt=1, elapsed=0.0, rand=0.5)
    assert decision.retry
    assert decision.delay == pytest.approx(0.25)  # half of base_delay * 2**0


@pytest.mark.parametrize(
    "error",
    [
        http_error(400, b'{"Code":"UK.OBIE.Resource.InvalidFormat","Message":"invalid_message_format: x","Errors":[]}'),
        http_error(400, b'{"error":"invalid_client","error_description":"bad"}'),
        http_error(401, b'{"Code":"UK.OBIE.Header.Invalid","Message":"no_access_token","Errors":[]}'),
        http_error(403, b'{"Code":"UK.OBIE.Header.Invalid","Message":"token_expired","Errors":[]}'),
        http_error(404),
        errors.ProtocolError("garbage"),
        errors.IssuerMismatch("other issuer"),
    ],
    ids=["invalid-format", "invalid-client", "no-access-token", "token-expired", "404", "protocol", "issuer"],
)
def test_semantic_errors_are_never_retried(error: errors.BankError) -> None:
    decision = POLICY.decide(error, attempt=1, elapsed=0.0, rand=0.5)
    assert not decision.retry
    assert "not retryable" in decision.reason


def test_backoff_grows_exponentially_with_full_jitter_and_a_cap() -> None:
    assert [POLICY.backoff(n, 0.999999) for n in (1, 2, 3, 4, 5)] == pytest.approx([0.5, 1.0, 2.0, 4.0, 4.0], rel=1e-5)
    assert POLICY.backoff(3, 0.0) == 0.0
    assert POLICY.backoff(3, 0.25) == pytest.approx(0.5)


def test_retry_after_is_honoured_instead_of_backoff() -> None:
    decision = POLICY.decide(http_error(429, retry_after="3"), attempt=1, elapsed=0.0, rand=0.0)
    assert decision.retry and decision.delay == 3.0
    decision = POLICY.decide(http_error(503, retry_after="7"), attempt=2, elapsed=1.0, rand=0.9)
    assert decision.retry and decision.delay == 7.0


def test_retry_after_longer_than_allowed_gives_up() -> None:
    decision = POLICY.decide(http_error(429, retry_after="11"), attempt=1, elapsed=0.0, rand=0.5)
    assert not decision.retry
    assert "exceeds" in decision.reason


def test_attempts_and_total_time_are_bounded() -> None:
    assert not POLICY.decide(errors.Timeout("t"), attempt=5, elapsed=0.0, rand=0.5).retry
    assert POLICY.decide(errors.Timeout("t"), attempt=4, elapsed=0.0, rand=0.5).retry
    late = POLICY.decide(http_error(429, retry_after="5"), attempt=1, elapsed=26.0, rand=0.5)
    assert not late.retry and "30" in late.reason


class Recorder:
    def __init__(self) -> None:
        self.slept: list[float] = []
        self.now = 0.0

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


async def test_loop_retries_until_success_and_reports_retries() -> None:
    rec = Recorder()
    failures = [http_error(503), errors.ConnectionDropped("reset"), http_error(429, retry_after="2")]
    seen: list[tuple[str, int]] = []

    async def call(attempt: int) -> str:
        if failures:
            raise failures.pop(0)
        return f"ok after {attempt}"

    result = await run_with_retries(
        call,
        POLICY,
        sleep=rec.sleep,
        monotonic=rec.monotonic,
        rand=lambda: 0.5,
        on_retry=lambda e, n, d: seen.append((type(e).__name__, n)),
    )
    assert result == "ok after 4"
    assert rec.slept == [0.25, 0.5, 2.0]
    assert seen == [("ServerError", 1), ("ConnectionDropped", 2), ("RateLimited", 3)]


async def test_loop_raises_the_last_error_with_attempt_count() -> None:
    rec = Recorder()
    calls = 0

    async def call(attempt: int) -> None:
        nonlocal calls
        calls += 1
        raise http_error(500)

    with pytest.raises(errors.ServerError) as caught:
        await run_with_retries(call, POLICY, sleep=rec.sleep, monotonic=rec.monotonic, rand=lambda: 1.0)
    assert calls == 5
    assert caught.value.attempts == 5
    assert len(rec.slept) == 4


async def test_loop_does_not_retry_a_semantic_error() -> None:
    rec = Recorder()
    calls = 0

    async def call(attempt: int) -> None:
        nonlocal calls
        calls += 1
        raise http_error(400, b'{"Code":"UK.OBIE.Field.Invalid","Message":"incorrect_records: x","Errors":[]}')

    with pytest.raises(errors.FieldInvalid):
        await run_with_retries(call, POLICY, sleep=rec.sleep, monotonic=rec.monotonic)
    assert calls == 1 and rec.slept == []


def test_a_resend_waits_at_least_the_minimum_delay() -> None:
    policy = RetryPolicy(base_delay=0.25, max_delay=8.0)
    error = http_error(503)
    quick = policy.decide(error, 1, 0.0, rand=0.34)
    assert quick.retry and quick.delay == pytest.approx(0.085)  # what a creating call waited before
    resend = policy.decide(error, 1, 0.0, rand=0.34, min_delay=RESEND_MIN_DELAY)
    assert resend.retry and resend.delay == RESEND_MIN_DELAY == 1.0
    later = policy.decide(error, 4, 0.0, rand=0.9, min_delay=RESEND_MIN_DELAY)
    assert later.delay == pytest.approx(1.8)  # a longer backoff is kept as it is
