"""The configuration file: the layout `sandbox init` writes, env secrets, validation messages, reprs."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from bank_support import integration_table, key_pair, load
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from processor.bank.integration import RetrySettings, TimeoutSettings
from processor.cli.config import ConfigError, load_config
from processor.domain.settings import Secret, redact_url

SECRET = "s3cret-value-for-tests"


def write_config(tmp_path: Path, *, extra_integration: str = "", extra: str = "") -> Path:
    """A config file in the exact shape `dispersion sandbox init DIR` writes, key in a file beside it."""
    (tmp_path / "signing-key.pem").write_text(key_pair().private_pem)
    text = f"""
[processor]
store = "sqlite:///{tmp_path}/dispersion.sqlite"
public_url = "http://127.0.0.1:8600"

[kafka]
bootstrap_servers = ""

[integrations.sandbox]
issuer = "http://127.0.0.1:8700"
resource_server = "http://127.0.0.1:8700"
client_id = "client-1"
client_secret = "{SECRET}"
redirect_uri = "http://127.0.0.1:8600/callback"
kid = "kid-1"
signing_key_path = "signing-key.pem"
financial_id = "0015800001041RHAAY"
customer_ip = "127.0.0.1"
tpp_name = "Dispersion"
token_auth_method = "private_key_jwt"
grant_parameter = "grand_type"
assertion_signing = "local"
{extra_integration}
{extra}
"""
    path = tmp_path / "dispersion.toml"
    path.write_text(text)
    return path


def parse(table: dict[str, Any], environ: dict[str, str] | None = None, **top: Any) -> Any:
    return load({"integrations": {"sandbox": table}, **top}, environ)


def test_sandbox_init_layout_loads_with_defaults(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path), environ={})
    assert config.processor.store == f"sqlite:///{tmp_path}/dispersion.sqlite"
    assert config.processor.public_url == "http://127.0.0.1:8600"
    assert config.kafka.bootstrap_servers == ""
    sb = config.integrations["sandbox"]
    assert sb.name == "sandbox"
    assert sb.issuer == "http://127.0.0.1:8700"
    assert sb.client_id == "client-1"
    assert sb.client_secret.reveal() == SECRET
    assert sb.signing_key_path == str(tmp_path / "signing-key.pem")  # relative to the config file's folder
    assert sb.signing_key_pem.reveal() == key_pair().private_pem
    assert sb.token_auth_method == "private_key_jwt"
    assert sb.grant_parameter == "grand_type"
    assert sb.assertion_signing == "local"
    assert sb.timeouts == TimeoutSettings()
    assert sb.retry == RetrySettings()
    assert sb.assertion_lifetime == 60
    assert sb.max_connections == 16
    assert base64.b64decode(sb.basic_credential().reveal()).decode() == f"client-1:{SECRET}"


def test_optional_timeouts_and_retry_tables(tmp_path: Path) -> None:
    extra = """
[integrations.sandbox.timeouts]
connect = 2
read = 12.5

[integrations.sandbox.retry]
max_attempts = 3
base_delay = 0.1
"""
    sb = load_config(write_config(tmp_path, extra=extra), environ={}).integrations["sandbox"]
    assert sb.timeouts == TimeoutSettings(connect=2.0, read=12.5, write=30.0, pool=5.0)
    assert sb.retry.max_attempts == 3
    assert sb.retry.base_delay == 0.1
    assert sb.retry.max_delay == RetrySettings().max_delay


def test_secrets_from_environment() -> None:
    table = integration_table(client_secret=None, signing_key=None, client_secret_env="BANK_SECRET")
    table["signing_key_env"] = "BANK_KEY"
    env = {"BANK_SECRET": "from-env", "BANK_KEY": key_pair().private_pem}
    sb = parse(table, env).integrations["sandbox"]
    assert sb.client_secret.reveal() == "from-env"
    assert sb.signing_key_pem.reveal() == key_pair().private_pem
    assert sb.signing_key_path is None


def test_any_string_key_may_come_from_environment() -> None:
    table = integration_table(client_id=None, client_id_env="CID")
    config = parse(table, {"CID": "cid-env", "DSN": "postgresql://u:pw@db/x"}, processor={"store_env": "DSN"})
    assert config.integrations["sandbox"].client_id == "cid-env"
    assert config.processor.store == "postgresql://u:pw@db/x"


@pytest.mark.parametrize(
    ("table_changes", "env", "message"),
    [
        ({"client_secret_env": "NOPE"}, {}, "integrations.sandbox.client_secret_env: give either client_secret or"),
        ({"client_secret": None, "client_secret_env": "NOPE"}, {}, "environment variable NOPE is not set"),
        (
            {"client_secret": None, "client_secret_env": "EMPTY"},
            {"EMPTY": ""},
            "environment variable EMPTY is not set or empty",
        ),
        ({"client_secret": None, "client_secret_env": 3}, {}, "must name an environment variable"),
        ({"client_secret": None}, {}, "integrations.sandbox.client_secret: is required (or give client_secret_env)"),
        ({"kid": ""}, {}, "integrations.sandbox.kid: must not be empty"),
        ({"issuer": "127.0.0.1:8700"}, {}, "integrations.sandbox.issuer: must be an absolute http(s) address"),
        (
            {"token_auth_method": "tls"},
            {},
            "token_auth_method: must be one of 'private_key_jwt', 'client_secret_basic'",
        ),
        ({"grant_parameter": "grnt_type"}, {}, "integrations.sandbox.grant_parameter: must be one of"),
        ({"assertion_signing": "cloud"}, {}, "integrations.sandbox.assertion_signing: must be one of"),
        ({"customer_ip": "localhost"}, {}, "integrations.sandbox.customer_ip: must be an IP address"),
        ({"clent_secret": "x"}, {}, "integrations.sandbox.clent_secret: unknown key (did you mean 'client_secret'?)"),
        ({"assertion_lifetime": 0}, {}, "integrations.sandbox.assertion_lifetime: must be between 5 and 3600"),
        ({"assertion_lifetime": "60"}, {}, "assertion_lifetime: must be an integer"),
        ({"max_connections": 0}, {}, "integrations.sandbox.max_connections: must be between 1 and 1000"),
        ({"signing_key": "not a pem"}, {}, "integrations.sandbox.signing_key: not an unencrypted PEM private key"),
        ({"signing_key_path": "/x.pem"}, {}, "give either signing_key or signing_key_path"),
        ({"timeouts": {"connect": -1}}, {}, "integrations.sandbox.timeouts.connect: must be between"),
        (
            {"timeouts": {"conect": 1}},
            {},
            "integrations.sandbox.timeouts.conect: unknown key (did you mean 'connect'?)",
        ),
        ({"retry": {"max_attempts": 0}}, {}, "integrations.sandbox.retry.max_attempts: must be between 1 and 20"),
        ({"retry": {"base_delay": 5, "max_delay": 1}}, {}, "retry.max_delay: must not be smaller than base_delay"),
    ],
)
def test_validation_names_the_key(table_changes: dict[str, Any], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(integration_table(**table_changes), env)
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)


def test_missing_key_file_and_non_rsa_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"integrations\.sandbox\.signing_key_path: cannot read .*missing\.pem"):
        load(
            {"integrations": {"sandbox": integration_table(signing_key=None, signing_key_path="missing.pem")}},
            folder=tmp_path,
        )
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    with pytest.raises(ConfigError, match="must be an RSA private key"):
        parse(integration_table(signing_key=ec_pem))


def test_top_level_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one"):
        load({"processor": {}})
    with pytest.raises(ConfigError, match=r"processor\.store: must be a sqlite:/// or postgresql:// address"):
        parse(integration_table(), processor={"store": "mysql://u:pw@h/db"})
    with pytest.raises(ConfigError, match=r"processor\.stor: unknown key \(did you mean 'store'\?\)"):
        parse(integration_table(), processor={"stor": "x"})
    bad = tmp_path / "bad.toml"
    bad.write_text("[processor\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read the configuration file"):
        load_config(tmp_path / "absent.toml")


def test_other_sections_are_kept_for_their_owners() -> None:
    config = parse(integration_table(), kafka={"bootstrap_servers": " k:9092 ", "group_id": "g"}, flows={"x": 1})
    assert config.kafka.bootstrap_servers == "k:9092"
    assert config.kafka.group_id == "g"
    assert config.model_extra == {"flows": {"x": 1}}


def test_repr_never_shows_secrets() -> None:
    table = integration_table(client_secret="top-secret-value")
    config = parse(table, processor={"store": "postgresql://app:db-password@db:5432/x"})
    shown = repr(config) + str(config) + repr(config.integrations["sandbox"])
    assert "top-secret-value" not in shown
    assert "db-password" not in shown
    assert "PRIVATE KEY" not in shown
    assert config.integrations["sandbox"].basic_credential().reveal() not in shown
    assert "Secret('********')" in shown
    assert "postgresql://app:***@db:5432/x" in shown


def test_secret_and_redaction_helpers() -> None:
    assert str(Secret("abc")) == "Secret('********')"
    assert Secret("abc") == Secret("abc") and Secret("abc") != Secret("abd")
    assert redact_url("sqlite:///tmp/x.sqlite") == "sqlite:///tmp/x.sqlite"
    assert redact_url("postgresql://u:p@h/db?sslmode=require") == "postgresql://u:***@h/db?sslmode=require"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p@DB-Host:5432/x", "postgresql://u:***@DB-Host:5432/x"),  # the host as written
        ("postgresql://u:p@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"),  # a list of hosts
        ("postgresql://u:p@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # a raw @ in the password
        ("postgresql://u:p/w@h/db", "postgresql://u:***@h/db"),  # a raw / in the password
        ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),  # no password: nothing to hide
        ("postgresql://u:p@h/db?application_name=a@b", "postgresql://u:***@h/db?application_name=a@b"),
        ("sqlite:///tmp/a:b@c.sqlite", "sqlite:///tmp/a:b@c.sqlite"),  # a path, not a user part
    ],
)
def test_redact_url_hides_the_whole_password_and_keeps_the_rest_as_written(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_what_sandbox_init_writes_loads_unchanged(tmp_path: Path) -> None:
    from sandbox.init import main as init_main

    assert init_main([str(tmp_path / "dir"), "--sandbox-url", "http://127.0.0.1:8711"]) == 0
    config = load_config(tmp_path / "dir" / "dispersion.toml", environ={})
    sb = config.integrations["sandbox"]
    assert sb.issuer == sb.resource_server == "http://127.0.0.1:8711"
    assert Path(str(sb.signing_key_path)) == (tmp_path / "dir" / "signing-key.pem").resolve()
    assert sb.redirect_uri == "http://127.0.0.1:8600/callback"
    assert config.processor.store.startswith("sqlite:///")
