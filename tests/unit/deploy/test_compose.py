"""docker-compose.yml, Dockerfile and deploy/compose.toml checked without a Docker engine: the services a deployment
needs exist and are wired as documented, every `dispersion ...` command they run names a real subcommand with
options its argparse parser accepts, and the processors' configuration loads with the environment compose gives."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from paths import ROOT

from processor.cli import MODULES
from processor.cli.config import load_config
from processor.devtools.kafka_local import DEFAULT_KAFKA_VERSION
from processor.store import load_cipher

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
BUILT = ("bank-init", "sandbox", "topics", "processor-1", "processor-2", "api", "cli")
CONFIG_IN_CONTAINER = "/etc/dispersion/dispersion.toml"


def _parser(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The argparse parser of a `dispersion` command line and the arguments it parses."""
    sub, rest = words[0], words[1:]
    assert sub in MODULES, f"`dispersion {sub}` is not a subcommand (known: {sorted(MODULES)})"
    factories: dict[str, Callable[[], argparse.ArgumentParser]] = {}
    if sub == "processor":
        from processor.cli.service import parser as processor_parser

        factories[sub] = processor_parser
    elif sub == "sandbox" and rest[:1] == ["init"]:
        from sandbox.init import build_parser as init_parser

        return init_parser(), rest[1:]
    elif sub == "sandbox":
        from sandbox.cli import build_parser as sandbox_parser

        factories[sub] = sandbox_parser
    elif sub == "topics":
        from processor.cli.topics import parser as topics_parser

        factories[sub] = topics_parser
    elif sub == "submit":
        from processor.cli.submit import parser as submit_parser

        factories[sub] = submit_parser
    elif sub == "status":
        from processor.cli.status import parser as status_parser

        factories[sub] = status_parser
    elif sub == "demo":
        from processor.devtools.demo import parser as demo_parser

        factories[sub] = demo_parser
    else:
        raise AssertionError(f"no parser known to this test for `dispersion {sub}`: add it")
    return factories[sub](), rest


def parse(words: list[str]) -> argparse.Namespace:
    """Parse a `dispersion` command line (without the program name) strictly: no abbreviated options."""
    p, rest = _parser(words)
    p.allow_abbrev = False
    p.exit_on_error = False
    try:
        return p.parse_args(rest)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise AssertionError(f"`dispersion {shlex.join(words)}` is refused by its parser: {exc}") from None


def dispersion_commands(service: dict[str, Any]) -> list[list[str]]:
    """Every `dispersion ...` command line a service runs (without the word `dispersion`), shell scripts included."""
    command = service.get("command") or []
    command = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    entrypoint = service.get("entrypoint") or []
    entrypoint = shlex.split(entrypoint) if isinstance(entrypoint, str) else [str(w) for w in entrypoint]
    if entrypoint and entrypoint[-1] == "dispersion":
        return [command]
    if command[:2] == ["sh", "-c"]:
        found: list[list[str]] = []
        for segment in re.split(r"\|\||&&|;", command[2]):
            words = shlex.split(segment)
            if words[:1] == ["exec"]:
                words = words[1:]
            if words[:1] == ["dispersion"]:
                found.append(words[1:])
        return found
    return [command[1:]] if command[:1] == ["dispersion"] else []


def test_every_service_of_the_deployment_exists() -> None:
    assert set(SERVICES) == {"kafka", "postgres", *BUILT}
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")
    assert SERVICES["postgres"]["image"].startswith("postgres:")
    for name in BUILT:
        assert SERVICES[name]["build"] == ".", name
        assert SERVICES[name]["image"] == "dispersion:local", name
    declared = set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(".") or source in declared, (name, volume)


def test_kafka_runs_kraft_with_single_node_settings() -> None:
    # The broker version everything else runs (`dispersion dev kafka`, the tests).
    assert SERVICES["kafka"]["image"] == f"apache/kafka:{DEFAULT_KAFKA_VERSION}" == "apache/kafka:4.3.1"
    env = SERVICES["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # topics come from `dispersion topics`
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert "healthcheck" in SERVICES["kafka"]
    # The broker's data (topics, committed offsets) must live on the named volume, not in the image's /tmp.
    assert f"kafka:{env['KAFKA_LOG_DIRS']}" in SERVICES["kafka"]["volumes"]


def test_every_dispersion_command_is_a_real_subcommand_with_accepted_options() -> None:
    checked = {}
    for name in BUILT:
        commands = dispersion_commands(SERVICES[name])
        assert commands, f"{name} runs no dispersion command"
        for words in commands:
            checked[name] = (words, parse(words))
    assert len(checked) == len(BUILT)


def test_the_processors_form_one_group_and_the_api_serves_http_only() -> None:
    roles = {}
    for name in ("processor-1", "processor-2", "api"):
        (words,) = dispersion_commands(SERVICES[name])
        args = parse(words)
        assert words[0] == "processor"
        assert args.listen == "0.0.0.0:8600"
        roles[name] = (args.role, args.instance)
        env = SERVICES[name]["environment"]
        assert env["DISPERSION_CONFIG"] == CONFIG_IN_CONTAINER
        assert env["DISPERSION_STORE_URL"].startswith("postgresql://dispersion:")
        assert "DISPERSION_STORE_ALLOW_DEV_KEY" not in env  # a real key, the same for every instance
        assert env["DISPERSION_STORE_KEY"].startswith("${DISPERSION_STORE_KEY:?")
        assert SERVICES[name]["depends_on"]["bank-init"]["condition"] == "service_completed_successfully"
        assert SERVICES[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "healthcheck" in SERVICES[name]
    for name in ("processor-1", "processor-2"):  # the consumers wait for the broker and the topics
        assert SERVICES[name]["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert SERVICES[name]["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    # The callback API uses no Kafka: it starts (and stays up) without the broker.
    assert not {"kafka", "topics"} & set(SERVICES["api"]["depends_on"])
    assert roles == {
        "processor-1": ("all", "processor-1"),
        "processor-2": ("all", "processor-2"),
        "api": ("api", "api"),
    }
    # Each name is the static group.instance.id of one container: a service scaled above 1 would share it.
    assert all("deploy" not in SERVICES[name] or SERVICES[name]["deploy"].get("replicas", 1) == 1 for name in roles)
    assert "127.0.0.1:8600:8600" in SERVICES["api"]["ports"]


def _private_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_the_compose_configuration_loads_and_matches_the_services(monkeypatch: pytest.MonkeyPatch) -> None:
    config_path = ROOT / "deploy" / "compose.toml"
    text = config_path.read_text()
    needed = set(re.findall(r'_env = "([A-Z0-9_]+)"', text))
    entrypoint = (ROOT / "deploy" / "entrypoint.sh").read_text()
    environment = SERVICES["processor-1"]["environment"]
    for variable in needed:  # each comes from compose's environment or the entrypoint
        assert variable in environment or f"export {variable}" in entrypoint, variable
    monkeypatch.setenv("DISPERSION_STORE_URL", "postgresql://dispersion:pw@postgres:5432/dispersion")
    monkeypatch.setenv("DISPERSION_SANDBOX_CLIENT_SECRET", "not-a-real-secret")
    monkeypatch.setenv("DISPERSION_SANDBOX_KID", "kid-1")
    monkeypatch.setenv("DISPERSION_SANDBOX_SIGNING_KEY", _private_pem())
    config = load_config(config_path)
    assert config.engine.concurrency >= 1  # the [engine] table is valid
    assert config.processor.store.startswith("postgresql://")
    assert config.kafka.bootstrap_servers == "kafka:9092"
    assert config.kafka.static_membership is True  # restarted containers keep their partitions
    integration = config.integrations["sandbox"]

    (init,) = dispersion_commands(SERVICES["bank-init"])
    init_args = parse(init)
    (sandbox,) = dispersion_commands(SERVICES["sandbox"])
    sandbox_args = parse(sandbox)
    assert integration.client_id == init_args.client_id
    assert integration.redirect_uri == init_args.redirect_uri == f"{config.processor.public_url}/callback"
    assert integration.issuer == integration.resource_server == init_args.sandbox_url == sandbox_args.base_url
    assert sandbox_args.clients == "/var/lib/dispersion/bank/clients.json"
    assert "sandbox.localhost" in SERVICES["sandbox"]["networks"]["default"]["aliases"]
    for name in ("processor-1", "processor-2", "api", "cli"):
        mounts = SERVICES[name]["volumes"]
        assert f"./deploy/compose.toml:{CONFIG_IN_CONTAINER}:ro" in mounts, name
        assert "bank:/var/lib/dispersion/bank:ro" in mounts, name


def test_the_dockerfile_builds_the_distribution_on_python_311_slim() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    # python:3.11-slim unless the build names another base (docker-compose.offline.yml's stand-in).
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", dockerfile, re.MULTILINE)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", dockerfile, re.MULTILINE)
    assert re.search(r"^COPY pyproject\.toml README\.md constraints\.txt \./$", dockerfile, re.MULTILINE)
    # The pinned dependencies get a layer of their own, before the sources: a code change reuses it.
    dependencies = dockerfile.index("RUN pip install -r constraints.txt\n")
    assert dependencies < dockerfile.index("COPY processor ./processor")
    assert "RUN pip install -c constraints.txt . " in dockerfile
    assert "COPY deploy/entrypoint.sh /usr/local/bin/dispersion-entrypoint" in dockerfile
    assert SERVICES["cli"]["entrypoint"][0] == "/usr/local/bin/dispersion-entrypoint"
    for package in ("processor", "sandbox", "consumers", "producers", "schemas"):
        assert f"COPY {package} ./{package}" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not {"processor", "sandbox", "schemas", "pyproject.toml", "README.md", "deploy", "constraints.txt"} & set(
        ignored
    )
    assert ".env" in ignored  # the store key stays out of the image


def test_the_constraints_pin_every_run_time_dependency_at_the_tested_version() -> None:
    from importlib.metadata import version

    spec = importlib.util.spec_from_file_location("constraints_tool", ROOT / "deploy" / "constraints.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, pinned = line.partition("==")
            assert sep and pinned, f"not an exact pin: {line!r}"
            pins[name] = pinned
    closure = tool.closure(ROOT / "pyproject.toml")
    # Every distribution the image installs is pinned, nothing else is, and each pin is what the tests run with.
    assert set(pins) == set(closure), "constraints.txt is stale: python deploy/constraints.py > constraints.txt"
    assert {"confluent-kafka", "psycopg-binary", "uvicorn", "argcomplete", "h11"} <= set(pins)
    assert pins == closure == {name: version(name) for name in pins}


def _interpolate(text: str, environ: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` forms (the ones docker-compose.yml uses)."""

    def substitute(match: re.Match[str]) -> str:
        name, form, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        value = environ.get(name, "")
        if form == ":?" and not value:
            raise AssertionError(f"compose would stop: {name}: {rest}")
        return value or (rest if form == ":-" else "")

    return re.sub(r"\$\{([A-Z0-9_]+)(:[-?])?([^}]*)\}", substitute, text)


def _dotenv(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"{path.name}: not NAME=value: {line!r}"
            values[name.strip()] = value.strip()
    return values


def test_compose_runs_with_the_env_example_copied_to_dotenv() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    example = _dotenv(ROOT / ".env.example")
    assert used == set(example), "every variable compose reads, and only those, is in .env.example"
    with pytest.raises(AssertionError, match="DISPERSION_STORE_KEY"):
        _interpolate(text, {})  # without it compose refuses to start, naming the variable
    services = yaml.safe_load(_interpolate(text, example))["services"]
    environment = services["processor-1"]["environment"]
    assert environment["DISPERSION_STORE_KEY"] == example["DISPERSION_STORE_KEY"]
    load_cipher({"DISPERSION_STORE_KEY": environment["DISPERSION_STORE_KEY"]})  # a key the processor accepts
    password = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert environment["DISPERSION_STORE_URL"] == f"postgresql://dispersion:{password}@postgres:5432/dispersion"
    assert ".env" in (ROOT / ".gitignore").read_text().split()


OFFLINE = yaml.safe_load((ROOT / "docker-compose.offline.yml").read_text())


def test_the_offline_override_changes_images_and_nothing_else() -> None:
    """docker-compose.offline.yml swaps the three pulled images for local stand-ins; every service keeps its
    command, environment, volumes, ports, health check and dependencies."""
    overrides: dict[str, dict[str, Any]] = OFFLINE["services"]
    assert set(overrides) == set(SERVICES)
    assert set(OFFLINE) - {"services"} <= {"x-offline-build"}  # no volume, network or other top-level change
    assert overrides["kafka"] == {"image": f"localhost/dispersion-offline/kafka:{DEFAULT_KAFKA_VERSION}"}
    assert overrides["postgres"] == {"image": "localhost/dispersion-offline/postgres:15"}
    for name in BUILT:
        # The project's own Dockerfile, on the Debian Python stand-in; the image keeps its name.
        assert overrides[name] == {
            "build": {"context": ".", "args": {"PYTHON_IMAGE": "localhost/dispersion-offline/python:3.11"}}
        }, name
    # What each stand-in is built from is next to the override, and says how it differs from the official image.
    notes = (ROOT / "deploy" / "offline" / "README.md").read_text()
    for official in ("apache/kafka:4.3.1", "postgres:16", "python:3.11-slim"):
        assert official in notes
    for dockerfile in ("kafka.Dockerfile", "postgres.Dockerfile", "python.Dockerfile"):
        assert (ROOT / "deploy" / "offline" / dockerfile).is_file()
        assert dockerfile in notes


def test_health_checks_run_the_same_on_every_engine() -> None:
    # podman's Docker-compatible API (4.x) splits the arguments of a ["CMD", ...] test at spaces; a CMD-SHELL
    # string, or CMD arguments without spaces, mean the same thing to Docker and to podman.
    for name, service in SERVICES.items():
        test = service.get("healthcheck", {}).get("test")
        if test is None:
            continue
        kind, *words = test
        if kind == "CMD-SHELL":
            assert len(words) == 1, name
        else:
            assert kind == "CMD" and not any(re.search(r"\s", word) for word in words), (name, test)
    assert SERVICES["processor-1"]["healthcheck"]["test"][0] == "CMD-SHELL"


def test_ci_runs_the_deployment_after_the_tests() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index("bash .ci/test") < run.index("bash .ci/compose")
    script = (ROOT / ".ci" / "compose").read_text()
    # Everything the run created goes, whatever happened.
    assert "trap cleanup EXIT" in script
    assert "down --volumes --remove-orphans" in script
    assert "-f docker-compose.yml -f docker-compose.offline.yml" in script
