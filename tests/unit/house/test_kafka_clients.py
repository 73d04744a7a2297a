"""One Kafka client factory (`processor/kafka/clients.py`): no other module of the project or its benchmarks
constructs a confluent-kafka `Producer`, `Consumer`, `AdminClient` or `SchemaRegistryClient` (that one is built in
`processor/kafka/wire.py`), so every producer gets the Java client's partitioner (`murmur2_random`) and every client
the deployment's settings. Found by reading the sources (calls of those names, imported from confluent_kafka), so a
new module that builds its own client fails here. Tests may build plain clients: they play the ERP or the
operator's own tools."""

from __future__ import annotations

import ast

from paths import ROOT

PACKAGES = ("processor", "consumers", "producers", "schemas", "benchmarks")
CLIENTS = frozenset({"Producer", "Consumer", "AdminClient", "SchemaRegistryClient"})
FACTORIES = (ROOT / "processor" / "kafka" / "clients.py", ROOT / "processor" / "kafka" / "wire.py")


def client_constructions(source: str) -> list[int]:
    """Lines of `source` that call a confluent-kafka client class imported under its own name."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("confluent_kafka")
        for alias in node.names
        if alias.name in CLIENTS
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported
    ]


def test_the_finder_sees_a_construction() -> None:
    source = "from confluent_kafka import Producer as P, KafkaError\nx = P({})\ny = KafkaError(1)\n"
    assert client_constructions(source) == [2]


def test_only_the_factory_builds_kafka_clients() -> None:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert all(factory in files for factory in FACTORIES)
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in files
        if path not in FACTORIES
        for line in client_constructions(path.read_text())
    ]
    assert not found, "build Kafka clients with processor.kafka.clients (new_producer/new_consumer/new_admin):\n" + (
        "\n".join(found)
    )
    assert all(client_constructions(factory.read_text()) for factory in FACTORIES)  # and the factories do
