"""Discovery (E1): the document of the spec's table, addresses built from the issuer."""

from __future__ import annotations

from typing import Any

from sandbox.errors import OAuthError
from sandbox.oauth.answer import OAuthAnswer
from sandbox.oauth.client_auth import authenticate_basic
from sandbox.state import Bank

_ALGS = ["none", "PS256", "RS256", "HS256"]
_GRANT_TYPES = (
    "authorization_code",
    "client_credentials",
    "refresh_token",
    "urn:ietf:params:oauth:grant-type:jwt-bearer",
    "urn:openid:params:grant-type:ciba",
)
_SCOPES = (
    "openid",
    "accounts",
    "payments",
    "fundsconfirmations",
    "consents",
    "resources",
    "credit-cards-accounts",
    "customers",
    "loans",
    "financings",
    "invoice-financings",
    "unarranged-accounts-overdraft",
    "consumption",
    "lg",
    "recurring-payments",
    "bank-fixed-incomes",
    "recurring-consent",
)
_TOKEN_AUTH_METHODS = (
    "client_secret_basic",
    "client_secret_jwt",
    "tls_client_auth",
    "private_key_jwt",
)


def discovery_document(issuer: str) -> dict[str, Any]:
    """The discovery document of the spec's table, addresses built from the issuer."""
    issuer = issuer.rstrip("/")
    token = f"{issuer}/token"
    revoke = f"{issuer}/token/revoke"
    introspect = f"{issuer}/introspection"
    par = f"{issuer}/par"
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": token,
        "pushed_authorization_request_endpoint": par,
        "registration_endpoint": f"{issuer}/dynamic-client-registration/v3.2/register",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "userinfo_endpoint": f"{issuer}/userinfo",
        "introspection_endpoint": introspect,
        "revocation_endpoint": revoke,
        "backchannel_authentication_endpoint": f"{issuer}/bc-authorize",
        "claims_parameter_supported": True,
        "claims_supported": ["openbanking_intent_id", "acr"],
        "grant_types_supported": list(_GRANT_TYPES),
        "response_types_supported": ["code", "code id_token"],
        "request_parameter_supported": True,
        "request_uri_parameter_supported": False,
        "require_request_uri_registration": True,
        "scopes_supported": list(_SCOPES),
        "token_endpoint_auth_methods_supported": list(_TOKEN_AUTH_METHODS),
        "tls_client_certificate_bound_access_tokens": True,
        # Empty, as in the spec, although PAR requires code_challenge_method=S256.
        "code_challenge_methods_supported": [],
        "claim_types_supported": ["normal"],
        "subject_types_supported": ["public"],
        "backchannel_token_delivery_modes_supported": ["poll", "ping", "push"],
        "backchannel_authentication_request_signing_alg_values_supported": list(_ALGS),
        "id_token_signing_alg_values_supported": list(_ALGS),
        "request_object_signing_alg_values_supported": list(_ALGS),
        "token_endpoint_auth_signing_alg_values_supported": list(_ALGS),
        "userinfo_signing_alg_values_supported": ["PS256", "RS256", "HS256", "none"],
        "backchannel_user_code_parameter_supported": False,
        "request_object_encryption_alg_values_supported": ["RSA-OAEP"],
        "request_object_encryption_enc_values_supported": ["A256GCM"],
        "id_token_encryption_alg_values_supported": ["RSA-OAEP-256"],
        "id_token_encryption_enc_values_supported": ["A128CBC-HS256"],
        "acr_values_supported": [],
        "authorization_details_types_supported": [],
        "authorization_signing_alg_values_supported": [],
        "authorization_encryption_alg_values_supported": [],
        "authorization_encryption_enc_values_supported": [],
        "userinfo_encryption_alg_values_supported": [],
        "userinfo_encryption_enc_values_supported": [],
        "response_modes_supported": ["query", "fragment"],
        # Not in the spec's table, but every redirect of this bank carries `iss` (RFC 9207): say so, so that a
        # client refuses a redirect without it (a mix-up attack strips it).
        "authorization_response_iss_parameter_supported": True,
        "mtls_endpoint_aliases": {
            "token_endpoint": token,
            "revocation_endpoint": revoke,
            "introspection_endpoint": introspect,
            "pushed_authorization_request_endpoint": par,
        },
    }


def discovery(bank: Bank, authorization: str | None) -> OAuthAnswer:
    """E1: the discovery document, for a client authenticated with `Authorization: Basic`."""
    try:
        authenticate_basic(bank, authorization)
    except OAuthError as exc:
        return OAuthAnswer.of_error(exc)
    return OAuthAnswer.json(discovery_document(bank.config.issuer))
