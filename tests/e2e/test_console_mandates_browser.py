"""The console's Mandates pages in a real headless Chromium, against `dispersion demo --no-approve --keep` (Kafka, the
sandbox bank and a processor as processes): a VRP mandate sent to `vrp.mandates` shows its approval link, is
approved on the bank's consent page, and after two payments its page shows what is used and left of the monthly
limit to the cent, equal to the limit ledger read from the store; a third payment over the limit shows REFUSED with
its reason; a mandate request for an unknown integration is a VRP dead letter, shown decoded with the creditor
account masked, and replayed with a reason. Screenshots go to $DISPERSION_TEST_OUTPUT/console."""

from __future__ import annotations

import re
import sqlite3
import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from processor_support import CREDITOR, KafkaProducer, unique_id, vrp_mandate, vrp_payment
from test_console_browser import APPROVAL_LINE, CHROMIUM_FLAGS, CONSOLE_LINE, _shot, _shots, demo

from schemas.topics import VRP_MANDATES_TOPIC, VRP_PAYMENTS_TOPIC

pytestmark = [pytest.mark.browser, pytest.mark.kafka]

COUNTED = ("SUBMITTED", "PENDING", "COMPLETED")  # the payments the limit ledger counts


def ledger(database: Path, mandate_id: str, limit: Decimal) -> tuple[Decimal, Decimal]:
    """(used, left) of the mandate's calendar-month limit this month, summed here from the store's rows."""
    start = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT amount, state, created_at FROM vrp_payments WHERE mandate_id = ?", (mandate_id,)
        ).fetchall()
    used = Decimal("0.00")
    for amount, state, created in rows:
        at = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
        if state in COUNTED and (at if at.tzinfo else at.replace(tzinfo=UTC)) >= start:
            used += Decimal(str(amount))
    return used, limit - used


def next_month() -> str:
    """The start of next calendar month (UTC) as the page shows it."""
    start = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (start + timedelta(days=32)).replace(day=1).strftime("%Y-%m-%d %H:%M:%S")


def sign_in(page: Page, console_url: str, operator: str, password: str) -> None:
    page.goto(console_url)
    page.fill("#name", operator)
    page.fill("#password", password)
    page.click("#sign-in")
    expect(page.locator("#operator")).to_contain_text(operator)


def approve_the_mandate(page: Page, approver: Page, mandate_id: str, shots: Path) -> None:
    """The mandate waits for its approver: the console shows it, and its approval link; approved, it is
    AUTHORIZED."""
    page.click("#nav-mandates")
    row = page.locator("tr.mandate-row", has_text=mandate_id)
    expect(row).to_contain_text("AUTHORIZATION_REQUIRED", timeout=60_000)
    expect(row).to_contain_text("****5698 Savings pot")
    assert CREDITOR["identification"] not in page.content()
    row.locator("a.mandate-link").click()
    link = page.input_value("#approval-link")
    assert f"/approve/mandate/{mandate_id}?t=" in link
    _shot(page, shots, "mandate-waiting")
    approver.goto(link)
    approver.click("#approve")
    approver.wait_for_load_state()
    approver.close()
    expect(page.locator("#mandate-status")).to_have_text("AUTHORIZED", timeout=60_000)
    expect(page.locator("#approval-link")).to_have_count(0)


def pay_within_and_over_the_limit(page: Page, producer: KafkaProducer, mandate_id: str) -> None:
    """Two payments within the limits, then one over the monthly limit, then one of no valid amount."""
    for name, amount in (("P1", "250.00"), ("P2", "300.00"), ("P3", "500.00")):
        producer.send(VRP_PAYMENTS_TOPIC, mandate_id, vrp_payment(mandate_id, f"{mandate_id}-{name}", amount))
    payments = page.locator("#payment-table")
    for name in ("P1", "P2"):
        expect(payments.locator(f"tr[data-payment='{mandate_id}-{name}']")).to_contain_text("COMPLETED", timeout=60_000)
    refused = payments.locator(f"tr[data-payment='{mandate_id}-P3']")
    expect(refused).to_contain_text("REFUSED")
    expect(refused).to_contain_text("ControlParameters.PeriodicLimits[0]")
    expect(refused).to_contain_text("550.00 already used, 500.00 requested")
    expect(page.locator("#mandate-timeline")).to_contain_text("LIMIT_EXCEEDED")
    # A payment of no valid amount: INVALID, shown with what it asked for (not as 0.00) and its reason.
    producer.send(VRP_PAYMENTS_TOPIC, mandate_id, vrp_payment(mandate_id, f"{mandate_id}-P4", "-5.00"))
    invalid = payments.locator(f"tr[data-payment='{mandate_id}-P4']")
    expect(invalid).to_contain_text("INVALID", timeout=60_000)
    expect(invalid.locator("td.num")).to_have_text("-5.00 requested GBP")
    expect(invalid).to_contain_text("greater than zero")


def check_the_limit_against_the_store(page: Page, database: Path, mandate_id: str, shots: Path) -> None:
    """Used and left of the monthly limit to the cent, equal to the limit ledger read from the store, on the
    mandate's page and in the list; the list's search."""
    used, left = ledger(database, mandate_id, Decimal("1000.00"))
    assert (used, left) == (Decimal("550.00"), Decimal("450.00"))
    limit_row = page.locator("#limit-table tr.limit-row").first
    expect(limit_row.locator("td.used")).to_have_text(f"{used:,.2f}")
    expect(limit_row.locator("td.left")).to_have_text(f"{left:,.2f}")
    expect(limit_row.locator("td.next")).to_have_text(next_month())
    _shot(page, shots, "mandate")
    page.click("#nav-mandates")
    listed = page.locator("tr.mandate-row", has_text=mandate_id)
    expect(listed.locator(".used")).to_have_text("550.00")
    expect(listed.locator(".left")).to_have_text("450.00")
    page.fill("#m-q", mandate_id.lower()[-6:])
    page.click("#m-apply")
    expect(page.locator("tr.mandate-row")).to_have_count(1)
    _shot(page, shots, "mandates")


def replay_a_vrp_dead_letter(page: Page, producer: KafkaProducer, operator: str, shots: Path) -> None:
    """A mandate request for an integration the configuration lacks: INVALID, dead-lettered, shown decoded with the
    creditor account masked, replayed with a reason."""
    stray = unique_id("M")
    request = vrp_mandate(stray)
    request["integration"] = "nowhere"
    producer.send(VRP_MANDATES_TOPIC, stray, request)
    page.click("#nav-dead-letters")
    letter = page.locator("tr", has_text=stray)
    expect(letter).to_contain_text("VRP mandate", timeout=30_000)
    letter.locator("a.letter-link").click()
    expect(page.locator("#letter-kind")).to_have_text("VRP mandate")
    expect(page.locator("#decoded")).to_contain_text('"identification": "****5698"')
    expect(page.locator("#decoded")).to_contain_text('"integration": "nowhere"')
    instant = re.compile(r'"valid_from": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"')  # ISO 8601 UTC, ms
    expect(page.locator("#decoded")).to_contain_text(instant)
    expect(page.locator("#letter-time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"))
    assert CREDITOR["identification"] not in page.content()
    page.fill("#replay-reason", "integration added; replay once")
    page.click("#replay")
    expect(page.locator("#notice")).to_contain_text("replayed")
    expect(page.locator("#replays")).to_contain_text(f"by {operator}: integration added; replay once")
    _shot(page, shots, "vrp-dead-letter-replayed")
    page.click("#letter-mandate")
    expect(page.locator("#mandate-status")).to_have_text("INVALID")


def test_mandates_pages_and_vrp_dead_letters_in_a_real_browser(
    kafka_bootstrap: str, chromium_path: str, tmp_path: Path
) -> None:
    shots = _shots(tmp_path)
    work = tmp_path / "demo-run"
    with demo(work, kafka_bootstrap) as run, sync_playwright() as pw:
        console_url, operator, password = run.wait_for(CONSOLE_LINE).groups()
        batch_link = run.wait_for(APPROVAL_LINE).group(1)
        topics = tomllib.loads((work / "dispersion.toml").read_text())["kafka"]["topics"]
        producer = KafkaProducer(kafka_bootstrap, topics)
        mandate_id = unique_id("M")
        producer.send(
            VRP_MANDATES_TOPIC, mandate_id, vrp_mandate(mandate_id, max_individual="500.00", monthly="1000.00")
        )

        browser = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        sign_in(page, console_url, operator, password)
        approver = context.new_page()
        approver.goto(batch_link)  # the demo's own batch, so the demo settles into --keep
        approver.click("#approve")
        approver.wait_for_load_state()

        approve_the_mandate(page, approver, mandate_id, shots)
        pay_within_and_over_the_limit(page, producer, mandate_id)
        check_the_limit_against_the_store(page, work / "dispersion.sqlite", mandate_id, shots)
        replay_a_vrp_dead_letter(page, producer, operator, shots)
        browser.close()
        assert run.stop() == 0, run.output
