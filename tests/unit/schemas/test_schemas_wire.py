"""The wire-format settings and the parts of `WireCodec` that need no registry: which format the first
bytes name, single-object output unchanged, clear refusals, and the registry password kept out of every repr."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from bank_support import toml

import schemas
from processor.cli.config import load_kafka_settings
from processor.domain.settings import ConfigError
from processor.kafka.settings import KafkaTable, settings_from
from processor.kafka.wire import Registry, WireCodec, WireSettings
from schemas import CONFLUENT, SINGLE_OBJECT, DecodeError

URL = "http://127.0.0.1:8081/apis/ccompat/v7"


def _status() -> dict[str, Any]:
    return {
        "event_id": "0b9f6f0e-7a4c-4df4-9c61-51a1c4a1d2e3",
        "batch_id": "ERP-1",
        "payment_id": None,
        "status": "INVALID",
        "reason": "non_positive_amount",
        "authorization_url": None,
        "occurred_at": datetime(2026, 1, 31, 12, 0, 0, 125000, tzinfo=UTC),
    }


def _status_record() -> dict[str, Any]:
    # every field of dispersion.status, filled with its default
    return schemas.decode("dispersion.status", schemas.encode("dispersion.status", _minimal_status()))


def _minimal_status() -> dict[str, Any]:
    raw = schemas.schema("dispersion.status").schema
    names = {field["name"] for field in raw["fields"]}
    return {key: value for key, value in _status().items() if key in names}


def test_the_first_bytes_name_the_wire_format() -> None:
    single = schemas.encode("dispersion.status", _minimal_status())
    assert schemas.wire_format_of(single) == SINGLE_OBJECT
    assert schemas.wire_format_of(b"\x00\x00\x00\x00\x07\x02") == CONFLUENT
    assert schemas.wire_format_of(b"{}") is None
    assert schemas.wire_format_of(b"") is None


def test_single_object_mode_writes_what_it_always_wrote() -> None:
    record = _status_record()
    assert WireCodec("dispersion.status").encode(record, "acme.status") == schemas.encode("dispersion.status", record)
    assert WireCodec("dispersion.status").decode(schemas.encode("dispersion.status", record)) == record


def test_a_confluent_record_without_a_registry_is_refused_with_a_clear_reason() -> None:
    with pytest.raises(DecodeError, match=r"Confluent-framed.*schema_registry_url"):
        WireCodec("payroll.batches").decode(b"\x00\x00\x00\x00\x01\x02\x03")


def test_bytes_of_neither_format_are_refused() -> None:
    with pytest.raises(DecodeError, match=r"neither .*single-object.*Confluent.*starts with 7b22"):
        WireCodec("payroll.batches").decode(b'{"batch_id": 1}')


def test_wire_settings_from_the_kafka_table() -> None:
    table = KafkaTable(
        wire_format="confluent",
        schema_registry_url=URL,
        schema_registry_username="dispersion",
        schema_registry_password="pa55-secret",
    )
    settings = settings_from(table, bootstrap="127.0.0.1:9092")
    assert settings.wire.wire_format == CONFLUENT
    assert settings.wire.registry == Registry(URL, "dispersion", "pa55-secret")
    assert settings.wire.registry.client_config() == {"url": URL, "basic.auth.user.info": "dispersion:pa55-secret"}
    assert "pa55-secret" not in repr(settings) + repr(table)
    assert settings_from(bootstrap="127.0.0.1:9092").wire == WireSettings(SINGLE_OBJECT, None)


def test_the_password_comes_from_the_environment_like_other_env_keys(tmp_path: Any) -> None:
    path = tmp_path / "dispersion.toml"
    path.write_text(
        '[kafka]\nbootstrap_servers = "127.0.0.1:9092"\nwire_format = "confluent"\n'
        f'schema_registry_url = "{URL}"\nschema_registry_username = "u"\n'
        'schema_registry_password_env = "TEST_REGISTRY_PASSWORD"\n'
    )
    kafka = load_kafka_settings(path, environ={"TEST_REGISTRY_PASSWORD": "from-env"})
    settings = settings_from(kafka)
    assert settings.wire.registry is not None
    assert settings.wire.registry.password == "from-env"
    assert "from-env" not in repr(kafka) + repr(settings)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"wire_format": "confluent"}, "needs schema_registry_url"),
        ({"wire_format": "json"}, "wire_format: must be one of 'single-object', 'confluent'"),
        ({"schema_registry_url": "ftp://registry"}, "must be an absolute http(s) address"),
        ({"schema_registry_url": "http://u:p@registry:8081"}, "must not hold credentials"),
        ({"schema_registry_url": URL, "schema_registry_username": "u"}, "go together"),
        ({"schema_registry_password": "p"}, "without schema_registry_url"),
        ({"schema_registry_url": ""}, "schema_registry_url: must not be empty"),
        ({"schema_registry": URL}, "unknown key"),
    ],
)
def test_bad_wire_settings_are_refused_by_name(tmp_path: Any, options: dict[str, Any], message: str) -> None:
    path = tmp_path / "dispersion.toml"
    path.write_text(f"kafka = {toml(options)}\n")
    with pytest.raises(ConfigError) as caught:
        load_kafka_settings(path, environ={})
    assert message in str(caught.value)
    assert f"{path}:1: kafka" in str(caught.value)
    assert "p@" not in str(caught.value)
