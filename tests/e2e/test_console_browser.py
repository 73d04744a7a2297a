"""The operator console in a real headless Chromium, against `dispersion demo --no-approve --keep` as a user runs it
(a subprocess with Kafka, the sandbox bank and a processor): sign in; watch the demo batch move from
AUTHORIZATION_REQUIRED to COMPLETED without reloading (the approver approves in another tab); filter to the failed
transfer; retry it with a corrected account and land on the retry batch; replay a dead letter with a reason; a
concept holding `<script>` shows as text; a form without its CSRF token is refused; sign out. Screenshots of every
page go to $DISPERSION_TEST_OUTPUT/console (default: the test's temporary folder)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from processor_support import KafkaProducer, payroll_batch

from processor.devtools.processes import eventually

pytestmark = [pytest.mark.browser, pytest.mark.kafka]

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CONSOLE_LINE = re.compile(r"console: (http://\S+/console/) \(sign in as (\S+), password (\S+)\)")
REPORT = (sys.executable, "-m", "processor.cli", "report")
TOKEN_LINE = re.compile(r"DISPERSION_ADMIN_TOKEN=(\S+)")
APPROVAL_LINE = re.compile(r"approval link: (http://\S+)")
BATCH_LINE = re.compile(r"following \S+ for batch (demo-\S+)")
# The elements (of those the selector names) whose box reaches outside the window, as "tag#id text".
OFF_SCREEN = """(selector) => Array.from(document.querySelectorAll(selector)).filter((element) => {
  const box = element.getBoundingClientRect();
  return box.width > 0 && (box.left < -0.5 || box.right > window.innerWidth + 0.5);
}).map((element) => `${element.tagName}#${element.id} ${element.textContent.trim().slice(0, 40)}`)"""


class DemoRun:
    """The demo as a child process; its output collected line by line."""

    def __init__(self, work: Path, bootstrap: str) -> None:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PYTHONUNBUFFERED": "1"}
        args = ["--dir", str(work), "--no-approve", "--keep", "--timeout", "240"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=work.parent,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 120) -> re.Match[str]:

        def seen() -> re.Match[str] | None:
            found = pattern.search(self.output)
            assert found or self.process.poll() is None, f"the demo ended early:\n{self.output}"
            return found

        try:
            return eventually(seen, what=pattern.pattern, timeout=timeout, interval=0.2)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}:\n{self.output}") from None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=90)


@contextmanager
def demo(work: Path, bootstrap: str) -> Iterator[DemoRun]:
    run = DemoRun(work, bootstrap)
    try:
        yield run
    finally:
        if run.process.poll() is None:
            run.stop()


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DISPERSION_TEST_OUTPUT") or tmp_path) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _shot(page: Page, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


@dataclass
class Console:
    """One browser session on the demo's console: what the steps below share."""

    run: DemoRun
    work: Path
    shots: Path
    console_url: str
    operator: str
    password: str
    admin_token: str
    batch_id: str
    link: str
    topics: dict[str, str]
    browser: Browser
    context: BrowserContext
    page: Page
    dialogs: list[str] = field(default_factory=list)
    producer: KafkaProducer | None = None
    scheduled_id: str = ""

    def shot(self, name: str, page: Page | None = None) -> None:
        _shot(page or self.page, self.shots, name)

    def approve(self, link: str) -> Page:
        """Approve at the bank in another tab; the tab is left open for the caller."""
        approver = self.context.new_page()
        approver.goto(link)
        approver.click("#approve")
        approver.wait_for_load_state()
        return approver


def open_console(run: DemoRun, work: Path, shots: Path, browser: Browser) -> Console:
    """The demo's console, approval link and admin token; a fresh browser context with a dialog watcher."""
    console_url, operator, password = run.wait_for(CONSOLE_LINE).groups()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    console = Console(
        run=run,
        work=work,
        shots=shots,
        console_url=console_url,
        operator=operator,
        password=password,
        admin_token=run.wait_for(TOKEN_LINE).group(1),
        batch_id=run.wait_for(BATCH_LINE).group(1),
        link=run.wait_for(APPROVAL_LINE).group(1),
        topics=tomllib.loads((work / "dispersion.toml").read_text())["kafka"]["topics"],
        browser=browser,
        context=context,
        page=context.new_page(),
    )
    console.page.on("dialog", lambda dialog: (console.dialogs.append(dialog.message), dialog.dismiss()))
    return console


def sign_in_and_watch_the_approval(c: Console) -> None:
    """Without a session: the sign-in page; the demo batch waits for approval and moves to COMPLETED by itself."""
    page, batch_id = c.page, c.batch_id
    page.goto(c.console_url + f"batches/{batch_id}")
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    page.fill("#name", c.operator)
    page.fill("#password", "not the password")
    page.click("#sign-in")
    expect(page.locator("#problem")).to_contain_text("wrong password")
    page.fill("#name", c.operator)
    page.fill("#password", c.password)
    c.shot("sign-in")
    page.click("#sign-in")
    expect(page.locator("#operator")).to_contain_text(c.operator)  # with the role

    # Batches: the demo batch waits for approval.
    expect(page.locator("a.batch-link", has_text=batch_id)).to_be_visible()
    c.shot("batches-waiting")
    page.click(f"a.batch-link:has-text('{batch_id}')")
    expect(page.locator("#status")).to_have_text("AUTHORIZATION_REQUIRED")
    assert page.input_value("#approval-link") == c.link
    page.click("#copy-approval")
    expect(page.locator("#copy-approval")).to_have_text("Copied")
    c.shot("batch-waiting")

    # The approver approves in another tab; this page moves on by itself (no reload).
    loads: list[str] = []
    page.on("load", lambda p: loads.append(p.url))
    c.approve(c.link).close()
    expect(page.locator("#status")).to_have_text("COMPLETED", timeout=60_000)
    assert loads == [], loads  # swapped in by the page's script, not reloaded
    expect(page.locator("#timeline")).to_contain_text("approver: authorised at the bank")
    expect(page.locator("#amount-failed")).to_contain_text("1 transfer(s), 6,100.25 GTQ")
    c.shot("batch-completed")


def check_the_phone_layout(c: Console) -> None:
    """On a 375 px phone: nothing of the transfers table or the retry form is off-screen."""
    phone = c.browser.new_context(viewport={"width": 375, "height": 812}, device_scale_factor=1, is_mobile=True)
    phone.add_cookies(c.context.cookies())
    small = phone.new_page()
    small.goto(c.console_url + f"batches/{c.batch_id}")
    expect(small.locator("#correction-3")).to_be_visible()
    off_screen = small.evaluate(OFF_SCREEN, "#transfer-table, #transfer-table *, #retry-form, #retry-form *")
    assert off_screen == [], off_screen
    assert small.evaluate("document.documentElement.scrollWidth") <= 375
    c.shot("phone-batch", small)
    phone.close()


def retry_the_failed_transfer(c: Console) -> None:
    """Only the failures, sorted; retry the closed account with a corrected one; the retry is paid and the
    original reads as one payroll."""
    page, batch_id = c.page, c.batch_id
    page.click("#show-failed")
    expect(page.locator("#transfer-table tbody tr")).to_have_count(1)
    row = page.locator("#transfer-table tbody tr").first
    expect(row).to_contain_text("E-1004")
    expect(row).to_contain_text("****9902")
    expect(row).to_contain_text("AC04")
    assert "2001009902" not in page.content()  # never the whole account number
    c.shot("batch-failed-only")
    # The same form without its CSRF token (as another site would send it) is refused and creates nothing.
    refused = page.request.post(c.console_url + "retry", form={"batch_id": batch_id, "account_3": "2001002004"})
    assert refused.status == 403 and "CSRF" in refused.text()
    page.fill("#correction-3", "2001002004")
    page.click("#retry")  # first the confirmation: what will be paid, to which (masked) account
    expect(page.locator("#retry-count")).to_have_text("1")
    expect(page.locator("#retry-amount")).to_have_text("6,100.25 GTQ")
    expect(page.locator("#retry-plan")).to_contain_text("****2004")
    expect(page.locator("#retry-plan")).to_contain_text("E-1004")
    assert "2001002004" not in page.locator("main").inner_text()
    c.shot("retry-confirm")
    page.click("#confirm-retry")
    expect(page.locator("h1.batch-id")).to_have_text(f"{batch_id}.retry-1")
    expect(page.locator("#notice")).to_have_text(
        f"Created {batch_id}.retry-1 from {batch_id}; it needs its own approval: send the approver its link below."
    )
    expect(page.locator("#status")).to_have_text("AUTHORIZATION_REQUIRED", timeout=30_000)
    expect(page.locator("#transfer-table")).to_contain_text("****2004")
    expect(page.locator("#transfer-3")).to_be_visible()  # the retry keeps the original transfer number
    c.shot("retry-batch")
    # The approver pays the retry; the original then reads as one payroll: transfer 3 paid by the retry,
    # nothing outstanding, no retry offered.
    c.approve(page.input_value("#approval-link")).close()
    expect(page.locator("#status")).to_have_text("COMPLETED", timeout=60_000)
    page.click("#retry-of")
    expect(page.locator("#retries")).to_contain_text(f"{batch_id}.retry-1")
    expect(page.locator("#transfer-3 .outcome")).to_have_text(f"paid by {batch_id}.retry-1")
    expect(page.locator("#payroll-outstanding")).to_have_text("outstanding 0: 0.00 GTQ")
    expect(page.locator("#payroll-paid")).to_contain_text("43,226.50 GTQ")
    assert page.locator("#retry-form").count() == 0
    c.shot("batch-after-retry")


def schedule_a_batch(c: Console, kafka_bootstrap: str) -> None:
    """A scheduled batch: its payday on the batch page and on the approver's page."""
    page = c.page
    c.producer = KafkaProducer(kafka_bootstrap, c.topics)
    payday = datetime.now(UTC).date() + timedelta(days=2)
    shown_day = f"{payday.day} {payday:%b %Y}"
    c.scheduled_id = scheduled_id = f"{c.batch_id}-payday"
    c.producer.send("payroll.batches", scheduled_id, {**payroll_batch(scheduled_id), "execute_on": payday})

    def read_by_the_processor() -> bool:  # an unknown batch's page does not refresh by itself
        page.goto(c.console_url + f"batches/{scheduled_id}")
        return page.locator("#status").count() > 0

    eventually(read_by_the_processor, what=f"the page of {scheduled_id}", timeout=30, interval=0.25)
    expect(page.locator("#status")).to_have_text("AUTHORIZATION_REQUIRED", timeout=30_000)
    expect(page.locator("#payday")).to_contain_text(f"{shown_day} scheduled")
    approver = c.approve(page.input_value("#approval-link"))
    expect(approver.locator("#batch")).to_have_text(f"Batch {scheduled_id}")
    expect(approver.locator("#message")).to_have_text(f"Authorization received. It will be paid on {shown_day}.")
    c.shot("approver-scheduled", approver)
    approver.close()
    expect(page.locator("#status")).to_have_text("AUTHORIZED", timeout=30_000)


def check_month_end_against_the_report(c: Console) -> None:
    """Month-end: the money of the month, counted once, equals what `dispersion report` says; then a search by
    the employee reference ("E-1004 was not paid?")."""
    page = c.page
    month = datetime.now(UTC).strftime("%Y-%m")
    page.goto(c.console_url + f"overview?month={month}")
    expect(page.locator("#scheduled")).to_contain_text(c.scheduled_id)
    shown = {
        name: page.locator(f"#money-GTQ .m-{name} b").inner_text().replace(",", "")
        for name in ("paid", "failed", "outstanding", "in_progress", "scheduled")
    }
    assert shown["paid"] == "43226.50" and shown["failed"] == "6100.25" and shown["outstanding"] == "0.00"
    assert shown["scheduled"] == "3500.50"
    c.shot("overview")
    report = subprocess.run(
        [*REPORT, "--config", str(c.work / "dispersion.toml"), "--since", f"{month}-01", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DISPERSION_ADMIN_TOKEN": c.admin_token},
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    (grand,) = json.loads(report.stdout)["grand_totals"]
    assert {name: grand[name]["amount"] for name in shown} == shown
    assert f"net outstanding GTQ: {shown['outstanding']}" in report.stderr

    page.click("#nav-batches")
    page.fill("#f-q", "E-1004")
    page.click("#f-apply")
    found = page.locator("#found tr.found-row", has_text=c.batch_id).first
    expect(found).to_contain_text(f"paid by {c.batch_id}.retry-1")
    expect(found).to_contain_text("****9902")
    c.shot("search-employee")


def replay_a_dead_letter(c: Console) -> None:
    """Dead letters: bytes that are no batch at all (shown as hex), and a batch for an integration that does not
    exist (decoded); the first is replayed with a reason, dead-letters again, and the chain is shown."""
    page, batch_id, producer = c.page, c.batch_id, c.producer
    assert producer is not None
    producer.send_raw("payroll.batches", b"poison-1", b"\x00\x01not an avro record\xff")
    unknown = payroll_batch(f"{batch_id}-nowhere")
    unknown["integration"] = "nowhere"
    producer.send("payroll.batches", unknown["batch_id"], unknown)
    hostile = payroll_batch(f"{batch_id}-html")
    hostile["transactions"][0]["concept"] = "<script>alert('console')</script>"
    producer.send("payroll.batches", hostile["batch_id"], hostile)
    page.click("#nav-dead-letters")
    expect(page.locator("a.letter-link")).to_have_count(2, timeout=30_000)  # the page refreshes by itself
    c.shot("dead-letters")
    page.locator("tr", has_text="nowhere").locator("a.letter-link").click()
    expect(page.locator("#decoded")).to_contain_text('"integration": "nowhere"')
    expect(page.locator("#decoded")).to_contain_text('"employee_reference": "E-0001"')
    expect(page.locator("#decoded")).to_contain_text('"account_number": "****0300"')
    assert "200100300" not in page.content()  # account numbers masked in the decoded record too
    c.shot("dead-letter-decoded")
    page.click("#nav-dead-letters")
    page.locator("tr", has_text="undecodable").first.locator("a.letter-link").click()
    expect(page.locator("#hex")).to_contain_text("0001 6e6f")
    expect(page.locator("#record-key")).to_have_text("poison-1")  # the Kafka key, though the value names none
    coordinates = page.locator("#dlq-at").inner_text()
    page.click("#replay")  # the reason is required: the browser does not send the form
    expect(page.locator("#replay-reason")).to_be_visible()
    assert page.locator("#notice").count() == 0
    page.fill("#replay-reason", "checked the producer; replay once")
    page.click("#replay")
    expect(page.locator("#notice")).to_contain_text("replayed")
    expect(page.locator("#replays")).to_contain_text(f"by {c.operator}: checked the producer; replay once")
    c.shot("dead-letter-replayed")
    page.fill("#replay-reason", "once more")
    page.click("#replay")  # a second replay is refused without the "again" box
    expect(page.locator("#problem")).to_contain_text("already replayed")
    page.click("#nav-dead-letters")
    expect(page.locator("a.letter-link")).to_have_count(3, timeout=30_000)  # the replay was dead-lettered again
    page.locator("a.letter-link").last.click()
    expect(page.locator("#replay-of")).to_have_text(coordinates)


def check_escaping_chart_and_sign_out(c: Console) -> None:
    """A concept holding <script> shows as text and nothing ran; the day's chart; signing out."""
    page = c.page
    page.click("#nav-batches")
    page.fill("#f-q", f"{c.batch_id}-html")
    page.click("#f-apply")
    page.click(f"a.batch-link:has-text('{c.batch_id}-html')", timeout=30_000)
    expect(page.locator("#transfer-table")).to_contain_text("<script>alert('console')</script>")
    assert page.locator("script").count() == 1  # only the console's own static script
    assert c.dialogs == []

    # Month-end overview of the day: the batches per status as an SVG chart.
    page.click("#nav-overview")
    expect(page.locator("svg.chart rect.bar")).not_to_have_count(0)
    expect(page.locator("#day-totals")).to_contain_text("COMPLETED")

    # Sign out: the pages want a session again.
    page.click("#sign-out")
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    page.goto(c.console_url)
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))


def test_operator_console_in_a_real_browser(kafka_bootstrap: str, chromium_path: str, tmp_path: Path) -> None:
    shots = _shots(tmp_path)
    work = tmp_path / "demo-run"
    with demo(work, kafka_bootstrap) as run, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS)
        console = open_console(run, work, shots, browser)
        sign_in_and_watch_the_approval(console)
        check_the_phone_layout(console)
        retry_the_failed_transfer(console)
        schedule_a_batch(console, kafka_bootstrap)
        check_month_end_against_the_report(console)
        replay_a_dead_letter(console)
        check_escaping_chart_and_sign_out(console)
        browser.close()
        assert run.stop() == 0, run.output
        print(run.output)  # the demo's own account of the run (docs/console.md quotes it)
