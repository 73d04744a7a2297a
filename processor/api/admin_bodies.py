"""The admin API's request bodies, parsed with pydantic: one model per body, unknown fields refused, texts checked
like every identifier (`processor.domain.text`). `read_body` turns pydantic's errors into the API's own 400
messages (`corrections[2].index must be a transfer index ...`, `unknown field(s) x`), and refuses a body that names
someone other than the token's holder as the person acting (403)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails
from starlette.requests import Request

from processor.api.admin_input import BadRequestError, ForbiddenError, text_fault
from processor.domain.roles import Actor
from processor.engine.retries import Correction

MAX_BODY = 256 * 1024
NON_EMPTY = "must be a non-empty string"  # text_fault's word for a text of the wrong type


def _checked(limit: int, *, optional: bool = False) -> Callable[[object], object]:
    """A text of at most `limit` characters with no control, bidi or lone surrogate character (None allowed when
    `optional`); checked before pydantic's own validation, so that the message names only this field."""

    def check(value: object) -> object:
        if value is None and optional:
            return None
        fault = text_fault(value, limit)
        if fault is not None:
            raise ValueError(fault)
        return value

    return check


Reason = Annotated[str, BeforeValidator(_checked(500))]
Person = Annotated[str | None, BeforeValidator(_checked(100, optional=True))]


B = TypeVar("B", bound="Body")


class Body(BaseModel):
    """A request body: a JSON object of known fields; `claimant` names its field that says who acts, if any."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    claimant: ClassVar[str | None] = None


class CorrectionBody(Body):
    """One transfer's new account: `{"index": 2, "account_number": "...", "account_type": "..."}`."""

    index: int = Field(ge=0, lt=1_000_000)
    account_number: Annotated[str, BeforeValidator(_checked(64))]
    account_type: Annotated[str | None, BeforeValidator(_checked(40, optional=True))] = None


class RetryBody(Body):
    """POST /admin/batches/{id}/retry."""

    claimant: ClassVar[str | None] = "requested_by"
    corrections: Annotated[
        list[CorrectionBody], BeforeValidator(lambda value: [] if value is None else value), Field(max_length=10_000)
    ] = []
    requested_by: Person = None

    @model_validator(mode="after")
    def _once_each(self) -> RetryBody:
        seen: set[int] = set()
        for position, item in enumerate(self.corrections):
            if item.index in seen:
                raise ValueError(f"corrections[{position}]: transfer {item.index} is corrected twice")
            seen.add(item.index)
        return self

    def fixes(self) -> dict[int, Correction]:
        """The corrections by transfer index."""
        return {item.index: Correction(item.account_number, item.account_type) for item in self.corrections}


class ReplayBody(Body):
    """POST /admin/dead-letters/{id}/replay."""

    claimant: ClassVar[str | None] = "replayed_by"
    reason: Reason
    replayed_by: Person = None
    force: bool = False


class DecisionBody(Body):
    """POST /admin/requests/{id}/approve | decline."""

    claimant: ClassVar[str | None] = "decided_by"
    decided_by: Person = None


class WithdrawBody(Body):
    """POST /admin/batches/{id}/withdraw."""

    reason: Reason


class EmptyBody(Body):
    """A POST that takes no field (confirm-duplicate)."""


# What a field of the wrong type or out of range must be (by the field's name); a text field's default is NON_EMPTY.
_MUST = {
    "index": "must be a transfer index (a whole number from 0)",
    "force": "must be true or false",
    "corrections": "must be a list of {index, account_number[, account_type]}",
}


def _where(loc: Sequence[int | str]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else part
    return name


def _message(error: ErrorDetails) -> str:
    """One pydantic error as the API says it."""
    loc = tuple(error["loc"])
    where = _where(loc)
    if error["type"] == "value_error":
        said = str(error.get("ctx", {}).get("error", error["msg"]))
        return f"{where} {said}" if where else said
    if error["type"] in ("model_type", "dict_type"):
        return f"{where} must be an object"
    field = next((part for part in reversed(loc) if isinstance(part, str)), "")
    return f"{where} {_MUST.get(field, NON_EMPTY)}"


def _unknown(errors: list[ErrorDetails]) -> str | None:
    """`unknown field(s) ...` for the first object (outermost first) that has fields it does not know."""
    extra: dict[tuple[int | str, ...], list[str]] = {}
    for error in errors:
        if error["type"] == "extra_forbidden":
            extra.setdefault(tuple(error["loc"][:-1]), []).append(str(error["loc"][-1]))
    if not extra:
        return None
    owner = min(extra, key=len)
    names = ", ".join(sorted(extra[owner]))
    return f"{_where(owner)}: unknown field(s) {names}" if owner else f"unknown field(s) {names}"


def parse_body(document: dict[str, Any], model: type[B], actor: Actor) -> B:
    """`document` as `model`, or `BadRequestError` saying what is wrong (unknown fields first, then the field that
    says who acts, then the rest), or `ForbiddenError` when that field names someone else than `actor`."""
    body: B | None = None
    errors: list[ErrorDetails] = []
    try:
        body = model.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors()
    unknown = _unknown(errors)
    if unknown is not None:
        raise BadRequestError(unknown)
    claimant = model.claimant
    for error in errors:
        if claimant is not None and tuple(error["loc"][:1]) == (claimant,):
            raise BadRequestError(_message(error))
    claimed = document.get(claimant) if claimant is not None else None
    if claimed is not None and claimed != actor.name:
        raise ForbiddenError(
            f"{claimant} must be the token's own name ({actor.name}) or left out: the token says who acts"
        )
    if body is None:
        raise BadRequestError(_message(errors[0]))
    return body


async def read_body(request: Request, model: type[B], actor: Actor) -> B:
    """The request's JSON body (none: `{}`) as `model` (see `parse_body`)."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequestError(f"the body is larger than {MAX_BODY} bytes")
    document: object = {}
    if raw.strip():
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise BadRequestError(f"the body is not JSON: {str(exc)[:100]}") from None
    if not isinstance(document, dict):
        raise BadRequestError("the body must be a JSON object")
    return parse_body(document, model, actor)
