"""Flow A resource routes: file payment consents (A1, A2, A5), file payments (A3, A4) and the report file.

Thin adapters: headers, tokens and storage here; the file checks live in sandbox/filecheck.py and the
status and outcome rules in sandbox/settlement.py. Checks run headers and token first, then the body.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox import filecheck, settlement
from sandbox.clock import iso_ms
from sandbox.consents import FILE_KIND, new_consent
from sandbox.errors import (
    field_invalid,
    header_invalid,
    invalid_consent_status,
    invalid_format,
    not_found,
)
from sandbox.idempotency import HEADER as IDEMPOTENCY_HEADER
from sandbox.idempotency import canonical_body, check_key, idempotent
from sandbox.oauth.tokens import AccessToken, bearer, require_token_scope
from sandbox.routes.http import (
    interaction_id,
    json_response,
    parse_json_object,
    read_body,
    require_fapi_headers,
    require_json_content_type,
)
from sandbox.state import Bank
from sandbox.store import Doc

PREFIX = "/open-banking/v3.1/pisp"
PAYMENT_KIND = "file_payment"

AWAITING_UPLOAD = "AwaitingUpload"
AWAITING_AUTHORISATION = "AwaitingAuthorisation"
AUTHORISED = "Authorised"
CONSUMED = "Consumed"


def _client_token(bank: Bank, request: Request) -> AccessToken:
    """A valid client-credentials token with scope `payments`, then the interaction id."""
    token = bearer(bank, request.headers.get("authorization"), "client_credentials")
    require_token_scope(token)
    interaction_id(request)
    return token


def _idempotency_key(request: Request) -> str | None:
    return check_key(request.headers.get(IDEMPOTENCY_HEADER))


def _canonical(body: dict[str, Any], key: str | None) -> bytes:
    """The body in a stable form (keys sorted, no whitespace), so a replay with other whitespace or key order is
    the same body; the same form as the VRP operations use."""
    if key is None:
        return b""  # not used without a key; skip the work on the hot path
    return canonical_body(body)


def _consent_url(bank: Bank, consent_id: str) -> str:
    return f"{bank.config.issuer}{PREFIX}/file-payment-consents/{consent_id}"


def _payment_url(bank: Bank, payment_id: str) -> str:
    return f"{bank.config.issuer}{PREFIX}/file-payments/{payment_id}"


def _consent_body(bank: Bank, consent_id: str, doc: Doc) -> dict[str, Any]:
    return {
        "Data": {
            "Initiation": doc["data"]["Initiation"],
            "ConsentId": consent_id,
            "Status": doc["status"],
            "CreationDateTime": doc["created"],
            "StatusUpdateDateTime": doc["updated"],
        },
        "Links": {"Self": _consent_url(bank, consent_id)},
        "Meta": {},
    }


def _own_consent(bank: Bank, token: AccessToken, consent_id: str) -> Doc:
    """The caller's file consent; another client's or an unknown id is NotFound (no existence leak)."""
    doc = bank.store.get(FILE_KIND, consent_id)
    if doc is None or doc.get("client_id") != token.client_id:
        raise not_found(f"no file payment consent {consent_id}", "ConsentId")
    return doc


def _own_payment(bank: Bank, token: AccessToken, payment_id: str) -> Doc:
    doc = bank.store.get(PAYMENT_KIND, payment_id)
    if doc is None or doc.get("client_id") != token.client_id:
        raise not_found(f"no file payment {payment_id}", "FilePaymentId")
    return doc


def _exact_keys(value: object, path: str, fields: tuple[str, ...]) -> dict[str, Any]:
    try:
        return filecheck.exact_object(value, path, fields)
    except filecheck.CheckError as exc:
        raise invalid_format(str(exc), exc.path) from None


def _status_now(bank: Bank, payment: Doc) -> tuple[str, str]:
    status, moment = settlement.payment_status(
        datetime.fromisoformat(payment["created"]), bank.now(), bank.config.file_payment_delay, payment["settled"]
    )
    return status, iso_ms(moment)


def _payment_now(bank: Bank, request: Request) -> tuple[str, Doc, Doc, str, str]:
    """The caller's payment named in the path, its consent, and its status as of now with when it was reached."""
    payment_id = request.path_params["file_payment_id"]
    token = _client_token(bank, request)
    payment = _own_payment(bank, token, payment_id)
    consent = bank.store.get(FILE_KIND, payment["consent_id"])
    if consent is None:  # pragma: no cover - consents are never deleted
        raise not_found(f"no file payment {payment_id}", "FilePaymentId")
    status, updated = _status_now(bank, payment)
    return payment_id, payment, consent, status, updated


async def create_consent(bank: Bank, request: Request) -> Response:
    """A1: validate the Initiation strictly and store the consent in AwaitingUpload."""
    token = _client_token(bank, request)
    require_json_content_type(request)
    key = _idempotency_key(request)
    body = parse_json_object(await read_body(bank, request))

    async def create() -> Response:
        data = _exact_keys(_exact_keys(body, "", ("Data",))["Data"], "Data", ("Initiation",))
        try:
            filecheck.check_initiation(data["Initiation"], bank.config.max_transactions)
        except filecheck.CheckError as exc:
            raise invalid_format(str(exc), exc.path) from None
        consent_id = f"pay-fi-{bank.new_uuid()}"
        doc = new_consent(
            bank, FILE_KIND, consent_id, token.client_id, AWAITING_UPLOAD, {"Initiation": data["Initiation"]}, {}
        )
        return json_response(_consent_body(bank, consent_id, doc), 201, request)

    return await idempotent(bank, key, token.client_id, "file-payment-consents.create", _canonical(body, key), create)


async def upload_file(bank: Bank, request: Request) -> Response:
    """A2: verify the file against the consent; the consent moves to AwaitingAuthorisation."""
    consent_id = request.path_params["consent_id"]
    token = _client_token(bank, request)
    require_json_content_type(request)
    key = _idempotency_key(request)
    body = parse_json_object(await read_body(bank, request))

    async def create() -> Response:
        doc = _own_consent(bank, token, consent_id)
        if doc["status"] != AWAITING_UPLOAD:
            raise invalid_consent_status(
                f"invalid_consent_status: consent {consent_id} is {doc['status']}; a file is accepted only"
                f" while it is {AWAITING_UPLOAD}"
            )
        initiation = doc["data"]["Initiation"]
        try:
            filecheck.verify_upload(body, initiation, consent_id, bank.config.max_transactions)
        except filecheck.CheckError as exc:
            raise field_invalid(str(exc), exc.path) from None
        now = iso_ms(bank.now())
        doc["status"] = AWAITING_AUTHORISATION
        doc["updated"] = now
        doc["uploaded"] = now
        bank.store.put(FILE_KIND, consent_id, doc)
        return json_response(
            {"controlSum": initiation["ControlSum"], "numberOfTransactions": initiation["NumberOfTransactions"]},
            201,
            request,
        )

    return await idempotent(
        bank, key, token.client_id, f"file-payment-consents.upload {consent_id}", _canonical(body, key), create
    )


async def get_consent(bank: Bank, request: Request) -> Response:
    """A5: the consent as stored."""
    consent_id = request.path_params["consent_id"]
    token = _client_token(bank, request)
    require_fapi_headers(bank, request)
    doc = _own_consent(bank, token, consent_id)
    return json_response(_consent_body(bank, consent_id, doc), 200, request)


async def create_payment(bank: Bank, request: Request) -> Response:
    """A3: one payment per Authorised consent, with an auth-code token naming that consent."""
    token = bearer(bank, request.headers.get("authorization"), "authorization_code")
    interaction_id(request)
    require_fapi_headers(bank, request)
    require_json_content_type(request)
    key = _idempotency_key(request)
    body = parse_json_object(await read_body(bank, request))
    data = _exact_keys(_exact_keys(body, "", ("Data",))["Data"], "Data", ("ConsentId", "Initiation"))
    consent_id = data["ConsentId"]
    if not isinstance(consent_id, str) or not consent_id:
        raise invalid_format("Data.ConsentId must be a non-empty JSON string", "Data.ConsentId")
    if not isinstance(data["Initiation"], dict):
        raise invalid_format("Data.Initiation must be a JSON object", "Data.Initiation")
    if token.consent_id != consent_id:
        raise header_invalid("Authorization", "no_access_token: token scope does not name this consent", 401)

    async def create() -> Response:
        doc = _own_consent(bank, token, consent_id)
        initiation = doc["data"]["Initiation"]
        where = filecheck.first_difference(data["Initiation"], initiation, "Data.Initiation")
        if where is not None:
            raise invalid_format(f"{where} differs from the consent's Initiation", where)
        if doc["status"] != AUTHORISED:
            raise invalid_consent_status(
                f"invalid_consent_status: consent {consent_id} is {doc['status']}; a payment needs an"
                f" {AUTHORISED} consent"
            )
        payment_id = f"fp-{bank.new_hex()}"
        now = iso_ms(bank.now())
        transactions = initiation["SupplementaryData"]["data"]["transaction"]
        bank.store.put(
            PAYMENT_KIND,
            payment_id,
            {
                "client_id": token.client_id,
                "consent_id": consent_id,
                "created": now,
                "settled": settlement.settled_count(transactions),
            },
        )
        doc["status"] = CONSUMED
        doc["updated"] = now
        doc["file_payment_id"] = payment_id
        bank.store.put(FILE_KIND, consent_id, doc)
        return json_response(
            {
                "Data": {
                    "ConsentId": consent_id,
                    "FilePaymentId": payment_id,
                    "Status": settlement.INITIATION_PENDING,
                    "CreationDateTime": now,
                    "StatusUpdateDateTime": now,
                    "MultiAuthorisation": {"Status": "AwaitingFurtherAuthorisation"},
                    "Initiation": initiation,
                },
                "Links": {"Self": _payment_url(bank, payment_id)},
                "Meta": {},
            },
            201,
            request,
        )

    return await idempotent(bank, key, token.client_id, "file-payments.create", _canonical(body, key), create)


async def get_payment(bank: Bank, request: Request) -> Response:
    """A4: the payment with its status as of now."""
    payment_id, payment, consent, status, updated = _payment_now(bank, request)
    return json_response(
        {
            "Data": {
                "ConsentId": payment["consent_id"],
                "FilePaymentId": payment_id,
                "Status": status,
                "CreationDateTime": payment["created"],
                "StatusUpdateDateTime": updated,
                "Initiation": consent["data"]["Initiation"],
            },
            "Links": {"Self": _payment_url(bank, payment_id)},
            "Meta": {},
        },
        200,
        request,
    )


async def get_report(bank: Bank, request: Request) -> Response:
    """The per-transaction report of a payment (Open Banking v3.1 report-file)."""
    payment_id, payment, consent, status, updated = _payment_now(bank, request)
    initiation = consent["data"]["Initiation"]
    lines = settlement.report(
        initiation["SupplementaryData"]["data"]["transaction"],
        payment["consent_id"],
        final=status != settlement.INITIATION_PENDING,
    )
    return json_response(
        {
            "Data": {
                "FilePaymentId": payment_id,
                "ConsentId": payment["consent_id"],
                "FileReference": initiation["FileReference"],
                "Status": status,
                "StatusUpdateDateTime": updated,
                **lines,
            },
            "Links": {"Self": f"{_payment_url(bank, payment_id)}/report-file"},
            "Meta": {},
        },
        200,
        request,
    )


def routes(bank: Bank) -> list[BaseRoute]:
    """The flow A routes, named for fault injection."""
    table = (
        ("/file-payment-consents", create_consent, "POST", "file-payment-consents.create"),
        ("/file-payment-consents/{consent_id}/file", upload_file, "POST", "file-payment-consents.upload"),
        ("/file-payment-consents/{consent_id}", get_consent, "GET", "file-payment-consents.get"),
        ("/file-payments", create_payment, "POST", "file-payments.create"),
        ("/file-payments/{file_payment_id}", get_payment, "GET", "file-payments.get"),
        ("/file-payments/{file_payment_id}/report-file", get_report, "GET", "file-payments.report"),
    )
    return [
        Route(f"{PREFIX}{path}", partial(handler, bank), methods=[method], name=name)
        for path, handler, method, name in table
    ]
