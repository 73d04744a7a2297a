"""Outcomes (processor/domain/outcomes.py): what results add up to, the exit code they mean, retry batch ids and
bank reason codes; the [admin] configuration; the retry command's corrections file."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from bank_support import integration_table, load

from processor.cli.common import CliError
from processor.cli.config import load_admin_client
from processor.cli.config_models import AdminTable
from processor.cli.retry_failed import read_corrections
from processor.domain.outcomes import exit_code, outcome_totals, retry_batch_id, split_reason
from processor.domain.roles import Role
from processor.domain.settings import ConfigError


def test_totals_count_and_add_completed_and_failed_transfers() -> None:
    results = [
        {"status": "COMPLETED", "amount": Decimal("1500.50")},
        {"status": "FAILED", "amount": "750.250"},
        {"status": "COMPLETED", "amount": Decimal("0.01")},
        {"status": "PENDING", "amount": Decimal("9.99")},
    ]
    assert outcome_totals(results) == {
        "transfers_completed": 2,
        "transfers_failed": 1,
        "amount_completed": Decimal("1500.51"),
        "amount_failed": Decimal("750.25"),
    }
    assert outcome_totals(None) == dict.fromkeys(
        ("transfers_completed", "transfers_failed", "amount_completed", "amount_failed")
    )


@pytest.mark.parametrize(
    ("status", "failed", "code"),
    [
        ("COMPLETED", 0, 0),
        ("COMPLETED", None, 0),
        ("COMPLETED", 3, 4),
        ("FAILED", 0, 1),
        ("REJECTED", None, 1),
        ("EXPIRED", None, 1),
        ("INVALID", None, 1),
        ("AUTHORIZATION_REQUIRED", None, None),
        ("INITIATED", None, None),
    ],
)
def test_exit_codes(status: str, failed: int | None, code: int | None) -> None:
    assert exit_code(status, failed) == code


def test_retry_ids_name_the_original_they_are_given() -> None:
    """The caller gives the original from the retry record; nothing is read back from an id (a batch stored as
    `NOV-1.retry-1` before intake refused the suffix is an original like any other)."""
    assert retry_batch_id("NOV-1", 1) == "NOV-1.retry-1"
    assert retry_batch_id("NOV-1.retry-1", 2) == "NOV-1.retry-1.retry-2"
    with pytest.raises(ValueError, match="start at 1"):
        retry_batch_id("NOV-1", 0)


def test_a_bank_reason_code_is_split_from_its_text() -> None:
    assert split_reason("AC04 ClosedAccountNumber: closed") == ("AC04", "ClosedAccountNumber: closed")
    assert split_reason("AC04") == ("AC04", None)
    assert split_reason("the bank said no") == (None, "the bank said no")
    assert split_reason(None) == (None, None)


def admin_settings(table: dict[str, Any]) -> AdminTable:
    return load({"integrations": {"sandbox": integration_table()}, "admin": table}).admin


def test_the_admin_table_hashes_the_token_and_refuses_bad_keys() -> None:
    digest = "a" * 64
    legacy = admin_settings({"token_sha256": digest.upper()}).by_name
    assert list(legacy) == ["admin"] and legacy["admin"].sha256 == digest and legacy["admin"].role == Role.ADMIN
    from_env = admin_settings({"token": "x" * 20})
    assert len(from_env.by_name["admin"].sha256) == 64
    assert "x" * 20 not in repr(from_env)
    assert admin_settings({}).by_name == {}
    personal = admin_settings(
        {
            "tokens": {
                "ana": {"token_sha256": "b" * 64, "role": "operator"},
                "bob": {"token": "y" * 20, "role": "approver"},
            }
        }
    ).by_name
    assert [(t.name, t.role) for t in personal.values()] == [("ana", Role.OPERATOR), ("bob", Role.APPROVER)]
    for bad, where in (
        ({"token_sha256": "abc"}, "admin.token_sha256"),
        ({"token": "short"}, "admin.token: must be at least 16 characters"),
        ({"token": "x" * 20, "token_sha256": digest}, "not both"),
        ({"tokn": "x"}, "admin.tokn"),
        ({"url": "ftp://x"}, "admin.url"),
        ({"tokens": {"ana": {"token_sha256": digest, "role": "boss"}}}, "admin.tokens.ana.role"),
        ({"tokens": {"ana": {"role": "viewer"}}}, "admin.tokens.ana: give token_sha256 or token_env"),
        ({"tokens": {"ana": {"token_sha256": digest, "role": "viewer", "x": 1}}}, "admin.tokens.ana.x"),
        ({"token_sha256": digest, "tokens": {"bob": {"token_sha256": digest, "role": "viewer"}}}, "share one token"),
    ):
        with pytest.raises(ConfigError, match=where):
            admin_settings(bad)


def test_the_commands_find_the_admin_address_and_token(tmp_path: Path) -> None:
    path = tmp_path / "dispersion.toml"
    path.write_text('[processor]\npublic_url = "http://127.0.0.1:8600/"\n[admin]\ntoken_env = "OPS_TOKEN"\n')
    assert load_admin_client(path, {"OPS_TOKEN": "t" * 20}) == ("http://127.0.0.1:8600", "t" * 20)
    assert load_admin_client(path, {"DISPERSION_ADMIN_TOKEN": "u" * 20, "OPS_TOKEN": "t"}) == (
        "http://127.0.0.1:8600",
        "u" * 20,
    )
    assert load_admin_client(path, {}) == ("http://127.0.0.1:8600", None)


def test_the_corrections_file_is_read_as_csv_or_json_and_bad_lines_are_named(tmp_path: Path) -> None:
    csv_file = tmp_path / "fix.csv"
    csv_file.write_text("index,account_number,account_type\n2,200100303,\n5, 300200100 ,MONETARY\n\n")
    assert read_corrections(csv_file) == [
        {"index": 2, "account_number": "200100303"},
        {"index": 5, "account_number": "300200100", "account_type": "MONETARY"},
    ]
    json_file = tmp_path / "fix.json"
    json_file.write_text('[{"index": 2, "account_number": "200100303"}]')
    assert read_corrections(json_file) == [{"index": 2, "account_number": "200100303"}]
    bad = tmp_path / "bad.csv"
    bad.write_text("index,account_number\nx,1\n")
    with pytest.raises(CliError, match="line 2"):
        read_corrections(bad)
    header = tmp_path / "header.csv"
    header.write_text("account,index\n")
    with pytest.raises(CliError, match="header"):
        read_corrections(header)


def test_the_admin_commands_without_a_token_or_a_processor_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from processor.cli import dlq, report, retry_failed

    path = tmp_path / "dispersion.toml"
    path.write_text('[processor]\npublic_url = "http://127.0.0.1:9"\n')  # port 9: nothing listens
    monkeypatch.delenv("DISPERSION_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("DISPERSION_CONFIG", raising=False)
    assert retry_failed.main(["--batch", "B", "--config", str(path)]) == 2
    assert "no admin token" in capsys.readouterr().err
    monkeypatch.setenv("DISPERSION_ADMIN_TOKEN", "t" * 20)
    assert dlq.main(["list", "--config", str(path), "--timeout", "5"]) == 2
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "t" * 20 not in err
    assert report.main(["--since", "x", "--until", "y", "--config", str(path), "--timeout", "5"]) == 2


def test_a_status_event_with_amounts_written_1_500_is_published_with_scale_2() -> None:
    """A batch given as JSON (`pay-file`, the intake's text path) may write `1.500`: its status events still fit
    the Avro decimal of scale 2 (fastavro refuses any other scale); more decimals are refused, never rounded."""
    import json
    from datetime import UTC, datetime

    import schemas
    from processor.store import OutboxEvent
    from producers.relay import PoisonEventError, outbox_record

    def event(amount: str) -> OutboxEvent:
        payload = {
            "batch_id": "B-1",
            "occurred_at": "2026-11-30T12:00:00.000Z",
            "control_sum": "1.500",
            "amount_completed": amount,
            "transaction_results": [{"index": 0, "amount": amount, "status": "COMPLETED"}],
        }
        at = datetime(2026, 11, 30, tzinfo=UTC)
        return OutboxEvent(1, "e-1", "dispersion.status", "B-1", 1, "COMPLETED", json.dumps(payload), None, at, None)

    record = outbox_record(event("1.500"))
    assert schemas.decode("dispersion.status", schemas.encode("dispersion.status", record))["control_sum"] == Decimal(
        "1.50"
    )
    assert record["transaction_results"][0]["amount"] == Decimal("1.50")
    with pytest.raises(PoisonEventError, match="more than 2 decimals"):
        outbox_record(event("1.505"))
