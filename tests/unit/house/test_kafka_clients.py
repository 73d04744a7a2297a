"""One Kafka client factory (`producers/clients.py`): no other module of the project constructs a confluent-kafka
`Producer`, `Consumer` or `AdminClient`, so every producer gets the Java client's partitioner (`murmur2_random`)
and every client the deployment's settings. Found by reading the sources (calls of those names, imported from
confluent_kafka), so a new module that builds its own client fails here."""

from __future__ import annotations

import ast

from paths import ROOT

PACKAGES = ("processor", "consumers", "producers", "schemas")
CLIENTS = frozenset({"Producer", "Consumer", "AdminClient"})
FACTORY = ROOT / "producers" / "clients.py"


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
    assert FACTORY in files
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in files
        if path != FACTORY
        for line in client_constructions(path.read_text())
    ]
    assert not found, "build Kafka clients with producers.clients (new_producer/new_consumer/new_admin):\n" + (
        "\n".join(found)
    )
    assert client_constructions(FACTORY.read_text())  # and the factory does
