"""Flow B routes: VRP consents (B1, B3) and domestic VRPs (B2 and its read).

Thin adapter: headers, tokens, store and clock here; every rule lives in `sandbox.vrp_rules`.
The behaviour is written down in docs/sandbox-vrp.md.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.clock import iso_ms
from sandbox.consents import VRP_KIND, new_consent
from sandbox.errors import fails_control_parameters, invalid_consent_status, invalid_format, not_found
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
from sandbox.vrp_rules import (
    PENDING,
    ControlParameterBreachError,
    InvalidFieldError,
    PastPayment,
    check_control_parameters,
    check_matches_consent,
    consent_id_of,
    parse_instant,
    payment_status,
    validate_consent_request,
    validate_payment_request,
)

BASE = "/open-banking/v3.1/pisp"
CONSENTS = f"{BASE}/domestic-vrp-consents"
PAYMENTS = f"{BASE}/domestic-vrps"
PAYMENT_KIND = "domestic_vrp"
AWAITING = "AwaitingAuthorisation"
AUTHORISED = "Authorised"


def _now_ms(bank: Bank) -> datetime:
    """The bank's time cut to milliseconds, the precision every stored timestamp has."""
    now = bank.now()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _client_token(bank: Bank, request: Request) -> AccessToken:
    """Headers of B1, B3 and the payment read: client-credentials token, interaction id, FAPI headers."""
    token = bearer(bank, request.headers.get("authorization"), "client_credentials")
    require_token_scope(token)
    interaction_id(request)
    require_fapi_headers(bank, request)
    return token


async def _json_body(bank: Bank, request: Request) -> tuple[str | None, dict[str, Any]]:
    """Content-Type, then the idempotency key's form, then the body: the last header checks before the body."""
    require_json_content_type(request)
    key = check_key(request.headers.get(IDEMPOTENCY_HEADER))
    return key, parse_json_object(await read_body(bank, request))


def _consent_resource(bank: Bank, consent_id: str, doc: Doc) -> dict[str, Any]:
    return {
        "Data": {
            "ConsentId": consent_id,
            "Status": doc["status"],
            "CreationDateTime": doc["created"],
            "StatusUpdateDateTime": doc["updated"],
            **doc["data"],
        },
        "Risk": doc["risk"],
        "Links": {"Self": f"{bank.config.issuer}{CONSENTS}/{consent_id}"},
        "Meta": {},
    }


def _payment_resource(bank: Bank, payment_id: str, doc: Doc) -> dict[str, Any]:
    created = parse_instant(doc["created"], "created")
    status, since = payment_status(created, bank.now(), bank.config.vrp_delay)
    return {
        "Data": {
            "DomesticVRPId": payment_id,
            "ConsentId": doc["consent_id"],
            "Status": status,
            "CreationDateTime": doc["created"],
            "StatusUpdateDateTime": iso_ms(since),
            "Charges": doc["charges"],
            "Initiation": doc["data"]["Initiation"],
            "Instruction": doc["data"]["Instruction"],
        },
        "Risk": doc["risk"],
        "Links": {"Self": f"{bank.config.issuer}{PAYMENTS}/{payment_id}"},
        "Meta": {},
    }


def _own_consent(bank: Bank, client_id: str, consent_id: str) -> Doc:
    """The VRP consent if it exists and belongs to the client; another client's is reported as unknown."""
    doc = bank.store.get(VRP_KIND, consent_id)
    if doc is None or doc["client_id"] != client_id:
        raise not_found(f"no VRP consent {consent_id}", "ConsentId")
    return doc


async def create_consent(bank: Bank, request: Request) -> Response:
    """B1: validate the consent request and store it AwaitingAuthorisation (idempotent)."""
    token = _client_token(bank, request)
    key, body = await _json_body(bank, request)

    async def create() -> Response:
        try:
            valid = validate_consent_request(body)
        except InvalidFieldError as exc:
            raise invalid_format(str(exc), exc.path) from None
        consent_id = f"vrp-{bank.new_uuid()}"
        doc = new_consent(bank, VRP_KIND, consent_id, token.client_id, AWAITING, valid.data, valid.risk, payments=[])
        return json_response(_consent_resource(bank, consent_id, doc), 201, request)

    operation = "domestic-vrp-consents.create"
    return await idempotent(bank, key, token.client_id, operation, canonical_body(body), create)


async def get_consent(bank: Bank, request: Request) -> Response:
    """B3: the caller's VRP consent as stored."""
    token = _client_token(bank, request)
    consent_id = request.path_params["consent_id"]
    doc = _own_consent(bank, token.client_id, consent_id)
    return json_response(_consent_resource(bank, consent_id, doc), 200, request)


async def create_payment(bank: Bank, request: Request) -> Response:
    """B2: one payment under an Authorised consent, within its control parameters (idempotent)."""
    # Auth-code token first (its consent is checked once the body names one), then the other headers.
    bearer(bank, request.headers.get("authorization"), "authorization_code")
    interaction_id(request)
    require_fapi_headers(bank, request)
    key, body = await _json_body(bank, request)
    try:
        consent_id = consent_id_of(body)
    except InvalidFieldError as exc:
        raise invalid_format(str(exc), exc.path) from None
    token = bearer(bank, request.headers.get("authorization"), "authorization_code", consent_id)

    async def create() -> Response:
        try:
            payment = validate_payment_request(body)
        except InvalidFieldError as exc:
            raise invalid_format(str(exc), exc.path) from None
        consent = _own_consent(bank, token.client_id, consent_id)
        if consent["status"] != AUTHORISED:
            raise invalid_consent_status(
                f"invalid_consent_status: consent {consent_id} is {consent['status']}, not {AUTHORISED}"
            )
        try:
            check_matches_consent(consent["data"], payment)
        except InvalidFieldError as exc:
            raise invalid_format(str(exc), exc.path) from None
        now = _now_ms(bank)
        ledger = consent.get("payments", [])
        earlier = [PastPayment(parse_instant(p["at"], "at"), Decimal(p["amount"])) for p in ledger]
        try:
            check_control_parameters(
                consent["data"]["ControlParameters"],
                parse_instant(consent["created"], "created"),
                now,
                payment.amount,
                payment.currency,
                earlier,
            )
        except ControlParameterBreachError as exc:
            raise fails_control_parameters(exc.path, exc.message) from None
        payment_id = f"obvrp-{bank.new_hex()}"
        created = iso_ms(now)
        doc: Doc = {
            "client_id": token.client_id,
            "consent_id": consent_id,
            "created": created,
            "data": {"Initiation": payment.data["Initiation"], "Instruction": payment.data["Instruction"]},
            "risk": payment.risk,
            # Sweeping between the customer's own accounts is free: one zero charge, documented.
            "charges": [
                {
                    "ChargeBearer": "BorneByDebtor",
                    "Type": "UK.OBIE.MoneyTransferOut",
                    "Amount": {"Amount": "0.00", "Currency": payment.currency},
                }
            ],
        }
        # Ledger and payment are written with no await in between, so concurrent requests cannot both
        # squeeze under a limit (the store's single-loop atomicity).
        consent["payments"] = [*ledger, {"id": payment_id, "at": created, "amount": str(payment.amount)}]
        bank.store.put(PAYMENT_KIND, payment_id, doc)
        bank.store.put(VRP_KIND, consent_id, consent)
        resource = _payment_resource(bank, payment_id, doc)
        resource["Data"]["Status"] = PENDING  # the spec: Pending at creation, even with a zero delay
        resource["Data"]["StatusUpdateDateTime"] = created
        return json_response(resource, 201, request)

    return await idempotent(bank, key, token.client_id, "domestic-vrps.create", canonical_body(body), create)


async def get_payment(bank: Bank, request: Request) -> Response:
    """The caller's domestic VRP with its status as of now."""
    token = _client_token(bank, request)
    payment_id = request.path_params["domestic_vrp_id"]
    doc = bank.store.get(PAYMENT_KIND, payment_id)
    if doc is None or doc["client_id"] != token.client_id:
        raise not_found(f"no domestic VRP {payment_id}", "DomesticVRPId")
    return json_response(_payment_resource(bank, payment_id, doc), 200, request)


def routes(bank: Bank) -> list[BaseRoute]:
    """The flow B routes of the resource server."""
    return [
        Route(CONSENTS, partial(create_consent, bank), methods=["POST"], name="domestic-vrp-consents.create"),
        Route(
            CONSENTS + "/{consent_id}", partial(get_consent, bank), methods=["GET"], name="domestic-vrp-consents.get"
        ),
        Route(PAYMENTS, partial(create_payment, bank), methods=["POST"], name="domestic-vrps.create"),
        Route(PAYMENTS + "/{domestic_vrp_id}", partial(get_payment, bank), methods=["GET"], name="domestic-vrps.get"),
    ]
