"""`dispersion submit` and `dispersion status` against a real Kafka broker (docs/submit.md, docs/operations.md).

submit: a valid export becomes exactly one Avro `payroll.batches` event keyed by its batch id (amounts exact, the
control sum right, one result line on stdout, progress on stderr); an invalid one lists every problem, exits 1 and
produces nothing (the topic is read back to be sure); an unreachable broker exits 3 with a clear message; the
configuration comes from `$DISPERSION_CONFIG` when `--config` is not given.

Both in each wire format (single-object, and Confluent with a real schema registry).

status: prints the events a topic holds (deduplicated on `event_id`), filters by batch, JSON lines, stops at a
final status with `--until-terminal`, and finds its configuration (bootstrap, topic names) through
`$DISPERSION_CONFIG` or ./dispersion.toml like submit does (compose's `cli` service sets nothing else).
"""

from __future__ import annotations

import io
import json
import os
import queue
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cli_support import EXPORT, NOMINA, ORIGIN, Run, workbook, write_config
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from kafka_fixtures import create_topic
from registry_fixtures import register_subjects

import schemas
from processor.cli import status as statuscli
from processor.cli import submit
from processor.engine.transfer_events import document_transfers, transfer_payloads
from processor.kafka.settings import KafkaSettings
from processor.kafka.wire import WireCodec, WireSettings

pytestmark = pytest.mark.kafka

EXPORT_SUM = Decimal("43226.50")
BATCHES = "payroll.batches"
T0 = datetime(2024, 11, 5, 10, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing from the environment: no `$DISPERSION_CONFIG`, no `$KAFKA_BOOTSTRAP_SERVERS`, no ./dispersion.toml
    (the session broker's address is passed explicitly or through a configuration file)."""
    monkeypatch.delenv("DISPERSION_CONFIG", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.chdir(tmp_path)


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Message]:
    """Every message the topic holds now, read with a real consumer from the beginning of each partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        messages: list[Message] = []
        at_end: set[int] = set()
        deadline = datetime.now(UTC) + timedelta(seconds=timeout)
        while len(at_end) < len(partitions):
            assert datetime.now(UTC) < deadline, f"{topic}: partitions {set(partitions) - at_end} never reached EOF"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
                continue
            messages.append(message)
        return messages
    finally:
        consumer.close()


def submit_run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = submit.main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def status_run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    out = io.StringIO()
    code = statuscli.main(list(argv), out=out)
    return Run(code, out.getvalue(), capsys.readouterr().err)


# -- submit ------------------------------------------------------------------------------------------------------


def wire_config(path: Path, bootstrap: str, wire: WireSettings, topics: Mapping[str, str]) -> Path:
    """A configuration file naming `wire`'s format and registry, with the subjects of `topics` registered."""
    extra = {"wire_format": wire.wire_format}
    if wire.registry is not None:
        extra["schema_registry_url"] = wire.registry.url
    register_subjects(KafkaSettings(bootstrap, topics=dict(topics), wire=wire))
    return write_config(path, bootstrap, topics, kafka=extra)


def test_valid_export_produces_one_event_keyed_by_batch_id(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str, wire: WireSettings
) -> None:
    path = tmp_path / "payroll-export.csv"
    path.write_text(EXPORT)
    config = wire_config(tmp_path / "conf" / "dispersion.toml", kafka_bootstrap, wire, {BATCHES: kafka_topic})
    before = datetime.now(UTC).replace(microsecond=0)
    result = submit_run(
        capsys,
        str(path),
        *ORIGIN,
        "--batch-id",
        "NOV-2024-001",
        "--integration",
        "sandbox",
        "--config",
        str(config),
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        kafka_topic,
    )
    assert result.code == 0, result.err
    match = re.fullmatch(
        rf"submitted batch NOV-2024-001: 5 transactions, control sum 43226\.50 GTQ -> {re.escape(kafka_topic)}"
        r" partition (\d) offset 0\n",
        result.out,
    )
    assert match is not None, result.out
    assert "Traceback" not in result.err

    (message,) = read_topic(kafka_bootstrap, kafka_topic)
    assert message.key() == b"NOV-2024-001"
    assert message.partition() == int(match.group(1))
    assert dict(message.headers() or []) == {"source": b"dispersion-submit", "export_file": b"payroll-export.csv"}
    value = message.value()
    assert value is not None
    assert schemas.wire_format_of(value) == wire.wire_format
    event = WireCodec(BATCHES, wire).decode(value, kafka_topic)
    assert event["batch_id"] == "NOV-2024-001"
    assert event["integration"] == "sandbox"
    assert event["file_reference"] == "NOV-2024-001"  # the batch id's first 40 characters
    assert event["origin_account"] == {"account_number": "3001234567", "account_type": "MONETARY", "currency": "GTQ"}
    assert event["source"] == "dispersion-submit"
    assert before <= event["requested_at"] <= datetime.now(UTC)
    assert event["requested_at"].microsecond % 1000 == 0  # millisecond precision
    transactions = event["transactions"]
    amounts = [t["amount"] for t in transactions]
    assert all(isinstance(amount, Decimal) for amount in amounts)
    assert amounts == [
        Decimal("8500.00"),
        Decimal("7250.50"),
        Decimal("12000.00"),
        Decimal("0.01"),
        Decimal("15475.99"),
    ]
    assert sum(amounts, Decimal(0)) == EXPORT_SUM
    assert [t["employee_reference"] for t in transactions] == [f"E-100{i}" for i in range(1, 6)]
    assert transactions[2]["destination_account"] == {
        "account_number": "2001002003",
        "account_type": "MONETARY",
        "currency": "GTQ",
        "email": "carla.mendez@example.com",
    }
    assert {t["concept"] for t in transactions} == {"Payroll November"}


def test_invalid_export_lists_every_problem_and_produces_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "account_number;amount;email;concept;batch_id\n"
        "2001002001;8500.00;ana.lopez@example.com;Payroll November;NOV-1\n"  # line 2: fine
        "2001-002;1.505;ana.lopez@;Payroll November;NOV-1\n"  # line 3: three problems
        "\n"
        '2001002003;1.500,50;carla@example.com;"Payroll\nNovember";NOV-1\n'  # lines 5-6
        "2001002004;0;dora@example.com;Payroll November;NOV-2\n"  # line 7: amount and batch id
        "2001002005;10;eva@example.com\n"  # line 8: too few fields
    )
    result = submit_run(
        capsys, str(path), *ORIGIN, "--integration", "sandbox", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic
    )
    assert result.code == 1
    assert result.out == ""
    problems = [line for line in result.err.splitlines() if line.startswith(("line ", "export"))]
    assert problems == [
        "line 3: destination_account.account_number: malformed_account_number: must be 1-34 ASCII letters or digits"
        " (transaction 1)",
        "line 3: destination_account.email: malformed_email: must be an address like name@example.com (ASCII, at"
        " most 254 characters) (transaction 1)",
        "line 3: amount: too_many_decimals: has more than 2 decimals (transaction 1)",
        "line 6: amount: expected a decimal number such as 1500.50 ('.' as decimal separator, no thousands separator)",
        "line 6: concept: invalid_text: holds a control or bidi character (U+000A at position 8) (transaction 2)",
        "line 7: batch_id: 'NOV-2' differs from 'NOV-1' on line 2 (one file, one batch)",
        "line 7: amount: non_positive_amount: must be greater than zero (transaction 3)",
        "line 8: row: has 3 fields, the header has 5",
    ]
    assert result.err.splitlines()[-1] == "dispersion submit: 8 problem(s); nothing was produced"
    assert "Traceback" not in result.err
    assert read_topic(kafka_bootstrap, kafka_topic) == []


def test_a_batch_id_with_the_retry_suffix_or_a_control_character_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An ERP batch may not pass for an operator's retry (`.retry-N` is reserved), nor carry an escape sequence
    or a newline that would forge a line of `dispersion status`, nor a bidi override in its file reference."""
    path = tmp_path / "fake.csv"
    path.write_text(EXPORT)
    for given, expected in (
        (("--batch-id", "AUD-1.retry-1"), "reserved for retry batches"),
        (("--batch-id", "AUD-1\x1b[2K\nCOMPLETED"), "batch_id holds a control or bidi character (U+001B"),
        (("--file-reference", "PAY\u202e11"), "file_reference: invalid_file_reference"),
    ):
        result = submit_run(capsys, str(path), *ORIGIN, "--integration", "sandbox", *given, "--dry-run")
        assert result.code == 1, result
        assert expected in result.err and "Traceback" not in result.err


def test_amounts_with_trailing_zeros_are_produced_and_printed_with_two_decimals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """docs/submit.md accepts `1.500` (a whole number of cents by value): the real submit encodes it (the Avro
    decimal has scale 2) and prints the control sum normalised to two decimals (`6.85`, `7.00`)."""
    path = tmp_path / "cents.csv"
    path.write_text(
        "account_number,amount,email,concept\n"
        "2001002001,1.500,ana@example.com,Payroll\n"
        "2001002002,5.35,bruno@example.com,Payroll\n"
    )
    argv = (str(path), *ORIGIN, "--integration", "sandbox", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    result = submit_run(capsys, *argv, "--quiet")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    assert ", control sum 6.85 GTQ -> " in result.out
    (message,) = read_topic(kafka_bootstrap, kafka_topic)
    value = message.value()
    assert value is not None
    event = schemas.decode("payroll.batches", value)
    assert [t["amount"] for t in event["transactions"]] == [Decimal("1.50"), Decimal("5.35")]

    whole = tmp_path / "whole.csv"
    whole.write_text("account_number,amount,email,concept\n2001002001,7,ana@example.com,Payroll\n")
    dry = submit_run(capsys, str(whole), *ORIGIN, "--integration", "sandbox", "--dry-run", "--quiet")
    assert dry.code == 0, dry.err
    assert ", control sum 7.00 GTQ" in dry.out


def test_a_scheduled_export_produces_a_v2_event_with_its_execute_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """`--execute-on` (or an `execute_on` column) travels as the Avro date of payroll.batches v2."""
    day = datetime.now(UTC).date() + timedelta(days=3)
    path = tmp_path / "scheduled.csv"
    path.write_text(
        "account_number,amount,email,concept,execute_on\n"
        f"2001002001,10.00,ana@example.com,Payroll,{day.isoformat()}\n"
        "2001002002,5.35,bruno@example.com,Payroll,\n"
    )
    argv = (str(path), *ORIGIN, "--integration", "sandbox", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    result = submit_run(capsys, *argv, "--quiet")
    assert result.code == 0, result.err
    assert f", control sum 15.35 GTQ, to be paid on {day.isoformat()} -> " in result.out
    later = day + timedelta(days=1)
    overridden = submit_run(capsys, *argv, "--quiet", "--batch-id", "B-LATER", "--execute-on", later.isoformat())
    assert overridden.code == 0, overridden.err
    events = {}
    for message in read_topic(kafka_bootstrap, kafka_topic):
        value = message.value()
        assert value is not None
        assert schemas.codec(BATCHES).writer_of(value) == schemas.schema(BATCHES, 2)
        event = schemas.decode(BATCHES, value)
        events[event["batch_id"]] = event["execute_on"]
    assert sorted(events.values()) == [day, later] and events["B-LATER"] == later


def test_configuration_from_environment_names_bootstrap_topic_and_integration(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topic: str,
) -> None:
    """No --config, --bootstrap, --topic or --integration: `$DISPERSION_CONFIG` gives them all; the batch columns
    of a semicolon export give the rest (docs/submit.md's second example)."""
    config = write_config(tmp_path / "etc" / "dispersion.toml", kafka_bootstrap, {"payroll.batches": kafka_topic})
    monkeypatch.setenv("DISPERSION_CONFIG", str(config))
    path = tmp_path / "export.csv"
    path.write_text(
        "batch_id;origin_account_number;origin_currency;account_number;amount;email;concept\n"
        "NOV-2024-001;3001234567;GTQ;2001002001;8500.00;ana.lopez@example.com;Payroll November\n"
        "NOV-2024-001;3001234567;GTQ;2001002002;7250.50;bruno.diaz@example.com;Payroll November\n"
    )
    result = submit_run(capsys, str(path), "--quiet")
    assert result.code == 0, result.err
    assert result.out.startswith(
        f"submitted batch NOV-2024-001: 2 transactions, control sum 15750.50 GTQ -> {kafka_topic} partition "
    )
    assert result.err == ""
    (message,) = read_topic(kafka_bootstrap, kafka_topic)
    value = message.value()
    assert value is not None
    event = schemas.decode("payroll.batches", value)
    assert (event["batch_id"], event["integration"]) == ("NOV-2024-001", "sandbox")

    refused = submit_run(capsys, str(path), "--quiet", "--integration", "other")
    assert refused.code == 1
    assert "export: integration: 'other' is not configured (configured: sandbox)" in refused.err.splitlines()
    assert len(read_topic(kafka_bootstrap, kafka_topic)) == 1


def test_a_workbook_read_through_a_profile_becomes_one_exact_event(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """`submit --profile nomina` over an `.xlsx` (docs/submit.md, "Bring your ERP's export"): the amounts are the
    decimals the cells show, the text account numbers keep their zeros, the batch id comes from its column."""
    config = write_config(tmp_path / "dispersion.toml", kafka_bootstrap, {"payroll.batches": kafka_topic})
    config.write_text(config.read_text() + NOMINA)
    path = workbook(tmp_path / "nomina.xlsx")
    result = submit_run(capsys, "--config", str(config), "--profile", "nomina", str(path), "--quiet")
    assert result.code == 0, result.err
    summary = "submitted batch NOM-2024-11: 3 transactions, control sum 8501.31 GTQ"
    assert result.out.startswith(f"{summary} -> {kafka_topic} partition ")
    (message,) = read_topic(kafka_bootstrap, kafka_topic)
    assert message.key() == b"NOM-2024-11"
    value = message.value()
    assert value is not None
    event = schemas.decode("payroll.batches", value)
    assert [t["amount"] for t in event["transactions"]] == [Decimal("0.30"), Decimal("8500.00"), Decimal("1.01")]
    accounts = [t["destination_account"]["account_number"] for t in event["transactions"]]
    assert accounts == ["0012003003", "2001002001", "2001002002"]
    assert event["origin_account"]["account_number"] == "3001234567"


def test_progress_goes_to_stderr_and_the_result_to_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """A 3,000-row export, submitted twice: the default batch id is the same both times (same file, same
    batch); progress lines only without --quiet."""
    rows = [f"E-{n},{2_000_000 + n},{n}.{n % 100:02d},employee{n}@example.com,Payroll" for n in range(1, 3001)]
    path = tmp_path / "big export.csv"
    path.write_text("employee_reference,account_number,amount,email,concept\n" + "\n".join(rows) + "\n")
    expected_sum = sum((Decimal(row.split(",")[2]) for row in rows), Decimal(0))
    argv = (str(path), *ORIGIN, "--integration", "sandbox", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)

    loud = submit_run(capsys, *argv)
    assert loud.code == 0, loud.err
    (line,) = loud.out.splitlines()
    match = re.fullmatch(
        rf"submitted batch (payroll-[0-9a-f]{{16}}): 3,000 transactions, control sum "
        rf"{expected_sum} GTQ -> {re.escape(kafka_topic)} partition \d offset \d",
        line,
    )
    assert match is not None, line
    batch_id = match.group(1)
    progress = loud.err.splitlines()
    assert progress[0].startswith("reading big export.csv: 1 rows")
    assert "read big export.csv: 3,000 rows 100%" in progress  # the real count, not the first throttled update
    assert "validating 3,000 transactions" in progress
    assert "encoding" in progress
    assert any(re.fullmatch(rf"producing [0-9,]+ bytes to {re.escape(kafka_topic)}", p) for p in progress)
    assert re.fullmatch(r"done in [0-9.]+ s", progress[-3])
    assert progress[-2].startswith("note: not waiting for the processor's verdict: no admin token")  # none here
    assert progress[-1].startswith(f"note: batch {batch_id} is identified by its content")

    quiet = submit_run(capsys, *argv, "--quiet")
    assert quiet.code == 0, quiet.err
    assert quiet.err == ""
    assert quiet.out.startswith(f"submitted batch {batch_id}: 3,000 transactions")

    messages = read_topic(kafka_bootstrap, kafka_topic)
    assert [m.key() for m in messages] == [batch_id.encode()] * 2
    value = messages[0].value()
    assert value is not None
    event = schemas.decode("payroll.batches", value)
    assert len(event["transactions"]) == 3000
    assert sum((t["amount"] for t in event["transactions"]), Decimal(0)) == expected_sum


def test_unreachable_broker_exits_3_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(EXPORT)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPERSION_CONFIG", "KAFKA_BOOTSTRAP_SERVERS")}
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "processor.cli", "submit", str(path), *ORIGIN, "--integration", "sandbox"),
            *("--bootstrap", "127.0.0.1:1", "--timeout", "1.5"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 3, completed.stderr
    assert completed.stdout == ""
    assert "dispersion submit: Kafka at 127.0.0.1:1 (from --bootstrap) did not take the batch" in completed.stderr
    assert "it may be retried safely" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_no_bootstrap_address_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(EXPORT)
    result = submit_run(capsys, str(path), *ORIGIN, "--integration", "sandbox", "--quiet")
    assert result.code == 2
    assert result.out == ""
    assert "dispersion submit: no Kafka bootstrap address" in result.err


# -- status ------------------------------------------------------------------------------------------------------


def status_event(batch_id: str, status: str, minute: int, **fields: Any) -> dict[str, Any]:
    return {
        "event_id": f"{batch_id}-{status}-{minute}",
        "batch_id": batch_id,
        "status": status,
        "occurred_at": T0 + timedelta(minutes=minute),
        **fields,
    }


def produce(bootstrap: str, topic: str, *events: Mapping[str, Any], wire: WireSettings | None = None) -> None:
    codec = WireCodec("dispersion.status", wire)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for event in events:
        producer.produce(topic, key=event["batch_id"].encode(), value=codec.encode(event, topic))
    assert producer.flush(30) == 0


HISTORY = (
    status_event(
        "NOV-1",
        "AUTHORIZATION_REQUIRED",
        0,
        consent_id="C-1",
        authorization_url="https://bank.example/authorize?x=1",
        number_of_transactions=2,
        control_sum=Decimal("20.50"),
        currency="GTQ",
    ),
    status_event("NOV-1", "INITIATED", 1, file_payment_id="FP-1"),
    status_event("NOV-1", "INITIATED", 1, file_payment_id="FP-1"),  # delivered twice: printed once
    status_event(
        "NOV-1",
        "COMPLETED",
        2,
        file_payment_id="FP-1",
        bank_status="AcceptedSettlementCompleted",
        transaction_results=[
            {"index": 0, "employee_reference": "E-1", "amount": Decimal("10.00"), "status": "COMPLETED"},
            {
                "index": 1,
                "employee_reference": None,
                "amount": Decimal("10.50"),
                "status": "FAILED",
                "reason": "closed",
            },
        ],
    ),
    status_event("OCT-9", "INVALID", 3, reason="empty_batch: the batch has no transactions"),
)
NOV_LINES = [
    "2024-11-05T10:00:00.000Z  NOV-1  AUTHORIZATION_REQUIRED  consent=C-1  transactions=2  control_sum=20.50 GTQ"
    "  approve at https://bank.example/authorize?x=1",
    "2024-11-05T10:01:00.000Z  NOV-1  INITIATED  file_payment=FP-1",
    "2024-11-05T10:02:00.000Z  NOV-1  COMPLETED  file_payment=FP-1  bank_status=AcceptedSettlementCompleted"
    "  results: 1 COMPLETED, 1 FAILED",
]
OCT_LINE = "2024-11-05T10:03:00.000Z  OCT-9  INVALID  reason: empty_batch: the batch has no transactions"


@pytest.fixture
def status_topic(kafka_bootstrap: str, kafka_topic: str) -> str:
    """A status topic holding HISTORY."""
    produce(kafka_bootstrap, kafka_topic, *HISTORY)
    return kafka_topic


def test_status_prints_the_history_once_and_exits(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, kafka_topic: str, wire: WireSettings, tmp_path: Path
) -> None:
    config = wire_config(tmp_path / "dispersion.toml", kafka_bootstrap, wire, {"dispersion.status": kafka_topic})
    produce(kafka_bootstrap, kafka_topic, *HISTORY, wire=wire)
    result = status_run(capsys, "--config", str(config), "--topic", kafka_topic)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert sorted(lines) == sorted([*NOV_LINES, OCT_LINE])
    assert [line for line in lines if " NOV-1 " in line] == NOV_LINES  # one partition per batch: in order


def test_status_one_batch_as_json_and_with_details(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, status_topic: str
) -> None:
    result = status_run(capsys, "--bootstrap", kafka_bootstrap, "--topic", status_topic, "--batch", "NOV-1", "--json")
    assert result.code == 0, result.err
    records = [json.loads(line) for line in result.out.splitlines()]
    assert [r["status"] for r in records] == ["AUTHORIZATION_REQUIRED", "INITIATED", "COMPLETED"]
    assert records[0]["control_sum"] == "20.50"
    assert records[0]["occurred_at"] == "2024-11-05T10:00:00.000Z"
    assert records[2]["transaction_results"][1] == {
        "index": 1,
        "employee_reference": None,
        "amount": "10.50",
        "status": "FAILED",
        "reason": "closed",
    }

    detailed = status_run(
        capsys, "--bootstrap", kafka_bootstrap, "--topic", status_topic, "--batch", "NOV-1", "--details"
    )
    assert detailed.out.splitlines()[-2:] == ["    #0 E-1 10.00 COMPLETED", "    #1 - 10.50 FAILED  closed"]


def test_status_shows_a_scheduled_batchs_day(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, kafka_topic: str
) -> None:
    payday = date(2024, 11, 30)
    produce(kafka_bootstrap, kafka_topic, status_event("NOV-9", "AUTHORIZED", 0, consent_id="C-9", execute_on=payday))
    argv = ("--bootstrap", kafka_bootstrap, "--topic", kafka_topic, "--batch", "NOV-9")
    text = status_run(capsys, *argv)
    assert text.out == "2024-11-05T10:00:00.000Z  NOV-9  AUTHORIZED  consent=C-9  execute_on=2024-11-30\n"
    as_json = status_run(capsys, *argv, "--json")
    assert json.loads(as_json.out)["execute_on"] == "2024-11-30"


def test_status_until_terminal_exits_with_the_final_status(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, status_topic: str
) -> None:
    invalid = status_run(
        capsys, "--bootstrap", kafka_bootstrap, "--topic", status_topic, "--batch", "OCT-9", "--until-terminal"
    )
    assert (invalid.code, invalid.out.splitlines()) == (1, [OCT_LINE])
    completed = status_run(
        capsys, "--bootstrap", kafka_bootstrap, "--topic", status_topic, "--batch", "NOV-1", "--until-terminal"
    )
    # COMPLETED with a failed transfer (an event without the v2 counts: counted from its results): exit 4
    assert (completed.code, completed.out.splitlines()) == (4, NOV_LINES)
    usage = status_run(capsys, "--bootstrap", kafka_bootstrap, "--topic", status_topic, "--until-terminal")
    assert usage.code == 2
    assert "--until-terminal needs --batch" in usage.err


def test_status_until_terminal_follows_and_tells_paid_partly_paid_and_not_in_time(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, kafka_topic: str
) -> None:
    """`--until-terminal` implies following: a batch still waiting for approval is not taken for paid (exit 3 once
    `--timeout` ran out, not 0 at the end of the topic); a COMPLETED event's v2 outcome fields decide 0 or 4."""
    results = [{"index": 0, "employee_reference": "E-1", "amount": Decimal("10.00"), "status": "COMPLETED"}]
    produce(
        kafka_bootstrap,
        kafka_topic,
        status_event("WAIT-1", "AUTHORIZATION_REQUIRED", 0, consent_id="C-9"),
        status_event(
            "PAID-1",
            "COMPLETED",
            1,
            transaction_results=results,
            transfers_completed=1,
            transfers_failed=0,
            amount_completed=Decimal("10.00"),
            amount_failed=Decimal("0.00"),
        ),
        status_event("PART-1", "COMPLETED", 2, transfers_completed=1, transfers_failed=2, amount_failed=Decimal("3")),
    )
    base = ("--bootstrap", kafka_bootstrap, "--topic", kafka_topic, "--until-terminal")
    waiting = status_run(capsys, *base, "--batch", "WAIT-1", "--timeout", "3")
    assert waiting.code == 3, waiting.out
    assert "WAIT-1 not final within 3 s" in waiting.err
    paid = status_run(capsys, *base, "--batch", "PAID-1")
    assert paid.code == 0
    assert "paid=1 (10.00) failed=0 (0.00)" in paid.out
    partly = status_run(capsys, *base, "--batch", "PART-1")
    assert partly.code == 4
    assert "failed=2 (3.00)" in partly.out
    bad = status_run(capsys, *base, "--batch", "PAID-1", "--timeout", "0")
    assert bad.code == 2


class _Lines(io.StringIO):
    """An output stream that also hands every written line to a queue (to wait for output without sleeping)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: queue.Queue[str] = queue.Queue()

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.put(line)
        return super().write(text)


def test_status_follow_waits_for_new_events_until_terminal(kafka_bootstrap: str, kafka_topic: str) -> None:
    """`--follow --until-terminal`: past the end of the topic it keeps waiting; a FAILED event ends it (exit 1)."""
    produce(kafka_bootstrap, kafka_topic, status_event("DEC-1", "INITIATED", 0, file_payment_id="FP-9"))
    out = _Lines()
    codes: list[int] = []
    argv = ["--bootstrap", kafka_bootstrap, "--topic", kafka_topic, "--batch", "DEC-1", "--follow", "--until-terminal"]
    thread = threading.Thread(target=lambda: codes.append(statuscli.main(argv, out=out)), daemon=True)
    thread.start()
    assert out.lines.get(timeout=30) == "2024-11-05T10:00:00.000Z  DEC-1  INITIATED  file_payment=FP-9"
    produce(
        kafka_bootstrap,
        kafka_topic,
        status_event("OTHER", "COMPLETED", 1),  # another batch's final status does not end it
        status_event("DEC-1", "FAILED", 2, reason="bank_rejected"),
    )
    thread.join(30)
    assert not thread.is_alive()
    assert codes == [1]
    assert out.getvalue().splitlines()[-1] == "2024-11-05T10:02:00.000Z  DEC-1  FAILED  reason: bank_rejected"


def test_status_reads_the_configuration_named_by_DISPERSION_CONFIG(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kafka_bootstrap: str,
    status_topic: str,
) -> None:
    """Like compose's `cli` service: only `$DISPERSION_CONFIG`, no --config, no `$KAFKA_BOOTSTRAP_SERVERS`; the
    bootstrap address and the status topic's name come from the file."""
    config = write_config(tmp_path / "etc" / "dispersion.toml", kafka_bootstrap, {"dispersion.status": status_topic})
    monkeypatch.setenv("DISPERSION_CONFIG", str(config))
    result = status_run(capsys, "--batch", "NOV-1")
    assert result.code == 0, result.err
    assert result.out.splitlines() == NOV_LINES
    # --bootstrap still wins over the file
    broken = write_config(tmp_path / "broken" / "dispersion.toml", "127.0.0.1:1", {"dispersion.status": status_topic})
    monkeypatch.setenv("DISPERSION_CONFIG", str(broken))
    override = status_run(capsys, "--batch", "NOV-1", "--bootstrap", kafka_bootstrap)
    assert (override.code, override.out.splitlines()) == (0, NOV_LINES)


def test_status_reads_dispersion_toml_in_the_working_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kafka_bootstrap: str, status_topic: str
) -> None:
    write_config(tmp_path / "dispersion.toml", kafka_bootstrap, {"dispersion.status": status_topic})
    result = status_run(capsys, "--batch", "OCT-9")
    assert (result.code, result.out.splitlines()) == (0, [OCT_LINE])


def test_status_without_any_bootstrap_or_with_a_missing_topic_exits_2(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str
) -> None:
    nothing = status_run(capsys)
    assert nothing.code == 2
    assert "dispersion status: no Kafka bootstrap address" in nothing.err
    missing = f"test.missing.{uuid.uuid4().hex[:8]}"
    absent = status_run(capsys, "--bootstrap", kafka_bootstrap, "--topic", missing, "--timeout", "10")
    assert absent.code == 2
    assert f"dispersion status: topic {missing} not found" in absent.err


def test_status_details_of_a_retry_batch_number_its_transfers_as_in_the_original(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, kafka_topic: str, tmp_path: Path
) -> None:
    # NOV-7.retry-1 paid transfers #17 and #142 of NOV-7 (its positions 0 and 1); its dispersion.transfers events
    # carry those numbers. NOV-8.retry-1 has no transfer events: its positions are printed, and said to be.
    transfers_topic = f"test.{uuid.uuid4().hex[:12]}"
    create_topic(kafka_bootstrap, transfers_topic)
    paid = [
        {"index": 0, "employee_reference": "E-0017", "amount": Decimal("10.00"), "status": "COMPLETED"},
        {"index": 1, "employee_reference": "E-0142", "amount": Decimal("20.50"), "status": "COMPLETED"},
    ]
    retries = [
        status_event(f"{b}.retry-1", "COMPLETED", 5, retry_of=b, transaction_results=paid) for b in ("NOV-7", "NOV-8")
    ]
    produce(kafka_bootstrap, kafka_topic, *retries)
    document = {
        "origin_account": {"account_number": "100200300", "currency": "GTQ"},
        "transactions": [
            {"employee_reference": r["employee_reference"], "amount": r["amount"], "destination_account": {}}
            for r in paid
        ],
    }
    events = transfer_payloads(
        document_transfers("NOV-7.retry-1", document),
        paid,
        ended="COMPLETED",
        reason=None,
        occurred_at="2024-11-05T10:05:00.000Z",
        retry_of="NOV-7",
        original_indexes=(17, 142),
    )
    codec = WireCodec("dispersion.transfers")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for event in events:  # the outbox stores the instant as text; on the wire it is a timestamp
        wired = {**event, "occurred_at": T0 + timedelta(minutes=5)}
        producer.produce(transfers_topic, key=b"NOV-7.retry-1", value=codec.encode(wired, transfers_topic))
    assert producer.flush(30) == 0
    topics = {"dispersion.status": kafka_topic, "dispersion.transfers": transfers_topic}
    config = write_config(tmp_path / "dispersion.toml", kafka_bootstrap, topics)

    shown = status_run(capsys, "--config", str(config), "--batch", "NOV-7.retry-1", "--details")
    assert shown.code == 0, shown.err
    assert shown.out.splitlines()[1:] == ["    #17 E-0017 10.00 COMPLETED", "    #142 E-0142 20.50 COMPLETED"]
    unknown = status_run(capsys, "--config", str(config), "--batch", "NOV-8.retry-1", "--details")
    assert unknown.out.splitlines()[1:] == [
        "    (numbered by position in this retry batch: its dispersion.transfers events were not found)",
        "    #0 E-0017 10.00 COMPLETED",
        "    #1 E-0142 20.50 COMPLETED",
    ]
