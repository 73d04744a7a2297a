"""Flow A's operations of the bank client: file payment consents, the upload, file payments, the report,
and reading back the outcome of an ambiguous upload or payment (A1-A5, report-file)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from processor.bank import errors
from processor.bank.calls import PISP, BankCalls, path_segment
from processor.bank.models import (
    FileConsent,
    FilePayment,
    FilePaymentReport,
    FileUpload,
    ModelError,
    dumps,
    loads,
    loads_echo,
)


class FilePayments(BankCalls):
    """A1-A5 and the report file, over the client's resource calls."""

    # -- flow A --------------------------------------------------------------------------------------------

    async def create_file_consent(
        self, initiation: Mapping[str, Any] | bytes, *, idempotency_key: str, echo_file: bool = True
    ) -> FileConsent:
        """A1: create a file payment consent (`Data.Initiation` as data with Decimal amounts, or as its JSON
        bytes, e.g. `FilePayload.initiation_json()`, which spares re-serialising a large file).

        `echo_file=False`: the answer's `Initiation.SupplementaryData` (the bank's echo of the whole file) is
        read without keeping its transfers (each becomes None; see `models.loads_echo`), which spares about
        135 MiB for 100,000 transfers. The same option exists on A3, A4 and A5."""
        op = "A1 create file-payment-consent"
        body = orjson.dumps({"Data": {"Initiation": _json_part(initiation)}})
        reply = await self._resource(
            op, "POST", f"{PISP}/file-payment-consents", fapi=False, body=body, idempotency_key=idempotency_key
        )
        return self._parse(op, reply, lambda b: FileConsent.parse(b, reply.interaction_id), _loader(echo_file))

    async def upload_file(
        self, consent_id: str, payload: Mapping[str, Any] | bytes, *, idempotency_key: str
    ) -> FileUpload:
        """A2: upload the file (`payload` as JSON-ready data, or its exact bytes) to the consent."""
        op = "A2 upload file"
        body = payload if isinstance(payload, bytes) else dumps(payload)
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/file-payment-consents/{path_segment(consent_id)}/file",
            fapi=False,
            body=body,
            idempotency_key=idempotency_key,
        )
        return self._parse(op, reply, lambda b: FileUpload.parse(b, reply.interaction_id))

    async def create_file_payment(
        self,
        consent_id: str,
        initiation: Mapping[str, Any] | bytes,
        *,
        access_token: str,
        idempotency_key: str,
        customer_ip: str | None = None,
        echo_file: bool = True,
    ) -> FilePayment:
        """A3: create the file payment with the consent's auth-code token; Initiation (data or JSON bytes, as
        for A1) must equal the consent's."""
        op = "A3 create file-payment"
        body = orjson.dumps({"Data": {"ConsentId": consent_id, "Initiation": _json_part(initiation)}})
        reply = await self._resource(
            op,
            "POST",
            f"{PISP}/file-payments",
            fapi=True,
            body=body,
            idempotency_key=idempotency_key,
            token=access_token,
            customer_ip=customer_ip,
        )
        return self._parse(op, reply, lambda b: FilePayment.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_payment(self, file_payment_id: str, *, echo_file: bool = True) -> FilePayment:
        """A4: read a file payment (status InitiationPending / InitiationCompleted / InitiationFailed)."""
        op = "A4 get file-payment"
        reply = await self._resource(op, "GET", f"{PISP}/file-payments/{path_segment(file_payment_id)}", fapi=False)
        return self._parse(op, reply, lambda b: FilePayment.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_consent(
        self, consent_id: str, *, customer_ip: str | None = None, echo_file: bool = True
    ) -> FileConsent:
        """A5: read a file payment consent."""
        op = "A5 get file-payment-consent"
        reply = await self._resource(
            op, "GET", f"{PISP}/file-payment-consents/{path_segment(consent_id)}", fapi=True, customer_ip=customer_ip
        )
        return self._parse(op, reply, lambda b: FileConsent.parse(b, reply.interaction_id), _loader(echo_file))

    async def get_file_payment_report(self, file_payment_id: str) -> FilePaymentReport:
        """GET file-payments/{id}/report-file: the per-transaction report (parsed when JSON)."""
        op = "get file-payment report-file"
        reply = await self._resource(
            op, "GET", f"{PISP}/file-payments/{path_segment(file_payment_id)}/report-file", fapi=False
        )
        content_type = reply.headers.get("content-type", "")
        try:
            return FilePaymentReport.parse(file_payment_id, content_type, reply.body, reply.interaction_id)
        except ModelError as exc:
            raise errors.ProtocolError(
                f"unexpected report: {exc}", status=reply.status, operation=op, interaction_id=reply.interaction_id
            ) from None

    # -- resolving an ambiguous outcome by reading ---------------------------------------------------------

    async def upload_landed(self, consent_id: str) -> bool:
        """After an ambiguous A2: whether the bank accepted the file (the consent left AwaitingUpload)."""
        consent = await self.get_file_consent(consent_id, echo_file=False)
        return consent.status != "AwaitingUpload"

    async def find_file_payment(
        self,
        consent_id: str,
        initiation: Mapping[str, Any] | bytes,
        *,
        access_token: str,
        idempotency_key: str,
        echo_file: bool = True,
    ) -> FilePayment | None:
        """After an ambiguous A3: the payment if the consent shows one was created, else None.

        A consent is `Consumed` once its payment exists; the payment's id is then recovered by repeating A3
        with the same key and body, which the bank answers with the payment it already created. None means
        no payment exists yet, so A3 may be sent (with that same key).
        """
        consent = await self.get_file_consent(consent_id, echo_file=False)  # only its status is read
        if consent.status != "Consumed":
            return None
        return await self.create_file_payment(
            consent_id, initiation, access_token=access_token, idempotency_key=idempotency_key, echo_file=echo_file
        )


def _loader(echo_file: bool) -> Callable[[bytes], Any]:
    """How to parse a file consent or payment answer: whole, or without the echoed file's transfers."""
    return loads if echo_file else loads_echo


def _json_part(value: Mapping[str, Any] | bytes) -> orjson.Fragment:
    """A body part given as data (checked and serialised by `dumps`) or as JSON bytes (checked to be one JSON
    object, then embedded as they are)."""
    if isinstance(value, bytes):
        if not value.lstrip().startswith(b"{"):
            raise TypeError("a JSON body part given as bytes must be a JSON object")
        return orjson.Fragment(value)
    return orjson.Fragment(dumps(value))
