"""The consent page's HTML (pure rendering): what the approver agrees to.

For a file consent the file reference, the number of transactions, the total and its currency (and the
transfers); for a VRP mandate the creditor, the limits and the validity. Approve and Reject are two forms
(buttons `#approve` and `#reject`) posting the request_uri. Every value placed in the HTML is escaped.
The routes that serve it are in sandbox/routes/consent_page.py.
"""

from __future__ import annotations

import functools
import html
from decimal import Decimal, InvalidOperation
from importlib import resources
from string import Template
from typing import Any

from sandbox.consents import FILE_KIND

MAX_LISTED_TRANSFERS = 25


class PageError(Exception):
    """A request the page cannot serve; shown to the person as an HTML error page with 400."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(message)
        self.title = title
        self.message = message


@functools.cache
def template(name: str) -> Template:
    """A page template shipped in sandbox/templates."""
    return Template(resources.files("sandbox").joinpath("templates", name).read_text(encoding="utf-8"))


def esc(value: object) -> str:
    """HTML-escape any value (attribute-safe)."""
    return html.escape("" if value is None else str(value), quote=True)


def format_amount(value: object) -> str:
    """An amount for people: thousands separators, two decimals unless it has more."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)
    if not number.is_finite():
        return str(value)
    exponent = number.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2:
        return f"{number:,f}"
    return f"{number:,.2f}"


def _get(obj: object, *path: str | int) -> Any:
    """Walk dicts and lists; None when any step is missing."""
    for step in path:
        if isinstance(step, int) and isinstance(obj, list) and -len(obj) <= step < len(obj):
            obj = obj[step]
        elif isinstance(step, str) and isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
    return obj


def _summary(rows: list[tuple[str, str, str | None]]) -> str:
    """A <dl> of (label, already-escaped value html, element id)."""
    items = []
    for label, value_html, element_id in rows:
        ident = f' id="{esc(element_id)}"' if element_id else ""
        items.append(f"<dt>{esc(label)}</dt><dd{ident}>{value_html}</dd>")
    return '<dl class="summary">' + "".join(items) + "</dl>"


def file_consent_details(data: dict[str, Any]) -> str:
    """What a file payment consent commits to: reference, count, total and currency, and its transfers."""
    initiation = _get(data, "Initiation") or {}
    transactions = _get(initiation, "SupplementaryData", "data", "transaction")
    transactions = transactions if isinstance(transactions, list) else []
    currency = _get(transactions, 0, "originAccount", "currency") or "(currency not stated)"
    origin = _get(transactions, 0, "originAccount", "accountNumber")
    total = f"{esc(format_amount(_get(initiation, 'ControlSum')))} {esc(currency)}"
    rows: list[tuple[str, str, str | None]] = [
        ("File reference", f'<span class="figure">{esc(_get(initiation, "FileReference"))}</span>', "file-reference"),
        (
            "Number of transactions",
            f'<span class="figure">{esc(_get(initiation, "NumberOfTransactions"))}</span>',
            "number-of-transactions",
        ),
        ("Total", f'<span class="figure">{total}</span>', "control-sum"),
        ("Currency", esc(currency), "currency"),
        ("From account", esc(origin or "(not stated)"), "origin-account"),
        ("File type", esc(_get(initiation, "FileType")), None),
    ]
    parts = ["<h2>Funds dispersion (file payment)</h2>", _summary(rows)]
    if transactions:
        lines = []
        for i, tx in enumerate(transactions[:MAX_LISTED_TRANSFERS], start=1):
            amount = format_amount(_get(tx, "transferInfo", "transactionAmount"))
            lines.append(
                f"<tr><td>{i}</td><td>{esc(_get(tx, 'destinationAccount', 'accountNumber'))}</td>"
                f"<td>{esc(_get(tx, 'destinationAccount', 'email'))}</td>"
                f"<td>{esc(_get(tx, 'transferInfo', 'concept'))}</td>"
                f'<td class="amount">{esc(amount)} {esc(_get(tx, "destinationAccount", "currency"))}</td></tr>'
            )
        parts.append(
            '<h2>Transfers</h2><table id="transfers"><thead><tr><th>#</th><th>To account</th><th>Holder e-mail</th>'
            '<th>Concept</th><th class="amount">Amount</th></tr></thead><tbody>' + "".join(lines) + "</tbody></table>"
        )
        if len(transactions) > MAX_LISTED_TRANSFERS:
            more = len(transactions) - MAX_LISTED_TRANSFERS
            parts.append(f'<p class="note">… and {more} more transfers, included in the total above.</p>')
    return "".join(parts)


def _money(obj: object) -> str:
    return f"{format_amount(_get(obj, 'Amount'))} {_get(obj, 'Currency') or ''}".strip()


def vrp_consent_details(data: dict[str, Any]) -> str:
    """What a VRP mandate commits to: the creditor, the per-payment and periodic limits, the validity."""
    control = _get(data, "ControlParameters") or {}
    creditor = _get(data, "Initiation", "CreditorAccount") or {}
    validity = (
        f"{esc(_get(control, 'ValidFromDateTime') or '(open)')} to {esc(_get(control, 'ValidToDateTime') or '(open)')}"
    )
    vrp_types = _get(control, "VRPType")
    rows: list[tuple[str, str, str | None]] = [
        ("Pay to", f'<span class="figure">{esc(_get(creditor, "Name"))}</span>', "creditor-name"),
        ("Creditor account", f"{esc(_get(creditor, 'Identification'))} ({esc(_get(creditor, 'SchemeName'))})", None),
        (
            "Maximum per payment",
            f'<span class="figure">{esc(_money(_get(control, "MaximumIndividualAmount")))}</span>',
            "maximum-individual-amount",
        ),
        ("Valid", validity, "validity"),
        ("Type", esc(", ".join(map(str, vrp_types)) if isinstance(vrp_types, list) else vrp_types), None),
        ("Reference", esc(_get(data, "RemittanceInformation", "Reference")), None),
        ("Description", esc(_get(data, "RemittanceInformation", "Unstructured")), None),
    ]
    parts = ["<h2>Variable recurring payments (sweeping mandate)</h2>", _summary(rows)]
    limits = _get(control, "PeriodicLimits")
    if isinstance(limits, list) and limits:
        lines = [
            f"<tr><td>{esc(_get(limit, 'PeriodType'))}</td><td>{esc(_get(limit, 'PeriodAlignment'))}</td>"
            f'<td class="amount">{esc(_money(limit))}</td></tr>'
            for limit in limits
        ]
        parts.append(
            '<h2>Limits per period</h2><table id="periodic-limits"><thead><tr><th>Period</th><th>Counted from</th>'
            '<th class="amount">At most</th></tr></thead><tbody>' + "".join(lines) + "</tbody></table>"
        )
    else:
        parts.append('<p class="note" id="periodic-limits">No limits per period.</p>')
    return "".join(parts)


def render_consent_page(
    client_name: str, consent_id: str, kind: str, data: dict[str, Any], request_uri: str, action: str, expires: str
) -> str:
    """The full consent page."""
    is_file = kind == FILE_KIND
    details = file_consent_details(data) if is_file else vrp_consent_details(data)
    title = "Authorise a funds dispersion" if is_file else "Authorise variable recurring payments"
    return template("consent.html").substitute(
        title=esc(title),
        client_name=esc(client_name),
        consent_id=esc(consent_id),
        details=details,
        action=esc(action),
        request_uri=esc(request_uri),
        expires_at=esc(expires),
    )


def render_error_page(title: str, message: str) -> str:
    """The page shown for a request that cannot be served."""
    return template("error.html").substitute(title=esc(title), message=esc(message))
