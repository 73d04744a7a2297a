"""Approve (or reject) a batch the way the company's approver does in a browser, without a browser.

    result = approve("http://127.0.0.1:8600/approve/file/ID?t=...")          # or decision="reject"
    result.callback_status  # 200: our callback API received the bank's redirect

The steps: open our approval link (it pushes a fresh authorization request to the bank and redirects, 302, to
the bank's consent page), follow the redirects to the consent page, find the form whose submit button carries the
wanted decision (`<button name="decision" value="approve">`), post it with its hidden fields
(`application/x-www-form-urlencoded`) *without* following the answer, and deliver the bank's redirect
(`Location: <redirect_uri>?code=...&state=...&iss=...`) to our callback API with a GET, as the browser would.

A `request_uri` on the consent page is single use: when a step fails after the form was posted, open the approval
link again (a new call to `approve`) rather than re-posting the page.

`decide` stops before the delivery and returns the bank's redirect, for a harness that delivers it itself (to another
instance behind the load balancer, again after a failure: benchmarks/chaos.py).

The HTML part (`parse_forms`, `decision_form`, `decision_post`) is pure: the tests' and benchmarks' approvers (sync
and async clients) use it to press the consent page's buttons. Used by `dispersion demo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Final, Literal
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

Decision = Literal["approve", "reject"]
DECISIONS: Final[tuple[Decision, ...]] = ("approve", "reject")
DEFAULT_TIMEOUT: Final = 30.0
# What a browser says it accepts: the callback API answers it with a page rather than JSON.
BROWSER_HEADERS: Final = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


class ApprovalError(RuntimeError):
    """A step of the approval did not go as a browser would expect; the message says which and why."""


@dataclass(frozen=True)
class Button:
    """A submit button (or `<input type="submit">`) of a form: what it adds to the posted fields."""

    name: str
    value: str
    label: str = ""
    element_id: str = ""


@dataclass(frozen=True)
class Form:
    """One HTML form: where it posts, its hidden and text fields, its submit buttons."""

    action: str
    method: str = "get"
    fields: dict[str, str] = field(default_factory=dict)
    buttons: tuple[Button, ...] = ()

    def button_for(self, decision: str) -> Button | None:
        """The button whose value, id or label is `decision` (case-insensitive), if any."""
        wanted = decision.strip().lower()
        for button in self.buttons:
            if wanted in (button.value.lower(), button.element_id.lower(), button.label.strip().lower()):
                return button
        return None

    def submission(self, button: Button) -> dict[str, str]:
        """The fields a browser posts when `button` is pressed."""
        data = dict(self.fields)
        if button.name:
            data[button.name] = button.value
        return data


class _FormParser(HTMLParser):
    """Collects forms with their hidden/text inputs and submit buttons (labels of `<button>` included)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[tuple[str, str, dict[str, str], list[Button]]] = []
        self._in_form = False
        self._button: dict[str, str] | None = None
        self._label: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((a.get("action", ""), (a.get("method") or "get").lower(), {}, []))
            self._in_form = True
            return
        if not self._in_form:
            return
        _, _, inputs, buttons = self.forms[-1]
        kind = a.get("type", "").lower()
        if tag == "input" and kind == "submit":
            buttons.append(Button(a.get("name", ""), a.get("value", ""), a.get("value", ""), a.get("id", "")))
        elif tag == "input" and a.get("name") and kind in ("", "hidden", "text", "email", "password"):
            inputs[a["name"]] = a.get("value", "")
        elif tag == "button" and kind in ("", "submit"):
            self._button = a
            self._label = []

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._label.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "button" and self._button is not None and self.forms:
            a = self._button
            label = " ".join("".join(self._label).split())
            self.forms[-1][3].append(Button(a.get("name", ""), a.get("value", ""), label, a.get("id", "")))
            self._button = None
        elif tag == "form":
            self._in_form = False


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "title", "head"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "title", "head") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def page_text(html: str) -> str:
    """The visible text of an HTML page (no head, scripts or styles), whitespace collapsed."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())


def parse_forms(html: str) -> list[Form]:
    """Every form of an HTML page, in document order."""
    parser = _FormParser()
    parser.feed(html)
    parser.close()
    return [Form(action, method, inputs, tuple(buttons)) for action, method, inputs, buttons in parser.forms]


def decision_form(html: str, decision: str) -> tuple[Form, dict[str, str]]:
    """The form of the consent page that carries `decision` and the fields to post for it.

    Raises `ApprovalError` when the page has no such form or it does not post (e.g. an error page).
    """
    forms = parse_forms(html)
    for form in forms:
        button = form.button_for(decision)
        if button is not None:
            if form.method != "post":
                raise ApprovalError(f"the {decision!r} form uses method {form.method.upper()}, expected POST")
            return form, form.submission(button)
    offered = sorted({b.value or b.label for f in forms for b in f.buttons})
    raise ApprovalError(
        f"the consent page has no {decision!r} button"
        + (f" (it offers: {', '.join(offered)})" if offered else " (no form with a submit button: not a consent page?)")
    )


def decision_post(page_url: str, html: str, decision: str) -> tuple[str, dict[str, str]]:
    """Where and what a browser posts when `decision` is pressed on the consent page at `page_url`: the form's
    absolute action URL and its fields. Raises `ApprovalError` as `decision_form` does."""
    form, data = decision_form(html, decision)
    return urljoin(page_url, form.action or page_url), data


@dataclass(frozen=True)
class ApprovalResult:
    """What the approver's browser went through. `redirect` carries the one-time authorization code: keep it out of
    logs (`str()` of this object leaves it out)."""

    decision: str
    consent_page: str  # the bank's consent page URL (after redirects)
    redirect: str = field(repr=False)  # the bank's redirect back to our callback API
    callback_url: str = field(repr=False)  # `redirect` without its query (safe to print)
    callback_status: int = 0  # our callback API's answer to the browser
    callback_text: str = ""
    outcome: dict[str, str] = field(default_factory=dict, repr=False)  # the redirect's query parameters

    @property
    def ok(self) -> bool:
        """The callback API accepted the redirect."""
        return 200 <= self.callback_status < 300

    @property
    def error(self) -> str | None:
        """The redirect's `error` parameter (`access_denied` after a rejection), if any."""
        return self.outcome.get("error")


def _check(response: httpx.Response, step: str) -> None:
    if response.status_code >= 400:
        body = " ".join(response.text.split())[:300]
        raise ApprovalError(f"{step}: HTTP {response.status_code} from {_safe(str(response.url))}: {body}")


def _safe(url: str) -> str:
    """A URL without its query string (which may hold tokens or codes)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


@dataclass(frozen=True)
class DecidedPage:
    """The approver pressed a button on the bank's consent page; the bank's redirect is not delivered yet. `redirect`
    carries the one-time authorization code: keep it out of logs (`str()` of this object leaves it out)."""

    decision: str
    consent_page: str  # the bank's consent page URL (after redirects), without its query
    redirect: str = field(repr=False)  # the bank's redirect back to our callback API

    @property
    def outcome(self) -> dict[str, str]:
        """The redirect's query parameters (`code`, `state`, `iss`, or `error`)."""
        return {k: v[0] for k, v in parse_qs(urlsplit(self.redirect).query).items() if v}


def decide(link: str, *, decision: str = "approve", client: httpx.Client) -> DecidedPage:
    """Open the approval `link` and press `decision` on the bank's consent page, without delivering the bank's
    redirect (a harness delivers it itself, e.g. to another instance behind the load balancer). Raises
    `ApprovalError` when a step fails (the message names the step; no secret is in it)."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    try:
        page = client.get(link, follow_redirects=True, headers=BROWSER_HEADERS)
    except httpx.HTTPError as exc:
        raise ApprovalError(f"opening the approval link {_safe(link)}: {exc!r}") from exc
    _check(page, "opening the approval link")
    page_url = str(page.url)
    target, data = decision_post(page_url, page.text, decision)
    try:
        answer = client.post(target, data=data, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ApprovalError(f"posting the {decision!r} form to {_safe(target)}: {exc!r}") from exc
    _check(answer, f"posting the {decision!r} form")
    location = answer.headers.get("location")
    if answer.status_code not in (301, 302, 303, 307) or not location:
        raise ApprovalError(
            f"posting the {decision!r} form: expected a redirect, got HTTP {answer.status_code} from {_safe(target)}"
        )
    return DecidedPage(decision, _safe(page_url), urljoin(target, location))


def approve(
    link: str,
    *,
    decision: str = "approve",
    client: httpx.Client | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ApprovalResult:
    """Open the approval `link`, press `decision` (``approve`` or ``reject``) on the bank's consent page and deliver
    the bank's redirect to our callback API; what happened. Raises `ApprovalError` when a step fails (the message
    names the step; no secret is in it)."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    own = client is None
    http = client or httpx.Client(timeout=timeout)
    try:
        decided = decide(link, decision=decision, client=http)
        redirect = decided.redirect
        try:
            delivered = http.get(redirect, follow_redirects=True, headers=BROWSER_HEADERS)
        except httpx.HTTPError as exc:
            raise ApprovalError(f"delivering the bank's redirect to {_safe(redirect)}: {exc!r}") from exc
        _check(delivered, "delivering the bank's redirect")
        return ApprovalResult(
            decision=decision,
            consent_page=decided.consent_page,
            redirect=redirect,
            callback_url=_safe(redirect),
            callback_status=delivered.status_code,
            callback_text=page_text(delivered.text)[:200],
            outcome=decided.outcome,
        )
    finally:
        if own:
            http.close()
