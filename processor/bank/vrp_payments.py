"""Flow B's operations of the bank client: domestic VRP consents and payments (B1-B3, the VRP read), and the
request bodies they send."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from processor.bank.calls import PISP, BankCalls, path_segment
from processor.bank.models import DomesticVrp, VrpConsent, dumps
from processor.domain.vrp_requests import SCA, SWEEPING


class VrpPayments(BankCalls):
    """B1-B3 and the domestic VRP read, over the client's resource calls."""

    # -- flow B --------------------------------------------------------------------------------------------

    async def create_vrp_consent(
        self, body: bytes, *, idempotency_key: str, customer_ip: str | None = None
    ) -> VrpConsent:
        """B1: create a domestic VRP consent (sweeping mandate) from its exact request bytes (`vrp_consent_body`;
        a resumed call sends the bytes its first attempt sent)."""
        op = "B1 create domestic-vrp-consent"
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/domestic-vrp-consents",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: VrpConsent.parse(b, reply.interaction_id))

    async def create_domestic_vrp(
        self, body: bytes, *, access_token: str, idempotency_key: str, customer_ip: str | None = None
    ) -> DomesticVrp:
        """B2: create a domestic VRP under an authorised consent, with that consent's auth-code token, from its exact
        request bytes (`domestic_vrp_body`; a resumed call sends the bytes its first attempt sent)."""
        op = "B2 create domestic-vrp"
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/domestic-vrps",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            token=access_token,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: DomesticVrp.parse(b, reply.interaction_id))

    async def get_vrp_consent(self, consent_id: str, *, customer_ip: str | None = None) -> VrpConsent:
        """B3: read a domestic VRP consent."""
        op = "B3 get domestic-vrp-consent"
        reply = await self._resource(
            op, "GET", f"{PISP}/domestic-vrp-consents/{path_segment(consent_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: VrpConsent.parse(b, reply.interaction_id))

    async def get_domestic_vrp(self, domestic_vrp_id: str, *, customer_ip: str | None = None) -> DomesticVrp:
        """GET domestic-vrps/{id}: read a domestic VRP."""
        op = "get domestic-vrp"
        reply = await self._resource(
            op, "GET", f"{PISP}/domestic-vrps/{path_segment(domestic_vrp_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: DomesticVrp.parse(b, reply.interaction_id))


def vrp_consent_body(
    control_parameters: Mapping[str, Any],
    initiation: Mapping[str, Any],
    remittance_information: Mapping[str, Any],
    risk: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON bytes of a B1 request."""
    data = {
        "ControlParameters": control_parameters,
        "Initiation": initiation,
        "RemittanceInformation": remittance_information,
    }
    return dumps({"Data": data, "Risk": dict(risk or {})})


def domestic_vrp_body(
    consent_id: str,
    initiation: Mapping[str, Any],
    instruction: Mapping[str, Any],
    psu_authentication_method: str = SCA,
    vrp_type: str = SWEEPING,
    risk: Mapping[str, Any] | None = None,
) -> bytes:
    """The JSON bytes of a B2 request."""
    data = {
        "ConsentId": consent_id,
        "Initiation": initiation,
        "PSUAuthenticationMethod": psu_authentication_method,
        "VRPType": vrp_type,
        "Instruction": instruction,
    }
    return dumps({"Data": data, "Risk": dict(risk or {})})
