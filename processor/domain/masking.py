"""How an account number is shown in logs, command output and pages: its last four characters only; and how a
record or a header read back for a person (a dead letter) is shown: accounts masked, credentials redacted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keys whose value is an account number: ours (`account_number`), the VRP creditor's (`identification` inside
# `creditor_account`/`debtor_account`), and the usual spellings a foreign record may use.
ACCOUNT_KEYS = frozenset({"account_number", "identification", "iban", "account", "creditor_account_number"})
# Headers whose value is a credential (matched on the lower-cased name; any name holding one of these words).
_CREDENTIAL_WORDS = ("authorization", "token", "secret", "password", "cookie", "api-key", "apikey", "signature")
REDACTED = "[redacted]"


def mask_account(value: object) -> str:
    """`****` and the last four characters (`****0301`); `?` when there is no number. The length is not shown."""
    text = "" if value is None else str(value)
    if not text:
        return "?"
    return "****" + text[-4:]


def masked_record(value: Any) -> Any:
    """A decoded record with every account number masked (`****0301`), at any depth: the keys of `ACCOUNT_KEYS`,
    and every text of a `*_account` table (a VRP `creditor_account`), except its `name` and `scheme_name`."""
    if isinstance(value, Mapping):
        shown: dict[Any, Any] = {}
        for key, item in value.items():
            name = str(key).lower()
            if name in ACCOUNT_KEYS and not isinstance(item, Mapping | list):
                shown[key] = mask_account(item) if item is not None else None
            elif name.endswith("_account") and isinstance(item, str):
                shown[key] = mask_account(item)
            else:
                shown[key] = masked_record(item)
        return shown
    if isinstance(value, list):
        return [masked_record(item) for item in value]
    return value


def shown_header(name: str, value: str) -> str:
    """A message header's value as a page shows it: `[redacted]` for a credential (`authorization: Bearer ...`,
    a token, a cookie, a signature), else as it is."""
    lowered = name.lower()
    if any(word in lowered for word in _CREDENTIAL_WORDS) or value.lower().startswith(("bearer ", "basic ")):
        return REDACTED
    return value
