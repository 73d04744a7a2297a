"""`dispersion topics` against a real broker: the project's topics created with the wanted partitions, retention
and size limits; a second run changes nothing; retention follows the options; a partition count is reported, never
changed; `--check` changes nothing and exits 1 when something differs. With a schema registry, every topic's
subject is registered with BACKWARD compatibility, which the registry then enforces on a schema change."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from pathlib import Path

import pytest
from cli_support import write_config
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

import schemas
from processor.cli.topics import main
from processor.devtools.processes import eventually
from processor.kafka.settings import MAX_MESSAGE_BYTES, KafkaSettings
from processor.kafka.topics import HOUR_MS, ensure_topics, project_topics
from processor.kafka.wire import registry_text
from schemas.topics import ALL_TOPICS, STATUS_TOPIC, TRANSFERS_TOPIC


def _names() -> dict[str, str]:
    run = uuid.uuid4().hex[:10]
    return {logical: f"test.{run}.{logical}" for logical in ALL_TOPICS}


def _described(bootstrap: str, names: list[str]) -> dict[str, tuple[int, dict[str, str | None]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=30)
    futures = admin.describe_configs([ConfigResource("topic", name) for name in names], request_timeout=30)
    configs = {resource.name: future.result(30) for resource, future in futures.items()}
    return {
        name: (len(metadata.topics[name].partitions), {k: e.value for k, e in configs[name].items()}) for name in names
    }


def test_topics_are_created_as_wanted_and_a_second_run_changes_nothing(kafka_bootstrap: str) -> None:
    names = _names()
    settings = KafkaSettings(bootstrap=kafka_bootstrap, topics=names)
    specs = project_topics(settings, partitions=2, retention_hours=5, status_retention_hours=7)
    first = ensure_topics(settings.config(), specs)
    assert [(r.name, r.action, r.partitions) for r in first] == [(names[t], "created", 2) for t in ALL_TOPICS]

    found = _described(kafka_bootstrap, list(names.values()))
    for logical, physical in names.items():
        partitions, config = found[physical]
        hours = (
            7 if logical in (STATUS_TOPIC, "vrp.status", TRANSFERS_TOPIC) else 720 if logical.endswith(".dlq") else 5
        )
        assert partitions == 2, physical
        assert config["retention.ms"] == str(hours * HOUR_MS), physical
    assert found[names["payroll.batches"]][1]["max.message.bytes"] == str(MAX_MESSAGE_BYTES)

    again = ensure_topics(settings.config(), specs)
    assert [(r.action, r.changed_config, r.warnings) for r in again] == [("exists", (), ())] * len(ALL_TOPICS)


def test_retention_is_aligned_and_a_partition_count_only_reported(kafka_bootstrap: str) -> None:
    names = _names()
    settings = KafkaSettings(bootstrap=kafka_bootstrap, topics=names)
    ensure_topics(settings.config(), project_topics(settings, partitions=2))

    changed = ensure_topics(settings.config(), project_topics(settings, partitions=3, retention_hours=1))
    by_name = {r.name: r for r in changed}
    batches = by_name[names["payroll.batches"]]
    assert batches.changed_config == ("retention.ms",)
    assert any("has 2 partitions, 3 wanted" in w for w in batches.warnings), batches.warnings
    assert by_name[names[STATUS_TOPIC]].changed_config == ()  # its retention did not change
    described = lambda: _described(kafka_bootstrap, [names["payroll.batches"]])[names["payroll.batches"]]  # noqa: E731
    # The broker applies an altered config a moment after it acknowledged it.
    with contextlib.suppress(TimeoutError):
        eventually(
            lambda: described()[1]["retention.ms"] == str(HOUR_MS), what="the new retention", timeout=10, interval=0.2
        )
    partitions, config = described()
    assert (partitions, config["retention.ms"]) == (2, str(HOUR_MS))


def test_the_command_creates_then_checks(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _names()
    config = write_config(
        tmp_path / "dispersion.toml", kafka_bootstrap, names, secret_env="DISPERSION_TEST_SECRET_NOT_SET"
    )
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("DISPERSION_TEST_SECRET_NOT_SET", raising=False)  # only [kafka] is read: secrets may be unset
    monkeypatch.setenv("DISPERSION_CONFIG", str(config))  # found without --config, as the other commands do

    assert main(["--check", "--partitions", "1"]) == 1  # nothing exists yet
    assert "missing" in capsys.readouterr().out
    assert _described_names(kafka_bootstrap) & set(names.values()) == set()  # --check created nothing

    assert main(["--partitions", "1", "--retention-hours", "2"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}: created (1 partitions)" in out for name in names.values()), out
    assert main(["--check", "--partitions", "1", "--retention-hours", "2"]) == 0
    assert main(["--check", "--partitions", "1", "--retention-hours", "3"]) == 1  # differs: reported ...
    retention = _described(kafka_bootstrap, [names["payroll.batches"]])[names["payroll.batches"]][1]["retention.ms"]
    assert retention == str(2 * HOUR_MS)  # ... and left alone


def _described_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def test_subjects_get_backward_compatibility_and_the_registry_guards_schema_evolution(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    names = _names()
    wire = {"wire_format": "confluent", "schema_registry_url": schema_registry_url}
    config = write_config(tmp_path / "dispersion.toml", kafka_bootstrap, names, kafka=wire)
    assert main(["--config", str(config), "--check", "--partitions", "1"]) == 1
    assert f"{names[STATUS_TOPIC]}-value: missing" in capsys.readouterr().out  # --check registers nothing

    assert main(["--config", str(config), "--partitions", "1"]) == 0
    first = capsys.readouterr().out
    assert f"{names[STATUS_TOPIC]}-value: registered (schema id " in first
    assert main(["--config", str(config), "--partitions", "1"]) == 0
    assert f"{names[STATUS_TOPIC]}-value: exists (schema id " in capsys.readouterr().out  # idempotent
    assert main(["--config", str(config), "--check", "--partitions", "1"]) == 0

    registry = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"{names[STATUS_TOPIC]}-value"
    assert registry.get_compatibility(subject) == "BACKWARD"
    released = json.loads(registry_text(STATUS_TOPIC))

    compatible = copy.deepcopy(released)  # a new optional field: readers of the new version read old data
    compatible["fields"].append({"name": "ledger_reference", "type": ["null", "string"], "default": None})
    assert registry.register_schema(subject, Schema(json.dumps(compatible), "AVRO")) > 0

    incompatible = copy.deepcopy(released)  # a new field without a default: old data cannot be read with it
    incompatible["fields"].append({"name": "ledger_account", "type": "string"})
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, Schema(json.dumps(incompatible), "AVRO"))
    assert refused.value.http_status_code == 409
    released_versions = len(schemas.versions(STATUS_TOPIC))
    assert len(registry.get_versions(subject)) == released_versions + 1  # the released versions and the change


def test_a_schema_the_registry_refuses_fails_the_command_clearly(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    names = _names()
    registry = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"{names[STATUS_TOPIC]}-value"
    # Someone else's record already lives under the subject, and BACKWARD forbids replacing it with ours.
    registry.set_compatibility(subject_name=subject, level="BACKWARD")
    registry.register_schema(subject, Schema(registry_text("vrp.payments"), "AVRO"))
    wire = {"wire_format": "confluent", "schema_registry_url": schema_registry_url}
    config = write_config(tmp_path / "dispersion.toml", kafka_bootstrap, names, kafka=wire)
    assert main(["--config", str(config), "--partitions", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dispersion topics: the schema registry refused a version (BACKWARD): ")
    assert "Traceback" not in err
    assert len(registry.get_versions(subject)) == 1
