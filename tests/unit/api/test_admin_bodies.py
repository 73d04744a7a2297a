"""The admin API's bodies parsed with pydantic keep the API's own messages: the field's path, unknown fields
first, the person acting checked against the token before the rest."""

from __future__ import annotations

from typing import Any

import pytest

from processor.api.admin_bodies import Body, EmptyBody, ReplayBody, RetryBody, WithdrawBody, parse_body
from processor.api.admin_input import BadRequestError, ForbiddenError
from processor.domain.roles import Actor, Role
from processor.engine.retries import Correction

ANA = Actor("ana", Role.ADMIN)


def test_a_retry_body_gives_its_corrections_by_index() -> None:
    body = parse_body(
        {
            "corrections": [{"index": 2, "account_number": "200100303", "account_type": "savings"}],
            "requested_by": "ana",
        },
        RetryBody,
        ANA,
    )
    assert body.fixes() == {2: Correction("200100303", "savings")}
    assert parse_body({}, RetryBody, ANA).fixes() == {}
    assert parse_body({"corrections": None}, RetryBody, ANA).fixes() == {}
    replay = parse_body({"reason": "fixed the schema", "force": True}, ReplayBody, ANA)
    assert (replay.reason, replay.force, replay.replayed_by) == ("fixed the schema", True, None)


@pytest.mark.parametrize(
    ("document", "model", "message"),
    [
        ({"x": 1, "a": 2}, RetryBody, "unknown field(s) a, x"),
        ({"x": 1, "corrections": 5}, RetryBody, "unknown field(s) x"),
        ({"corrections": [{"index": 1, "zz": 2, "account_number": "1"}]}, RetryBody, "corrections[0]: unknown field"),
        ({"corrections": "all"}, RetryBody, "corrections must be a list of {index, account_number[, account_type]}"),
        ({"corrections": [5]}, RetryBody, "corrections[0] must be an object"),
        (
            {"corrections": [{"index": True, "account_number": "1"}]},
            RetryBody,
            "corrections[0].index must be a transfer",
        ),
        ({"corrections": [{"index": -1, "account_number": "1"}]}, RetryBody, "corrections[0].index must be a transfer"),
        (
            {"corrections": [{"index": "2", "account_number": "1"}]},
            RetryBody,
            "corrections[0].index must be a transfer",
        ),
        ({"corrections": [{"index": 2}]}, RetryBody, "corrections[0].account_number must be a non-empty string"),
        (
            {"corrections": [{"index": 2, "account_number": "1"}, {"index": 2, "account_number": "3"}]},
            RetryBody,
            "corrections[1]: transfer 2 is corrected twice",
        ),
        (
            {"corrections": [{"index": 2, "account_number": "1\u202e2"}]},
            RetryBody,
            "corrections[0].account_number holds a control or bidi character (U+202E at position 2)",
        ),
        ({"requested_by": 5}, RetryBody, "requested_by must be a non-empty string"),
        ({"requested_by": "ana\ud800"}, RetryBody, "requested_by holds a lone surrogate"),
        ({}, ReplayBody, "reason must be a non-empty string"),
        ({"reason": " "}, WithdrawBody, "reason must be a non-empty string"),
        ({"reason": "x" * 501}, ReplayBody, "reason is longer than 500 characters"),
        ({"reason": "r", "force": "yes"}, ReplayBody, "force must be true or false"),
        ({"reason": "r"}, EmptyBody, "unknown field(s) reason"),
    ],
)
def test_a_bad_body_is_refused_naming_the_field(document: dict[str, Any], model: type[Body], message: str) -> None:
    with pytest.raises(BadRequestError) as refused:
        parse_body(document, model, ANA)
    assert message in str(refused.value)


def test_a_body_naming_someone_else_is_forbidden_before_its_other_faults() -> None:
    with pytest.raises(ForbiddenError, match=r"requested_by must be the token's own name \(ana\)"):
        parse_body({"requested_by": "eve", "corrections": "all"}, RetryBody, ANA)
    with pytest.raises(ForbiddenError, match="replayed_by"):
        parse_body({"replayed_by": "eve", "reason": "r"}, ReplayBody, ANA)
