"""`dispersion sandbox init DIR`: the key pair, clients file and processor configuration it writes."""

from __future__ import annotations

import json
import stat
import time
import tomllib
from pathlib import Path

import jwt
import pytest

from sandbox.clients import ClientRegistry
from sandbox.init import FINANCIAL_ID, main
from sandbox.oauth.assertions import Policy, verify_assertion

AGREED_KEYS = {
    "processor": ["store", "public_url"],
    "kafka": ["bootstrap_servers"],
    "integrations.sandbox": [
        "issuer",
        "resource_server",
        "client_id",
        "client_secret",
        "redirect_uri",
        "kid",
        "signing_key_path",
        "financial_id",
        "customer_ip",
        "tpp_name",
        "token_auth_method",
        "grant_parameter",
        "assertion_signing",
    ],
    "console": ["session_key"],
    "console.operators.operator": ["password", "role"],
    "admin.tokens.operator": ["token_sha256", "role"],
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_a_working_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "dev"
    rc = main([str(target), "--client-id", "acme", "--sandbox-url", "http://127.0.0.1:9900/"])
    assert rc == 0
    out = capsys.readouterr().out
    for name in ("signing-key.pem", "public-key.pem", "clients.json", "dispersion.toml"):
        assert str(target / name) in out
    assert f"dispersion sandbox --host 127.0.0.1 --port 9900 --clients {target / 'clients.json'}" in out
    assert mode(target / "signing-key.pem") == 0o600
    assert mode(target / "clients.json") == 0o600
    assert mode(target / "dispersion.toml") == 0o600

    registry = ClientRegistry.load(target / "clients.json")
    client = registry.get("acme")
    assert client is not None
    assert client.redirect_uris == ("http://127.0.0.1:8600/callback",)
    assert client.callback_url is None
    assert len(client.client_secret) >= 32
    assert client.public_key_pem == (target / "public-key.pem").read_text()

    config = tomllib.loads((target / "dispersion.toml").read_text())
    sandbox = config["integrations"]["sandbox"]
    assert config["processor"] == {
        "store": f"sqlite:///{target}/dispersion.sqlite",
        "public_url": "http://127.0.0.1:8600",
    }
    assert config["kafka"] == {"bootstrap_servers": ""}
    assert sandbox == {
        "issuer": "http://127.0.0.1:9900",
        "resource_server": "http://127.0.0.1:9900",
        "client_id": "acme",
        "client_secret": client.client_secret,
        "redirect_uri": "http://127.0.0.1:8600/callback",
        "kid": client.kid,
        "signing_key_path": str(target / "signing-key.pem"),
        "financial_id": FINANCIAL_ID,
        "customer_ip": "127.0.0.1",
        "tpp_name": "Dispersion",
        "token_auth_method": "private_key_jwt",
        "grant_parameter": "grand_type",
        "assertion_signing": "local",
    }

    # The private key signs assertions the sandbox accepts for this client.
    now = time.time()
    assertion = jwt.encode(
        {"iss": "acme", "sub": "acme", "aud": sandbox["issuer"], "iat": int(now), "exp": int(now) + 60, "jti": "j"},
        Path(sandbox["signing_key_path"]).read_text(),
        algorithm="PS256",
        headers={"kid": sandbox["kid"]},
    )
    policy = Policy(issuer=sandbox["issuer"], now=now, max_lifetime=3600, clock_skew=30, max_age=300)
    assert verify_assertion(assertion, client, policy).client_id == "acme"


def test_configuration_keeps_the_agreed_layout(tmp_path: Path) -> None:
    assert main([str(tmp_path)]) == 0
    sections: dict[str, list[str]] = {}
    current = ""
    for line in (tmp_path / "dispersion.toml").read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
        elif "=" in line:
            sections[current].append(line.split("=", 1)[0].strip())
    assert sections == AGREED_KEYS


def test_options_are_written(tmp_path: Path) -> None:
    rc = main(
        [
            str(tmp_path),
            "--redirect-uri",
            "https://tpp.example:8443/cb",
            "--callback-url",
            "http://127.0.0.1:8600/bank-redirects",
        ]
    )
    assert rc == 0
    client = json.loads((tmp_path / "clients.json").read_text())["clients"][0]
    assert client["redirect_uris"] == ["https://tpp.example:8443/cb"]
    assert client["callback_url"] == "http://127.0.0.1:8600/bank-redirects"
    assert client["client_id"].startswith("dispersion-")
    config = tomllib.loads((tmp_path / "dispersion.toml").read_text())
    assert config["processor"]["public_url"] == "https://tpp.example:8443"
    assert config["integrations"]["sandbox"]["issuer"] == "http://127.0.0.1:8700"


def test_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main([str(tmp_path)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert main([str(tmp_path), "--force"]) == 0
    assert (tmp_path / "signing-key.pem").read_bytes() != before["signing-key.pem"]
    assert mode(tmp_path / "signing-key.pem") == 0o600


def test_one_existing_file_is_enough_to_refuse(tmp_path: Path) -> None:
    (tmp_path / "clients.json").write_text("{}")
    assert main([str(tmp_path)]) == 1
    assert (tmp_path / "clients.json").read_text() == "{}"
    assert not (tmp_path / "signing-key.pem").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--client-id", "a:b"],
        ["--client-id", ""],
        ["--redirect-uri", "not-a-url"],
        ["--sandbox-url", "ftp://x"],
        ["--callback-url", "/relative"],
    ],
)
def test_bad_arguments(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "d"), *args]) == 2
    assert "dispersion sandbox init:" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
