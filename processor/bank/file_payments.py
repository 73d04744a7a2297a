"""Flow A's operations of the bank client: file payment consents, the upload, file payments, the report,
and reading back the outcome of an ambiguous upload or payment (A1-A5, report-file)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from processor.bank import errors
from processor.bank.calls import PISP, BankCalls, Body, path_segment
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

Initiation = Mapping[str, Any] | bytes | tuple[bytes, ...]
"""`Data.Initiation` of A1 and A3: data with Decimal amounts, its JSON bytes, or its JSON bytes in parts (e.g.
`FilePayload.initiation_parts()`: a large file is then copied once, into the request body, and never
re-serialised)."""


class FilePayments(BankCalls):
    """A1-A5 and the report file, over the client's resource calls."""

    # -- flow A --------------------------------------------------------------------------------------------

    async def create_file_consent(
        self, initiation: Initiation, *, idempotency_key: str, echo_file: bool = True
    ) -> FileConsent:
        """A1: create a file payment consent (`initiation`: see `Initiation`).

        `echo_file=False`: the answer's `Initiation.SupplementaryData` (the bank's echo of the whole file) is
        skipped and reads as None (see `models.loads_echo`): for 100,000 transfers the answer is then never
        whole as text (39-78 MiB) or objects (about 135 MiB). The same option exists on A3, A4 and A5."""
        op = "A1 create file-payment-consent"
        body = _initiation_body({}, initiation)
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
        initiation: Initiation,
        *,
        access_token: str,
        idempotency_key: str,
        customer_ip: str | None = None,
        echo_file: bool = True,
    ) -> FilePayment:
        """A3: create the file payment with the consent's auth-code token; Initiation (data or JSON bytes, as
        for A1) must equal the consent's."""
        op = "A3 create file-payment"
        body = _initiation_body({"ConsentId": consent_id}, initiation)
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
        initiation: Initiation,
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


def _loader(echo_file: bool) -> Callable[[bytes | bytearray], Any]:
    """How to parse a file consent or payment answer: whole, or without the echoed file's transfers."""
    return loads if echo_file else loads_echo


def _initiation_body(members: dict[str, str], initiation: Initiation) -> Body:
    """`{"Data": {**members, "Initiation": initiation}}`, checked now and given to each attempt in parts (the client
    sends them one after the other). An Initiation given as data is checked and serialised by `dumps`; as JSON
    bytes or parts, checked to start one JSON object, then embedded as it is: a large file (about 40 MB for
    100,000 transfers) is sent from the bytes the caller holds, never copied into one body."""
    parts = (initiation,) if isinstance(initiation, bytes) else initiation
    if isinstance(parts, tuple):
        if not parts or not parts[0].lstrip().startswith(b"{"):
            raise TypeError("a JSON body part given as bytes must be a JSON object")
        # The members before it serialised by orjson with a null Initiation, which the parts replace: the same
        # bytes orjson writes around a Fragment, and the file joined once.
        head = orjson.dumps({"Data": {**members, "Initiation": None}})
        pieces = (head[: -len(b"null}}")], *parts, b"}}")
    else:
        pieces = (orjson.dumps({"Data": {**members, "Initiation": orjson.Fragment(dumps(parts))}}),)

    async def build() -> tuple[bytes, ...]:
        return pieces

    return build
