"""When to retry a failed bank call, and after how long.

The policy is pure: `RetryPolicy.decide` looks at the error, the attempt number and the time spent, and returns
a decision. `run_with_retries` applies it to an async call with an injected sleep, so tests need not wait.

Rules:
- retry only errors marked `retry_safe` (connection errors, timeouts, dropped connections, 5xx, 429); never a
  semantic 4xx, a protocol error or an issuer mismatch;
- delay: a server's Retry-After when given (capped by `max_retry_after`: a longer wait is not taken, the error
  surfaces so the caller can reschedule), else exponential backoff with full jitter, between 0 and
  min(max_delay, base_delay * 2**(attempt-1));
- a creating call (one with an x-idempotency-key) is resent no sooner than `RESEND_MIN_DELAY` (1 s) after its
  last attempt: Open Banking asks at least a second before a resend under the same key (full jitter alone gave
  85 ms);
- bounded by `max_attempts` in total and by `max_elapsed` seconds (a delay that would cross it is not taken).

Creating calls are retried with the same body bytes and the same x-idempotency-key, which is what makes a retry
after an ambiguous outcome safe: the bank answers with the resource it already created.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from processor.bank.errors import BankError, BankHTTPError
from processor.bank.integration import RetrySettings

T = TypeVar("T")

RESEND_MIN_DELAY = 1.0
"""Seconds before a creating call is sent again with the same idempotency key."""


@dataclass(frozen=True)
class RetryDecision:
    """Whether to retry, after how many seconds, and why (for logs)."""

    retry: bool
    delay: float
    reason: str


class RetryPolicy(RetrySettings):
    """The retry loop within an integration's bounds (`[integrations.NAME.retry]`, declared once in
    processor.bank.integration). `max_attempts` counts the first call."""

    def backoff(self, attempt: int, rand: float) -> float:
        """Full-jitter exponential delay after failed attempt number `attempt` (1-based); `rand` in [0, 1)."""
        ceiling = min(self.max_delay, self.base_delay * (2.0 ** max(0, attempt - 1)))
        return ceiling * rand

    def decide(
        self, error: BankError, attempt: int, elapsed: float, rand: float, *, min_delay: float = 0.0
    ) -> RetryDecision:
        """The decision after `attempt` failed with `error`, `elapsed` seconds after the first attempt began;
        `min_delay`: the shortest wait allowed (`RESEND_MIN_DELAY` for a creating call)."""
        if not error.retry_safe:
            return RetryDecision(False, 0.0, f"not retryable ({type(error).__name__})")
        if attempt >= self.max_attempts:
            return RetryDecision(False, 0.0, f"gave up after {attempt} attempts")
        retry_after = error.retry_after if isinstance(error, BankHTTPError) else None
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return RetryDecision(False, 0.0, f"Retry-After {retry_after:g}s exceeds {self.max_retry_after:g}s")
            delay = retry_after
            reason = f"Retry-After {retry_after:g}s"
        else:
            delay = self.backoff(attempt, rand)
            reason = f"backoff {delay:.3f}s"
        if delay < min_delay:
            delay, reason = min_delay, f"{reason}, raised to {min_delay:g}s before a resend"
        if elapsed + delay > self.max_elapsed:
            return RetryDecision(False, 0.0, f"would exceed {self.max_elapsed:g}s in total")
        return RetryDecision(True, delay, reason)


async def run_with_retries(
    call: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
    on_retry: Callable[[BankError, int, RetryDecision], None] | None = None,
    min_delay: float = 0.0,
) -> T:
    """Await `call(attempt)` until it succeeds or the policy says stop; the last error is raised.

    The raised error's `attempts` tells how many calls were made.
    """
    start = monotonic()
    attempt = 1
    while True:
        try:
            return await call(attempt)
        except BankError as error:
            error.attempts = attempt
            decision = policy.decide(error, attempt, monotonic() - start, rand(), min_delay=min_delay)
            if not decision.retry:
                raise
            if on_retry is not None:
                on_retry(error, attempt, decision)
        await sleep(decision.delay)
        attempt += 1
