"""The sandbox's OpenAPI 3.1 document, written by hand from the spec, served at `GET /openapi.json`.

It describes every operation of the spec (E1-E6, A1-A5, B1-B3) plus the sandbox's additions (refresh
grant, consent page, report file, domestic VRP read): paths, methods, parameters, required headers,
request bodies (the spec's resource tables as JSON Schema; form bodies for the token and PAR endpoints)
and responses with both error shapes. Request schemas describe what the sandbox accepts, so a client
can validate its own requests against them; response schemas describe what it answers.

Why 3.1: E2 (message-signature) is a GET with a JSON body in the spec. OpenAPI 3.1 permits a request
body on GET (without defined semantics), 3.0 does not.

Every operation may also answer 429 and 5xx when a fault plan is active (docs/sandbox-faults.md);
those responses are documented too, in the operation's error shape.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.filecheck import payload_hash
from sandbox.http import json_response
from sandbox.state import Bank

Schema = dict[str, Any]

RS = "/open-banking/v3.1/pisp"
OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
FILE_TYPE = "UK.OBIE.PaymentInitiation.4.0"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def ref(name: str) -> Schema:
    """A `$ref` to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Schema], required: list[str] | None = None, *, closed: bool = True) -> Schema:
    """An object schema; `closed` forbids fields not listed (the sandbox refuses them)."""
    out: Schema = {"type": "object", "properties": properties}
    out["required"] = list(properties) if required is None else required
    if closed:
        out["additionalProperties"] = False
    return out


def text(max_length: int | None = None, *, min_length: int = 1, **extra: Any) -> Schema:
    """A string schema."""
    out: Schema = {"type": "string", "minLength": min_length, **extra}
    if max_length is not None:
        out["maxLength"] = max_length
    return out


TIMESTAMP = text(description="ISO 8601 UTC with milliseconds", format="date-time")
CURRENCY = text(3, min_length=3, pattern="^[A-Z]{3}$", description="ISO 4217 code")
ACCOUNT_NUMBER = text(34, pattern="^[A-Za-z0-9][A-Za-z0-9-]{0,33}$")


def _schemas() -> dict[str, Schema]:
    money_number: Schema = {"type": "number", "exclusiveMinimum": 0, "maximum": 9999999999999.99}
    amount_text = text(
        pattern=r"^[0-9]{1,13}(\.[0-9]{1,2})?$", description="decimal amount as a string, at most 2 decimals"
    )
    amount = obj({"Amount": amount_text, "Currency": CURRENCY})
    error_detail = obj(
        {
            "ErrorCode": text(),
            "Message": text(),
            "Path": text(description="the offending field or header, e.g. Authorization"),
        },
        ["ErrorCode", "Message"],
    )
    transaction = obj(
        {
            "originAccount": obj(
                {
                    "accountNumber": ACCOUNT_NUMBER,
                    "accountType": {"enum": ["MONETARY", "SAVINGS"]},
                    "currency": CURRENCY,
                }
            ),
            "destinationAccount": obj(
                {
                    "accountNumber": ACCOUNT_NUMBER,
                    "accountType": {"enum": ["MONETARY", "SAVINGS"]},
                    "currency": CURRENCY,
                    "email": text(254, format="email"),
                }
            ),
            "transferInfo": obj(
                {
                    "transactionType": text(70, description="e.g. THIRD_PROVIDER"),
                    "debitType": {"const": "D"},
                    "transactionAmount": {**money_number, "description": "at most 2 decimals"},
                    "executionType": {"const": "ONLINE"},
                    "concept": text(140, min_length=0),
                    "reference": text(
                        min_length=0,
                        description="empty in the consent's SupplementaryData; the consent id in the upload",
                    ),
                }
            ),
        }
    )
    file_payload = obj(
        {"data": obj({"transaction": {"type": "array", "minItems": 1, "items": ref("FileTransaction")}})}
    )
    file_initiation = obj(
        {
            "SupplementaryData": ref("FilePayload"),
            "FileType": {"const": FILE_TYPE},
            "FileHash": text(
                44,
                min_length=44,
                pattern="^[A-Za-z0-9+/]{43}=$",
                description="base64(SHA-256(RFC 8785 canonical JSON of SupplementaryData)), references empty",
            ),
            "FileReference": text(40),
            "NumberOfTransactions": text(15, pattern="^[0-9]{1,15}$"),
            "ControlSum": {"type": "number", "description": "sum of transactionAmount, exact"},
        }
    )
    links = obj({"Self": text(format="uri")})
    meta = obj({}, [], closed=False)
    file_consent_data = obj(
        {
            "Initiation": ref("FileInitiation"),
            "ConsentId": text(pattern="^pay-fi-[0-9a-f-]{36}$"),
            "Status": {"enum": ["AwaitingUpload", "AwaitingAuthorisation", "Authorised", "Consumed", "Rejected"]},
            "CreationDateTime": TIMESTAMP,
            "StatusUpdateDateTime": TIMESTAMP,
        }
    )
    payment_status = {"enum": ["InitiationPending", "InitiationCompleted", "InitiationFailed"]}
    file_payment_data = obj(
        {
            "ConsentId": text(),
            "FilePaymentId": text(pattern="^fp-[0-9a-f]+$"),
            "Status": payment_status,
            "CreationDateTime": TIMESTAMP,
            "StatusUpdateDateTime": TIMESTAMP,
            "MultiAuthorisation": obj({"Status": {"const": "AwaitingFurtherAuthorisation"}}),
            "Initiation": ref("FileInitiation"),
        },
        ["ConsentId", "FilePaymentId", "Status", "CreationDateTime", "StatusUpdateDateTime", "Initiation"],
    )
    report_line = obj(
        {
            "Index": {"type": "integer", "minimum": 0},
            "DestinationAccount": text(),
            "Amount": {"type": "number"},
            "Currency": CURRENCY,
            "Reference": text(min_length=0),
            "Status": {"enum": ["Pending", "Settled", "Rejected"]},
            "ReasonCode": {"type": ["string", "null"]},
            "Reason": {"type": ["string", "null"]},
        }
    )
    bucket = obj({"Count": {"type": "integer", "minimum": 0}, "Amount": {"type": "number"}})
    report_data = obj(
        {
            "FilePaymentId": text(),
            "ConsentId": text(),
            "FileReference": text(),
            "Status": payment_status,
            "StatusUpdateDateTime": TIMESTAMP,
            "Transactions": {"type": "array", "items": report_line},
            "Totals": obj(
                {
                    "NumberOfTransactions": text(pattern="^[0-9]+$"),
                    "ControlSum": {"type": "number"},
                    "Currency": {"type": ["string", "null"]},
                    "Pending": bucket,
                    "Settled": bucket,
                    "Rejected": bucket,
                }
            ),
        }
    )
    creditor = obj(
        {
            "SchemeName": {"const": "UK.OBIE.SortCodeAccountNumber"},
            "Identification": text(
                14, min_length=14, pattern="^[0-9]{14}$", description="6-digit sort code + 8-digit account number"
            ),
            "Name": text(350),
        }
    )
    periodic_limit = obj(
        {
            "Amount": amount_text,
            "Currency": CURRENCY,
            "PeriodType": {"enum": ["Day", "Week", "Month"]},
            "PeriodAlignment": {"enum": ["Consent", "Calendar"]},
        }
    )
    control_parameters = obj(
        {
            "PSUAuthenticationMethods": {
                "type": "array",
                "minItems": 1,
                "items": {"enum": ["UK.OBIE.SCA", "UK.OBIE.SCANotRequired"]},
                "contains": {"const": "UK.OBIE.SCA"},
            },
            "VRPType": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {"const": "UK.OBIE.VRPType.Sweeping"},
                "description": "sweeping only",
            },
            "ValidFromDateTime": text(format="date-time", description="ISO 8601 with offset"),
            "ValidToDateTime": text(format="date-time", description="ISO 8601 with offset"),
            "MaximumIndividualAmount": amount,
            "PeriodicLimits": {
                "type": "array",
                "items": periodic_limit,
                "description": "at most one entry per (PeriodType, PeriodAlignment); same currency as the maximum",
            },
        },
        [
            "PSUAuthenticationMethods",
            "VRPType",
            "ValidFromDateTime",
            "ValidToDateTime",
            "MaximumIndividualAmount",
            "PeriodicLimits",
        ],
    )
    remittance = obj({"Reference": text(35), "Unstructured": text(140)})
    vrp_initiation = obj({"CreditorAccount": ref("CreditorAccount")})
    vrp_consent_request_data = obj(
        {
            "ControlParameters": ref("ControlParameters"),
            "Initiation": ref("VRPInitiation"),
            "RemittanceInformation": ref("RemittanceInformation"),
        }
    )
    vrp_consent_data = obj(
        {
            "ControlParameters": ref("ControlParameters"),
            "Initiation": ref("VRPInitiation"),
            "RemittanceInformation": ref("RemittanceInformation"),
            "ConsentId": text(pattern="^vrp-[0-9a-f-]{36}$"),
            "Status": {"enum": ["AwaitingAuthorisation", "Authorised", "Rejected"]},
            "CreationDateTime": TIMESTAMP,
            "StatusUpdateDateTime": TIMESTAMP,
        },
    )
    instruction = obj(
        {
            "InstructionIdentification": text(35),
            "EndToEndIdentification": text(35),
            "CreditorAccount": ref("CreditorAccount"),
            "InstructedAmount": amount,
            "RemittanceInformation": obj({"Unstructured": text(140), "Reference": text(35)}, ["Unstructured"]),
        },
        ["InstructionIdentification", "EndToEndIdentification", "CreditorAccount", "InstructedAmount"],
    )
    charge = obj({"ChargeBearer": text(), "Type": text(), "Amount": amount})
    domestic_vrp_request_data = obj(
        {
            "ConsentId": text(),
            "Initiation": ref("VRPInitiation"),
            "PSUAuthenticationMethod": {"const": "UK.OBIE.SCA"},
            "VRPType": {"const": "UK.OBIE.VRPType.Sweeping"},
            "Instruction": ref("VRPInstruction"),
        }
    )
    domestic_vrp_data = obj(
        {
            "DomesticVRPId": text(pattern="^obvrp-[0-9a-f]+$"),
            "ConsentId": text(),
            "Status": {"enum": ["Pending", "AcceptedSettlementCompleted", "Rejected"]},
            "CreationDateTime": TIMESTAMP,
            "StatusUpdateDateTime": TIMESTAMP,
            "Charges": {"type": "array", "items": charge},
            "Initiation": ref("VRPInitiation"),
            "Instruction": ref("VRPInstruction"),
        }
    )
    risk = obj({}, [], closed=False)
    string_list = {"type": "array", "items": {"type": "string"}}
    discovery_fields: dict[str, Schema] = {
        "issuer": text(format="uri"),
        "claims_parameter_supported": {"const": True},
        "claims_supported": string_list,
        "grant_types_supported": string_list,
        "response_types_supported": string_list,
        "request_parameter_supported": {"const": True},
        "request_uri_parameter_supported": {"const": False},
        "require_request_uri_registration": {"const": True},
        "scopes_supported": string_list,
        "token_endpoint_auth_methods_supported": string_list,
        "tls_client_certificate_bound_access_tokens": {"const": True},
        "code_challenge_methods_supported": {**string_list, "maxItems": 0},
        "claim_types_supported": string_list,
        "subject_types_supported": string_list,
        **{
            name: text(format="uri")
            for name in (
                "token_endpoint",
                "authorization_endpoint",
                "registration_endpoint",
                "jwks_uri",
                "userinfo_endpoint",
                "introspection_endpoint",
                "revocation_endpoint",
                "pushed_authorization_request_endpoint",
                "backchannel_authentication_endpoint",
            )
        },
        "backchannel_token_delivery_modes_supported": string_list,
        "backchannel_authentication_request_signing_alg_values_supported": string_list,
        "id_token_signing_alg_values_supported": string_list,
        "request_object_signing_alg_values_supported": string_list,
        "token_endpoint_auth_signing_alg_values_supported": string_list,
        "userinfo_signing_alg_values_supported": string_list,
        "backchannel_user_code_parameter_supported": {"const": False},
        "request_object_encryption_alg_values_supported": string_list,
        "request_object_encryption_enc_values_supported": string_list,
        "id_token_encryption_alg_values_supported": string_list,
        "id_token_encryption_enc_values_supported": string_list,
        "acr_values_supported": string_list,
        "authorization_details_types_supported": string_list,
        "authorization_signing_alg_values_supported": string_list,
        "authorization_encryption_alg_values_supported": string_list,
        "authorization_encryption_enc_values_supported": string_list,
        "userinfo_encryption_alg_values_supported": string_list,
        "userinfo_encryption_enc_values_supported": string_list,
        "response_modes_supported": string_list,
        "mtls_endpoint_aliases": obj(
            {
                "token_endpoint": text(format="uri"),
                "revocation_endpoint": text(format="uri"),
                "introspection_endpoint": text(format="uri"),
                "pushed_authorization_request_endpoint": text(format="uri"),
            },
            closed=False,
        ),
    }
    return {
        "OBError": obj(
            {"Code": text(), "Message": text(), "Errors": {"type": "array", "minItems": 1, "items": error_detail}}
        ),
        "OAuthError": obj({"error": text(), "error_description": text(min_length=0)}),
        "Amount": amount,
        "FileTransaction": transaction,
        "FilePayload": file_payload,
        "FileInitiation": file_initiation,
        "Links": links,
        "Meta": meta,
        "FileConsentRequest": obj({"Data": obj({"Initiation": ref("FileInitiation")})}),
        "FileConsentResponse": obj({"Data": file_consent_data, "Links": ref("Links"), "Meta": ref("Meta")}),
        "FileUploadResponse": obj({"controlSum": {"type": "number"}, "numberOfTransactions": text(pattern="^[0-9]+$")}),
        "FilePaymentRequest": obj(
            {"Data": obj({"ConsentId": text(), "Initiation": ref("FileInitiation")})},
        ),
        "FilePaymentResponse": obj({"Data": file_payment_data, "Links": ref("Links"), "Meta": ref("Meta")}),
        "FilePaymentReport": obj({"Data": report_data, "Links": ref("Links"), "Meta": ref("Meta")}),
        "CreditorAccount": creditor,
        "ControlParameters": control_parameters,
        "RemittanceInformation": remittance,
        "VRPInitiation": vrp_initiation,
        "VRPInstruction": instruction,
        "VRPConsentRequest": obj({"Data": vrp_consent_request_data, "Risk": risk}),
        "VRPConsentResponse": obj({"Data": vrp_consent_data, "Risk": risk, "Links": ref("Links"), "Meta": ref("Meta")}),
        "DomesticVRPRequest": obj({"Data": domestic_vrp_request_data, "Risk": risk}),
        "DomesticVRPResponse": obj(
            {"Data": domestic_vrp_data, "Risk": risk, "Links": ref("Links"), "Meta": ref("Meta")}
        ),
        "DiscoveryDocument": obj(discovery_fields, closed=False),
        "MessageSignatureRequest": obj(
            {
                "header": obj({"alg": {"const": "PS256"}, "kid": text(), "typ": text()}, ["alg", "kid"]),
                "body": obj(
                    {
                        "aud": text(),
                        "exp": {"type": "integer"},
                        "iat": {"type": "integer"},
                        "iss": text(),
                        "sub": text(),
                        "jti": text(),
                        "nbf": {"type": "integer"},
                    },
                    ["aud", "exp", "iat", "iss", "sub", "jti"],
                ),
                "signingKeyPEM": text(description="PEM private key (RSA)"),
            }
        ),
        "TokenRequest": obj(
            {
                "grand_type": {
                    "enum": ["client_credentials", "authorization_code", "refresh_token"],
                    "description": "the spec's spelling; grant_type is accepted too (one of them is required)",
                },
                "grant_type": {"enum": ["client_credentials", "authorization_code", "refresh_token"]},
                "scope": text(description="client credentials: `payments openid`; auth code: `payments`"),
                "client_assertion_type": {"const": ASSERTION_TYPE},
                "client_assertion": text(description="PS256 JWT (flow A); flow B sends Basic instead"),
                "code": text(description="authorization_code grant"),
                "redirect_uri": text(description="authorization_code grant: the registered redirect URI"),
                "code_verifier": text(43, min_length=43, description="authorization_code grant: PKCE verifier"),
                "refresh_token": text(description="refresh_token grant"),
            },
            [],
            closed=False,
        ),
        "TokenResponse": obj(
            {
                "access_token": text(),
                "token_type": {"const": "Bearer"},
                "expires_in": {"type": "integer", "minimum": 1},
                "scope": text(),
                "state": text(),
                "refresh_token": text(),
                "id_token": text(),
            },
            ["access_token", "token_type", "expires_in", "scope"],
            closed=False,
        ),
        "PARRequest": obj(
            {
                "client_id": text(),
                "redirect_uri": text(),
                "scope": text(pattern="^payments:\\S+ openid$", description="payments:<consent_id> openid"),
                "response_type": {"const": "code"},
                "state": text(),
                "code_challenge": text(43, min_length=43, description="base64url(SHA-256(verifier))"),
                "code_challenge_method": {"const": "S256"},
                "client_assertion_type": {"const": ASSERTION_TYPE},
                "client_assertion": text(),
            },
            closed=False,
        ),
        "PARResponse": obj(
            {
                "request_uri": text(pattern="^urn:ietf:params:oauth:request_uri:[0-9a-f-]{36}$"),
                "expires_in": {"type": "integer", "minimum": 1},
            }
        ),
        "ConsentDecision": obj(
            {
                "request_uri": text(description="the request_uri the page was opened with"),
                "decision": {"enum": ["approve", "reject"]},
            },
            closed=False,
        ),
    }


def _header(name: str, schema: Schema, description: str, required: bool = True) -> Schema:
    return {"name": name, "in": "header", "required": required, "schema": schema, "description": description}


def _parameters() -> dict[str, Schema]:
    return {
        "InteractionId": _header(
            "x-fapi-interaction-id",
            {"type": "string", "format": "uuid"},
            "a new UUID per call; echoed in the response",
        ),
        "FinancialId": _header("x-fapi-financial-id", text(), "the bank's participant identifier"),
        "CustomerIp": _header(
            "x-fapi-customer-ip-address",
            {"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]},
            "IP address of the customer",
        ),
        "IdempotencyKey": _header(
            "x-idempotency-key",
            text(40),
            "same key and body: the same resource again; same key, other body: 400",
            required=False,
        ),
        "ConsentId": {"name": "consent_id", "in": "path", "required": True, "schema": text()},
        "FilePaymentId": {"name": "file_payment_id", "in": "path", "required": True, "schema": text()},
        "DomesticVRPId": {"name": "domestic_vrp_id", "in": "path", "required": True, "schema": text()},
    }


def _p(name: str) -> Schema:
    return {"$ref": f"#/components/parameters/{name}"}


_INJECTED = "injected by a sandbox fault plan (docs/sandbox-faults.md)"
_INTERACTION_HEADER = {"x-fapi-interaction-id": {"schema": {"type": "string"}, "description": "echoed"}}
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "seconds to wait"}}


def _json(schema: Schema, description: str, headers: dict[str, Schema] | None = None) -> Schema:
    out: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


def _plain(description: str) -> Schema:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def _resource_errors(*statuses: str) -> dict[str, Schema]:
    """Resource-shape errors for `statuses`, plus the injected 429 and 5xx."""
    reasons = {
        "400": "format error, unknown resource (UK.OBIE.Resource.NotFound), invalid header or consent status",
        "401": "UK.OBIE.Header.Missing (no Authorization) or UK.OBIE.Header.Invalid (no_access_token)",
        "403": "UK.OBIE.Header.Invalid, message token_expired",
    }
    out = {s: _json(ref("OBError"), reasons[s], _INTERACTION_HEADER) for s in statuses}
    out["429"] = _json(ref("OBError"), f"too many requests, {_INJECTED}", _RETRY_AFTER)
    out["5XX"] = _json(ref("OBError"), f"server error, {_INJECTED}")
    return out


def _oauth_errors(*statuses: str) -> dict[str, Schema]:
    out = {
        s: _json(ref("OAuthError"), "OAuth error (invalid_client, invalid_grant, invalid_request, ...)")
        for s in statuses
    }
    out["429"] = _json(ref("OAuthError"), f"too many requests, {_INJECTED}", _RETRY_AFTER)
    out["5XX"] = _json(ref("OAuthError"), f"server error, {_INJECTED}")
    return out


def _text_errors(*statuses: str) -> dict[str, Schema]:
    out = {s: _plain("plain-text error") for s in statuses}
    out["429"] = {**_plain(f"too many requests, {_INJECTED}"), "headers": _RETRY_AFTER}
    out["5XX"] = _plain(f"server error, {_INJECTED}")
    return out


def _json_body(schema_name: str, example: Schema | None = None) -> Schema:
    media: Schema = {"schema": ref(schema_name)}
    if example is not None:
        media["examples"] = {"valid": {"summary": "a request the sandbox accepts", "value": example}}
    return {"required": True, "content": {JSON: media}}


def file_payload_example() -> Schema:
    """A two-transfer file payload with empty references (as SupplementaryData carries it)."""

    def transfer(account: str, amount: Decimal, email: str, concept: str) -> Schema:
        return {
            "originAccount": {"accountNumber": "90012345", "accountType": "MONETARY", "currency": "GTQ"},
            "destinationAccount": {
                "accountNumber": account,
                "accountType": "SAVINGS",
                "currency": "GTQ",
                "email": email,
            },
            "transferInfo": {
                "transactionType": "THIRD_PROVIDER",
                "debitType": "D",
                "transactionAmount": amount,
                "executionType": "ONLINE",
                "concept": concept,
                "reference": "",
            },
        }

    return {
        "data": {
            "transaction": [
                transfer("30001001", Decimal("1500.5"), "ana@example.com", "Payroll November"),
                transfer("30001002", Decimal("250"), "luis@example.com", "Payroll November"),
            ]
        }
    }


def file_consent_example() -> Schema:
    """A valid A1 body: the FileHash is computed from the payload the way the bank checks it."""
    payload = file_payload_example()
    return {
        "Data": {
            "Initiation": {
                "SupplementaryData": payload,
                "FileType": FILE_TYPE,
                "FileHash": payload_hash(payload),
                "FileReference": "PAYROLL-2026-11",
                "NumberOfTransactions": "2",
                "ControlSum": Decimal("1750.5"),
            }
        }
    }


def vrp_consent_example() -> Schema:
    """A valid B1 body (sweeping, 500 GBP per payment, 1000 GBP per calendar month)."""
    return {
        "Data": {
            "ControlParameters": {
                "PSUAuthenticationMethods": ["UK.OBIE.SCA"],
                "VRPType": ["UK.OBIE.VRPType.Sweeping"],
                "ValidFromDateTime": "2026-01-01T00:00:00+00:00",
                "ValidToDateTime": "2036-12-31T23:59:59+00:00",
                "MaximumIndividualAmount": {"Amount": "500.00", "Currency": "GBP"},
                "PeriodicLimits": [
                    {"Amount": "1000.00", "Currency": "GBP", "PeriodType": "Month", "PeriodAlignment": "Calendar"}
                ],
            },
            "Initiation": {
                "CreditorAccount": {
                    "SchemeName": "UK.OBIE.SortCodeAccountNumber",
                    "Identification": "40400412345678",
                    "Name": "Ana Savings",
                }
            },
            "RemittanceInformation": {"Reference": "SWEEP-ANA", "Unstructured": "VRP - CUOTAS - Dispersion"},
        },
        "Risk": {},
    }


def _form_body(schema_name: str, example: Schema | None = None) -> Schema:
    media: Schema = {"schema": ref(schema_name)}
    if example is not None:
        media["examples"] = {"client_credentials": {"summary": "with Authorization: Basic", "value": example}}
    return {"required": True, "content": {FORM: media}}


BEARER: list[dict[str, list[str]]] = [{"bearerAuth": []}]
BASIC: list[dict[str, list[str]]] = [{"basicAuth": []}]
BASIC_OR_ASSERTION: list[dict[str, list[str]]] = [{"basicAuth": []}, {}]
NONE: list[dict[str, list[str]]] = [{}]


def _paths() -> dict[str, Schema]:
    cc_note = "Bearer: a client-credentials token (scope payments)."
    ac_note = "Bearer: the authorization-code token whose scope names this consent."
    return {
        "/.well-known/openid-configuration": {
            "get": {
                "operationId": "discovery",
                "summary": "E1. Discovery document",
                "tags": ["authorization server"],
                "security": BASIC,
                "responses": {
                    "200": _json(ref("DiscoveryDocument"), "the discovery document"),
                    **_oauth_errors("400"),
                },
            }
        },
        "/o3/v1.0/message-signature": {
            "get": {
                "operationId": "message-signature",
                "summary": "E2. Build a client assertion (PS256 JWT) from header, claims and a PEM key",
                "description": "A GET with a JSON body, as the spec describes it (OpenAPI 3.1 allows a body on"
                " GET). The answer is the signed JWT as a bare string. Prefer signing locally: this sends a"
                " private key over the network.",
                "tags": ["utility"],
                "security": NONE,
                "requestBody": _json_body("MessageSignatureRequest"),
                "responses": {
                    "200": _plain("the signed JWT (use as client_assertion)"),
                    **_text_errors("400"),
                },
            }
        },
        "/token": {
            "post": {
                "operationId": "token",
                "summary": "E3 client-credentials token, E6 authorization-code token, refresh grant",
                "description": "Client authentication: private_key_jwt (client_assertion_type + client_assertion,"
                " flow A) or `Authorization: Basic` (flow B). Client credentials: scope `payments openid`,"
                " answer expires_in 600 and scope `payments`. Authorization code: code, redirect_uri,"
                " code_verifier; answer scope `payments:<consent_id> openid`, refresh_token, expires_in 432000.",
                "tags": ["authorization server"],
                "security": BASIC_OR_ASSERTION,
                "requestBody": _form_body(
                    "TokenRequest", {"grand_type": "client_credentials", "scope": "payments openid"}
                ),
                "responses": {"200": _json(ref("TokenResponse"), "an access token"), **_oauth_errors("400")},
            }
        },
        "/par": {
            "post": {
                "operationId": "par",
                "summary": "E4. Pushed authorization request",
                "tags": ["authorization server"],
                "security": BASIC_OR_ASSERTION,
                "requestBody": _form_body("PARRequest"),
                "responses": {
                    "200": _json(ref("PARResponse"), "request_uri (300 s, single use)"),
                    **_oauth_errors("400"),
                },
            }
        },
        "/o3/v1.0/par-auth-code-url/{consent_id}": {
            "get": {
                "operationId": "authorization-url",
                "summary": "E5. The URL to send the approver to",
                "tags": ["utility"],
                "security": BASIC,
                "parameters": [
                    _p("ConsentId"),
                    {
                        "name": "request_uri",
                        "in": "query",
                        "required": True,
                        "schema": text(),
                        "description": "from PAR; missing: 400 general_error request_uri_not_specified",
                    },
                    {"name": "response_type", "in": "query", "required": True, "schema": {"const": "code"}},
                    {"name": "scope", "in": "query", "required": True, "schema": {"const": "payments"}},
                ],
                "responses": {
                    "200": {
                        "description": "the authorization URL ({issuer}/auth?client_id=...&request_uri=...)",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_oauth_errors("400"),
                },
            }
        },
        "/auth": {
            "get": {
                "operationId": "consent-page",
                "summary": "The approver's consent page (HTML, approve and reject forms)",
                "tags": ["consent page"],
                "security": NONE,
                "parameters": [
                    {"name": "client_id", "in": "query", "required": True, "schema": text()},
                    {"name": "request_uri", "in": "query", "required": True, "schema": text()},
                    {"name": "response_type", "in": "query", "required": True, "schema": {"const": "code"}},
                    {"name": "scope", "in": "query", "required": True, "schema": {"const": "payments"}},
                ],
                "responses": {
                    "200": {
                        "description": "the consent page",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    },
                    "400": {"description": "error page", "content": {"text/html": {"schema": {"type": "string"}}}},
                    **_text_errors(),
                },
            }
        },
        "/auth/decision": {
            "post": {
                "operationId": "consent-decision",
                "summary": "The approver's decision (the consent page's approve / reject forms)",
                "tags": ["consent page"],
                "security": NONE,
                "requestBody": _form_body("ConsentDecision"),
                "responses": {
                    "303": {
                        "description": "redirect to redirect_uri?code=...&state=...&iss=... (or error=access_denied)",
                        "headers": {"Location": {"schema": {"type": "string"}, "required": True}},
                    },
                    "400": {"description": "error page", "content": {"text/html": {"schema": {"type": "string"}}}},
                    **_text_errors(),
                },
            },
        },
        f"{RS}/file-payment-consents": {
            "post": {
                "operationId": "file-payment-consents.create",
                "summary": "A1. Create a file payment consent (status AwaitingUpload)",
                "description": cc_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("InteractionId"), _p("IdempotencyKey")],
                "requestBody": _json_body("FileConsentRequest", file_consent_example()),
                "responses": {
                    "201": _json(ref("FileConsentResponse"), "the consent", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/file-payment-consents/{{consent_id}}/file": {
            "post": {
                "operationId": "file-payment-consents.upload",
                "summary": "A2. Upload the file; verified against the consent (references = consent id)",
                "description": cc_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("ConsentId"), _p("InteractionId"), _p("IdempotencyKey")],
                "requestBody": _json_body("FilePayload"),
                "responses": {
                    "201": _json(ref("FileUploadResponse"), "file accepted", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/file-payment-consents/{{consent_id}}": {
            "get": {
                "operationId": "file-payment-consents.get",
                "summary": "A5. Read a file payment consent",
                "description": cc_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("ConsentId"), _p("InteractionId"), _p("FinancialId"), _p("CustomerIp")],
                "responses": {
                    "200": _json(ref("FileConsentResponse"), "the consent", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/file-payments": {
            "post": {
                "operationId": "file-payments.create",
                "summary": "A3. Create the file payment (one per Authorised consent; consent becomes Consumed)",
                "description": ac_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("InteractionId"), _p("FinancialId"), _p("CustomerIp"), _p("IdempotencyKey")],
                "requestBody": _json_body("FilePaymentRequest"),
                "responses": {
                    "201": _json(ref("FilePaymentResponse"), "the payment, InitiationPending", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/file-payments/{{file_payment_id}}": {
            "get": {
                "operationId": "file-payments.get",
                "summary": "A4. Read a file payment",
                "description": cc_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("FilePaymentId"), _p("InteractionId")],
                "responses": {
                    "200": _json(ref("FilePaymentResponse"), "the payment", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/file-payments/{{file_payment_id}}/report-file": {
            "get": {
                "operationId": "file-payments.report",
                "summary": "Per-transaction report of a file payment (Open Banking v3.1 report-file)",
                "description": cc_note,
                "tags": ["flow A: file payments"],
                "security": BEARER,
                "parameters": [_p("FilePaymentId"), _p("InteractionId")],
                "responses": {
                    "200": _json(ref("FilePaymentReport"), "the report", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/domestic-vrp-consents": {
            "post": {
                "operationId": "domestic-vrp-consents.create",
                "summary": "B1. Create a VRP consent (status AwaitingAuthorisation)",
                "description": cc_note,
                "tags": ["flow B: variable recurring payments"],
                "security": BEARER,
                "parameters": [_p("InteractionId"), _p("FinancialId"), _p("CustomerIp"), _p("IdempotencyKey")],
                "requestBody": _json_body("VRPConsentRequest", vrp_consent_example()),
                "responses": {
                    "201": _json(ref("VRPConsentResponse"), "the consent", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/domestic-vrp-consents/{{consent_id}}": {
            "get": {
                "operationId": "domestic-vrp-consents.get",
                "summary": "B3. Read a VRP consent",
                "description": cc_note + " The spec does not show the path; this is the consent's Links.Self.",
                "tags": ["flow B: variable recurring payments"],
                "security": BEARER,
                "parameters": [_p("ConsentId"), _p("InteractionId"), _p("FinancialId"), _p("CustomerIp")],
                "responses": {
                    "200": _json(ref("VRPConsentResponse"), "the consent", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/domestic-vrps": {
            "post": {
                "operationId": "domestic-vrps.create",
                "summary": "B2. Create a domestic VRP within the consent's control parameters",
                "description": ac_note + " A breach of a limit is 400 UK.OBIE.Rules.FailsControlParameters.",
                "tags": ["flow B: variable recurring payments"],
                "security": BEARER,
                "parameters": [_p("InteractionId"), _p("FinancialId"), _p("CustomerIp"), _p("IdempotencyKey")],
                "requestBody": _json_body("DomesticVRPRequest"),
                "responses": {
                    "201": _json(ref("DomesticVRPResponse"), "the payment, Pending", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        f"{RS}/domestic-vrps/{{domestic_vrp_id}}": {
            "get": {
                "operationId": "domestic-vrps.get",
                "summary": "Read a domestic VRP",
                "description": cc_note,
                "tags": ["flow B: variable recurring payments"],
                "security": BEARER,
                "parameters": [_p("DomesticVRPId"), _p("InteractionId"), _p("FinancialId"), _p("CustomerIp")],
                "responses": {
                    "200": _json(ref("DomesticVRPResponse"), "the payment", _INTERACTION_HEADER),
                    **_resource_errors("400", "401", "403"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["utility"],
                "security": NONE,
                "responses": {"200": _json({"type": "object"}, "the OpenAPI document"), **_resource_errors()},
            }
        },
    }


def build_document(base_url: str) -> dict[str, Any]:
    """The OpenAPI document of a sandbox served at `base_url`."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Sandbox bank: Payment Initiation Service",
            "version": "1.0.0",
            "description": "File payments (funds dispersion) and variable recurring payments, as the spec"
            " describes them. Issuer and resource server share the base address. Bodies are JSON except the"
            " token and PAR requests (form). Resource errors: {Code, Message, Errors[{ErrorCode, Message,"
            " Path?}]}; OAuth errors: {error, error_description}.",
        },
        "servers": [{"url": base_url.rstrip("/")}],
        "tags": [
            {"name": "authorization server"},
            {"name": "utility"},
            {"name": "consent page"},
            {"name": "flow A: file payments"},
            {"name": "flow B: variable recurring payments"},
        ],
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "parameters": _parameters(),
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "description": "an access token from /token"},
                "basicAuth": {"type": "http", "scheme": "basic", "description": "base64(client_id:client_secret)"},
            },
        },
    }


def routes(bank: Bank) -> list[BaseRoute]:
    """`GET /openapi.json`."""
    document = build_document(bank.config.issuer)

    async def serve(request: Request) -> Response:
        return json_response(document, 200, request)

    return [Route("/openapi.json", serve, methods=["GET"], name="openapi")]
