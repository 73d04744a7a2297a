"""The configuration on pydantic-settings: `DISPERSION__SECTION__KEY` overrides of any key (the environment wins over
the file), `K_env` still read, `file:line: dotted.key: problem` errors, secrets kept out of errors and reprs, and
the JSON Schema (committed, generated, and understood by Taplo, the engine of the Even Better TOML editor plugin)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from bank_support import key_pair
from paths import ROOT

from processor.cli.config import line_of, load_config, load_kafka_settings
from processor.cli.config_command import main as config_main
from processor.cli.config_command import schema_text
from processor.cli.config_models import json_schema
from processor.domain.settings import ConfigError
from processor.engine.settings import EngineSettings

SECRET = "file-secret-value-0123"
ENV_SECRET = "env-secret-value-4567"

CONFIG = f"""\
[processor]
store = "sqlite:///dispersion.sqlite"
public_url = "http://127.0.0.1:8600"

[kafka]
bootstrap_servers = "file-broker:9092"
group_id = "from-file"

[engine]
concurrency = 4

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
"""


def write(tmp_path: Path, text: str = CONFIG) -> Path:
    (tmp_path / "signing-key.pem").write_text(key_pair().private_pem)
    path = tmp_path / "dispersion.toml"
    path.write_text(text)
    return path


def failure(path: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ or {})
    return str(caught.value)


# -- the environment over the file -----------------------------------------------------------------------------


def test_environment_overrides_nested_keys_and_wins_over_the_file(tmp_path: Path) -> None:
    environ = {
        "DISPERSION__KAFKA__BOOTSTRAP_SERVERS": "env-broker:9092",
        "DISPERSION__KAFKA__GROUP_ID": "from-env",
        "dispersion__kafka__static_membership": "false",  # any case
        "DISPERSION__KAFKA__CLIENT__SASL_PASSWORD": "kafka-pw",  # `_` stands for the `.` of librdkafka's name
        "DISPERSION__INTEGRATIONS__SANDBOX__CLIENT_SECRET": ENV_SECRET,
        "DISPERSION__INTEGRATIONS__SANDBOX__TIMEOUTS__READ": "12.5",
        "DISPERSION__INTEGRATIONS__SANDBOX__ASSERTION_LIFETIME": "90",
        "DISPERSION__ENGINE__CONCURRENCY": "8",
        "DISPERSION__ENGINE__POLL_MAX": "30",
        "DISPERSION__PROCESSOR__PUBLIC_URL": "https://payroll.example.com",
        "DISPERSION_CONFIG": "ignored.toml",  # one underscore: not an override
    }
    config = load_config(write(tmp_path), environ=environ)
    assert config.kafka.bootstrap_servers == "env-broker:9092"
    assert (config.kafka.group_id, config.kafka.static_membership) == ("from-env", False)
    assert config.kafka.client == {"sasl.password": "kafka-pw"}
    sandbox = config.integrations["sandbox"]
    assert sandbox.client_secret.reveal() == ENV_SECRET
    assert sandbox.timeouts.read == 12.5
    assert sandbox.assertion_lifetime == 90
    assert config.engine.concurrency == 8
    assert config.engine.poll_max == 30.0
    assert config.public_url == "https://payroll.example.com"
    without = load_config(write(tmp_path), environ={})
    assert (without.kafka.bootstrap_servers, without.engine.concurrency) == ("file-broker:9092", 4)
    assert without.integrations["sandbox"].client_secret.reveal() == SECRET


def test_environment_adds_keys_and_tables_the_file_lacks(tmp_path: Path) -> None:
    environ = {
        "DISPERSION__INTEGRATIONS__SANDBOX__RETRY__MAX_ATTEMPTS": "3",
        "DISPERSION__KAFKA__TOPICS__PAYROLL_BATCHES": "acme.payroll.batches",
        "DISPERSION__EXPORTS__PLANILLA__DECIMAL_SEPARATOR": ",",
        "DISPERSION__FLOWS__LISTEN": "127.0.0.1:9000",  # a table no model describes: kept raw
    }
    config = load_config(write(tmp_path), environ=environ)
    assert config.integrations["sandbox"].retry.max_attempts == 3
    assert config.kafka.topics == {"payroll.batches": "acme.payroll.batches"}
    assert config.exports == {"planilla": {"decimal_separator": ","}}
    assert config.model_extra == {"flows": {"listen": "127.0.0.1:9000"}}


def test_an_override_reaches_a_table_named_in_another_case(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace("[integrations.sandbox]", "[integrations.Sandbox]"))
    config = load_config(path, environ={"DISPERSION__INTEGRATIONS__SANDBOX__KID": "kid-env"})
    assert list(config.integrations) == ["Sandbox"]
    assert config.integrations["Sandbox"].kid == "kid-env"


def test_env_keys_still_work_and_an_override_beats_them(tmp_path: Path) -> None:
    text = CONFIG.replace(f'client_secret = "{SECRET}"', 'client_secret_env = "BANK_SECRET"')
    path = write(tmp_path, text)
    assert load_config(path, environ={"BANK_SECRET": "via-env-key"}).integrations["sandbox"].client_secret.reveal() == (
        "via-env-key"
    )
    # BANK_SECRET unset but the key overridden: the override wins, the missing variable is not an error
    overridden = load_config(path, environ={"DISPERSION__INTEGRATIONS__SANDBOX__CLIENT_SECRET": ENV_SECRET})
    assert overridden.integrations["sandbox"].client_secret.reveal() == ENV_SECRET
    unset = "integrations.sandbox.client_secret_env: environment variable BANK_SECRET is not set or empty"
    assert failure(path) == f"{path}:16: {unset}"  # once: not again as a missing or mistyped client_secret
    # a K_env key now works for numbers too, and inside [kafka.client]
    numbers = (
        CONFIG.replace("concurrency = 4", 'concurrency_env = "WORKERS"')
        + '\n[kafka.client]\n"sasl.password_env" = "PW"\n'
    )
    config = load_config(write(tmp_path, numbers), environ={"WORKERS": "6", "PW": "kafka-pw"})
    assert config.engine.concurrency == 6
    assert load_kafka_settings(tmp_path / "dispersion.toml", environ={"PW": "x"}).client == {"sasl.password": "x"}


def test_the_file_keeps_its_toml_types_while_environment_text_is_converted(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace("concurrency = 4", 'concurrency = "4"'))
    assert f"{path}:10: engine.concurrency: must be an integer, got '4'" in failure(path)
    message = failure(write(tmp_path), {"DISPERSION__ENGINE__CONCURRENCY": "many"})
    assert "environment DISPERSION__ENGINE__CONCURRENCY: engine.concurrency: must be an integer, got 'many'" in message
    message = failure(write(tmp_path), {"DISPERSION__KAFKA__STATIC_MEMBERSHIP": "sometimes"})
    assert "environment DISPERSION__KAFKA__STATIC_MEMBERSHIP: kafka.static_membership: must be true or false" in message


def test_kafka_only_reading_takes_overrides_and_skips_the_integrations(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace(f'client_secret = "{SECRET}"', 'client_secret_env = "UNSET"'))
    kafka = load_kafka_settings(path, environ={"DISPERSION__KAFKA__BOOTSTRAP_SERVERS": "k:1"})
    assert kafka.bootstrap_servers == "k:1"
    assert kafka.group_id == "from-file"


# -- errors: file, line, key -------------------------------------------------------------------------------------

PEM_INLINE = key_pair().private_pem.strip()
WITH_ERRORS = f"""\
[processor]
stor = "sqlite:///x.sqlite"

[kafka]
groupid = "g"

[integrations.sandbox]
issuer = "http://127.0.0.1:8700"
resource_server = "http://127.0.0.1:8700"
client_id = "client-1"
client_secret = "{SECRET}"
redirect_uri = "http://127.0.0.1:8600/callback"
signing_key = \"\"\"
{PEM_INLINE}
\"\"\"
kid = ""
financial_id = "0015800001041RHAAY"
customer_ip = "localhost"
timeouts = {{ connect = -1 }}
"retry".max_attempts = 0
"""


def test_every_error_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, WITH_ERRORS)
    kid = WITH_ERRORS.splitlines().index('kid = ""') + 1
    assert kid > 40  # after the inline PEM, whose lines are not keys
    lines = failure(path).splitlines()
    assert lines == [
        f"{path}:2: processor.stor: unknown key (did you mean 'store'?); known keys: public_url, store, store_threads",
        f"{path}:5: kafka.groupid: unknown key (did you mean 'group_id'?); known keys: bootstrap_servers, client, "
        "group_id, schema_registry_password, schema_registry_url, schema_registry_username, static_membership, "
        "topics, wire_format",
        f"{path}:{kid}: integrations.sandbox.kid: must not be empty",
        f"{path}:{kid + 2}: integrations.sandbox.customer_ip: must be an IP address, got 'localhost'",
        f"{path}:{kid + 3}: integrations.sandbox.timeouts.connect: must be between 0.001 and 600, got -1",
        f"{path}:{kid + 4}: integrations.sandbox.retry.max_attempts: must be between 1 and 20, got 0",
    ]


def test_a_missing_key_points_at_its_table_and_a_bad_file_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace('kid = "kid-1"\n', ""))
    assert f"{path}:12: integrations.sandbox.kid: is required (or give kid_env)" in failure(path)
    path = write(tmp_path, CONFIG.replace("[engine]", "[engine"))
    assert failure(path).startswith(f"{path}:9: not valid TOML (")
    path = write(tmp_path, CONFIG.replace("concurrency = 4", "concurrency = 4\npoll_first = 9.0\npoll_max = 2.0"))
    assert f"{path}:12: engine.poll_max: must not be smaller than poll_first" in failure(path)


def test_the_line_lookup_understands_toml_layouts() -> None:
    text = """\
# comment = 1
[a]
x = 1
b.c = 2
"quoted key" = 3
secret_env = "VAR"
[ a . "d.e" ]   # a header with a comment
y = { z = 1 }
[[arr]]
w = 1
"""
    lines = text.splitlines()
    assert line_of(lines, ("a",)) == 2
    assert line_of(lines, ("a", "x")) == 3
    assert line_of(lines, ("a", "b", "c")) == 4
    assert line_of(lines, ("a", "b")) == 4
    assert line_of(lines, ("a", "quoted key")) == 5
    assert line_of(lines, ("a", "secret")) == 6  # given as secret_env
    assert line_of(lines, ("a", "missing")) == 2  # not written: its table's line
    assert line_of(lines, ("a", "d.e", "y", "z")) == 8
    assert line_of(lines, ("arr", "w")) == 10
    assert line_of(lines, ("nowhere",)) is None


def test_overrides_that_cannot_be_used_name_their_variable(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert (
        failure(path, {"DISPERSION__ENGINE": "fast"})
        == "environment DISPERSION__ENGINE: engine: must be a table, not str"
    )
    assert (
        failure(path, {"DISPERSION__ENGINE": "{fast"})
        == "environment DISPERSION__ENGINE: engine: must be a table, not str"
    )
    assert (
        failure(path, {"DISPERSION__ADMIN": "on"}) == "environment DISPERSION__ADMIN: admin: must be a table, not str"
    )
    message = failure(path, {"DISPERSION__INTEGRATIONS__BANKX__KID": "k"})
    assert "environment DISPERSION__INTEGRATIONS__BANKX__...: integrations.bankx.issuer: is required" in message
    assert load_config(path, environ={"DISPERSION__ENGINE": '{"concurrency": 3}'}).engine.concurrency == 3


def test_a_table_in_the_environment_must_be_json_and_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text("integrations = {}\n")
    message = failure(path, {"DISPERSION__KAFKA__TOPICS": "not a table"})
    assert "environment DISPERSION__KAFKA__TOPICS: kafka.topics: must be a table, not str" in message
    assert f"{path}:1: integrations: at least one [integrations.NAME] table is required" in message


# -- secrets -----------------------------------------------------------------------------------------------------


def test_secrets_stay_out_of_errors_and_reprs(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG.replace('kid = "kid-1"', 'kid = ""'))
    environ = {
        "DISPERSION__INTEGRATIONS__SANDBOX__CLIENT_SECRET": ENV_SECRET,
        "DISPERSION__PROCESSOR__STORE": "mysql://app:db-password@db/x",
        "DISPERSION__KAFKA__SCHEMA_REGISTRY_PASSWORD": "registry-password",
        "DISPERSION__KAFKA__SCHEMA_REGISTRY_URL": "ftp://user:url-password@registry",
    }
    message = failure(path, environ)
    assert "processor.store: must be a sqlite:/// or postgresql:// address, got 'mysql://app:***@db/x'" in message
    assert "kafka.schema_registry_url: must be an absolute http(s) address, got 'ftp://user:***@registry'" in message
    for secret in (SECRET, ENV_SECRET, "db-password", "registry-password", "url-password"):
        assert secret not in message
    without_path = write(tmp_path, CONFIG.replace('signing_key_path = "signing-key.pem"\n', ""))
    bad_key = failure(without_path, {"DISPERSION__INTEGRATIONS__SANDBOX__SIGNING_KEY": f"{ENV_SECRET}-not-a-pem"})
    assert bad_key == (
        "environment DISPERSION__INTEGRATIONS__SANDBOX__SIGNING_KEY: integrations.sandbox.signing_key: "
        "not an unencrypted PEM private key (ValueError)"
    )
    wrong_type = failure(write(tmp_path, CONFIG.replace(f'"{SECRET}"', "12345678")))
    assert "integrations.sandbox.client_secret: must be a string, not int" in wrong_type
    assert "12345678" not in wrong_type

    registry = {"URL": "http://registry:8081", "USERNAME": "u", "PASSWORD": "rp"}
    settings = load_config(write(tmp_path), {f"DISPERSION__KAFKA__SCHEMA_REGISTRY_{k}": v for k, v in registry.items()})
    assert settings.kafka.schema_registry_password is not None
    assert settings.kafka.schema_registry_password.reveal() == "rp"
    shown = repr(settings) + str(settings)
    assert SECRET not in shown
    assert "'rp'" not in shown
    assert "Secret('********')" in shown


# -- the JSON Schema ---------------------------------------------------------------------------------------------


def test_the_committed_schema_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    committed = (ROOT / "docs" / "dispersion.schema.json").read_text()
    assert committed == schema_text(), "stale: dispersion config schema > docs/dispersion.schema.json"
    assert config_main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


def _documents(tmp_path: Path) -> dict[str, dict[str, Any]]:
    from sandbox.init import main as init_main

    assert init_main([str(tmp_path / "init"), "--sandbox-url", "http://127.0.0.1:8711"]) == 0
    operations = (ROOT / "docs" / "operations.md").read_text()
    sample = operations.split("## Configuration", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    return {
        "sandbox init": tomllib.loads((tmp_path / "init" / "dispersion.toml").read_text()),
        "deploy/compose.toml": tomllib.loads((ROOT / "deploy" / "compose.toml").read_text()),
        "docs/operations.md": tomllib.loads(sample),
        "this test": tomllib.loads(CONFIG),
    }


def test_the_schema_accepts_the_shipped_configurations_and_refuses_mistakes(tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    for name, document in _documents(tmp_path).items():
        assert list(validator.iter_errors(document)) == [], name
    good = tomllib.loads(CONFIG)
    for change, expected in [
        (lambda d: d["integrations"]["sandbox"].update(kid=""), "should be non-empty"),
        (lambda d: d["integrations"]["sandbox"].pop("client_secret"), "is not valid under any of the given schemas"),
        (lambda d: d["integrations"]["sandbox"].update(token_auth_method="tls"), "is not one of"),
        (lambda d: d["engine"].update(concurrency=0), "less than the minimum"),
        (lambda d: d["kafka"].update(groupid="g"), "Additional properties are not allowed"),
        (lambda d: d.update(integrations={}), "should be non-empty"),
    ]:
        document = json.loads(json.dumps(good))
        change(document)
        errors = [error.message for error in validator.iter_errors(document)]
        assert any(expected in error for error in errors), (expected, errors)


def test_taplo_checks_a_file_with_the_schema_directive(tmp_path: Path) -> None:
    taplo = shutil.which("taplo")
    assert taplo, "taplo is a dev dependency (pip install -e '.[dev]')"
    directive = f"#:schema {(ROOT / 'docs' / 'dispersion.schema.json').as_uri()}\n"
    good = tmp_path / "good.toml"
    good.write_text(directive + CONFIG.replace(f'client_secret = "{SECRET}"', 'client_secret_env = "BANK_SECRET"'))
    bad = tmp_path / "bad.toml"
    bad.write_text(directive + CONFIG.replace("concurrency = 4", "concurency = 4"))
    ok = subprocess.run([taplo, "check", str(good)], capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([taplo, "check", str(bad)], capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1
    assert "'concurency' was unexpected" in refused.stderr
    # the repository's .taplo.toml applies the schema to deploy/compose.toml without a directive
    shipped = subprocess.run(
        [taplo, "check", "deploy/compose.toml"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert shipped.returncode == 0, shipped.stderr
    assert "found configuration file" in shipped.stderr


def test_the_consent_watch_interval_is_read_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, CONFIG.replace("concurrency = 4", "concurrency = 4\nconsent_watch_interval = 300"))
    assert load_config(path, environ={}).engine.consent_watch_interval == 300.0
    assert EngineSettings().consent_watch_interval == 60.0
    path = write(tmp_path, CONFIG.replace("concurrency = 4", "concurrency = 4\nconsent_watch_interval = 0.5"))
    assert config_main(["check", "--config", str(path)]) == 2
    assert "engine.consent_watch_interval: must be between 1 and 86400, got 0.5" in capsys.readouterr().err


def test_the_store_threads_are_read_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load_config(write(tmp_path), environ={}).processor.store_threads == 2
    with_one = CONFIG.replace(
        'public_url = "http://127.0.0.1:8600"', 'public_url = "http://127.0.0.1:8600"\nstore_threads = 1'
    )
    assert load_config(write(tmp_path, with_one), environ={}).processor.store_threads == 1
    path = write(tmp_path, with_one.replace("store_threads = 1", "store_threads = 0"))
    assert config_main(["check", "--config", str(path)]) == 2
    assert "processor.store_threads: must be between 1 and 32, got 0" in capsys.readouterr().err


def test_config_check_reports_ok_or_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert config_main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok (integrations: sandbox)\n"
    path = write(tmp_path, CONFIG.replace("concurrency = 4", "concurrency = 0"))
    assert config_main(["check", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"{path}:10: engine.concurrency: must be between 1 and 10000, got 0\n"


def test_an_integrations_timezone_is_an_iana_name_and_defaults_to_utc(tmp_path: Path) -> None:
    assert load_config(write(tmp_path), {}).integrations["sandbox"].timezone == "UTC"
    zoned = load_config(write(tmp_path), {"DISPERSION__INTEGRATIONS__SANDBOX__TIMEZONE": "America/Guatemala"})
    integration = zoned.integrations["sandbox"]
    assert integration.timezone == "America/Guatemala" and str(integration.calendar.zone) == "America/Guatemala"
    message = failure(write(tmp_path), {"DISPERSION__INTEGRATIONS__SANDBOX__TIMEZONE": "Mars/Olympus"})
    assert message.endswith(
        "integrations.sandbox.timezone: must be an IANA time zone name such as 'UTC' or 'America/Guatemala', "
        "got 'Mars/Olympus'"
    )


def test_config_check_runs_the_checks_the_processor_runs_on_admin_and_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for table, key in (
        ('[console]\noperators = { ana = "scrypt:16384:8:1:c2FsdA:aGFzaA" }\nsession_key = "short"\n', "session_key"),
        ('[admin]\ntoken_sha256 = "not-hex"\n', "admin.token_sha256"),
    ):
        path = write(tmp_path, CONFIG + "\n" + table)
        assert config_main(["check", "--config", str(path)]) == 2
        assert key in capsys.readouterr().err


KINDS = [  # (what is wrong, the file's change: (old, new), environment, the message, after `file[:line]: `)
    ("unknown key", ("concurrency = 4", "concurency = 4"), {}, "10: engine.concurency: unknown key (did you mean"),
    ("missing key", ('kid = "kid-1"\n', ""), {}, "12: integrations.sandbox.kid: is required (or give kid_env)"),
    ("empty text", ('kid = "kid-1"', 'kid = " "'), {}, "18: integrations.sandbox.kid: must not be empty"),
    ("not a string", ('kid = "kid-1"', "kid = 1"), {}, "18: integrations.sandbox.kid: must be a string, not int"),
    ("not an integer", ("concurrency = 4", 'concurrency = "4"'), {}, "10: engine.concurrency: must be an integer"),
    ("not a number", ("concurrency = 4", 'poll_first = "x"'), {}, "10: engine.poll_first: must be a number, got 'x'"),
    ("not a flag", ('group_id = "from-file"', 'static_membership = "yes"'), {}, "7: kafka.static_membership: must "),
    ("not a table", ("[processor]", "telemetry = 4\n[processor]"), {}, "1: telemetry: must be a table, not int"),
    ("out of range", ("concurrency = 4", "concurrency = 0"), {}, "10: engine.concurrency: must be between 1 and"),
    ("not a choice", ('kid = "kid-1"', 'kid = "k"\ntoken_auth_method = "tls"'), {}, "19: integrations.sandbox."),
    ("keys that join", ("concurrency = 4", "retry_first = 9\nretry_max = 5"), {}, "11: engine.retry_max: must not be"),
    ("not an address", ('"http://127.0.0.1:8600"', '"127.0.0.1:8600"'), {}, "3: processor.public_url: must be an"),
    ("no integration", ("[integrations.sandbox]", "[other]"), {}, "integrations: at least one [integrations.NAME]"),
    ("unset K_env", ('kid = "kid-1"', 'kid_env = "KID"'), {}, "18: integrations.sandbox.kid_env: environment variable"),
    (
        "K_env and K",
        ('kid = "kid-1"', 'kid = "k"\nkid_env = "KID"'),
        {},
        "19: integrations.sandbox.kid_env: give either",
    ),
    (
        "K_env not a name",
        ('kid = "kid-1"', "kid_env = 3"),
        {},
        "18: integrations.sandbox.kid_env: must name an environ",
    ),
    (
        "bad secret form",
        ('"file-secret-value-0123"', '""'),
        {},
        "16: integrations.sandbox.client_secret: must not be e",
    ),
    ("unreadable key", ('"signing-key.pem"', '"absent.pem"'), {}, "19: integrations.sandbox.signing_key_path: cannot "),
    ("bad override", ("", ""), {"DISPERSION__ENGINE__CONCURRENCY": "x"}, "DISPERSION__ENGINE__CONCURRENCY: engine."),
    ("override no table", ("", ""), {"DISPERSION__KAFKA": "x"}, "environment DISPERSION__KAFKA: kafka: must be a tab"),
    ("too short", ("", "[admin]\ntoken = 'short'\n"), {}, "admin.token: must be at least 16 characters"),
    ("not an option", ("", "[controls]\nchanged_accounts = 'maybe'\n"), {}, "'hold', 'flag', 'off', got 'maybe'"),
    ("open bound", ("", "[console]\nsession_hours = 0\n"), {}, "23: console.session_hours: must be more than 0 and"),
    ("bad name", ("", f"[admin.tokens.'a b']\ntoken_sha256 = '{'0' * 64}'\nrole = 'viewer'\n"), {}, 'a b": a name is'),
    ("not a hash", ("", "[console.operators.ana]\npassword = 'plain'\n"), {}, "22: console.operators.ana: not of the"),
    ("registry", ('"from-file"', '"g"\nschema_registry_username = "u"'), {}, "5: kafka: schema_registry_username/pas"),
]


@pytest.mark.parametrize(("kind", "change", "environ", "message"), KINDS, ids=[kind[0] for kind in KINDS])
def test_each_kind_of_problem_has_its_message(
    tmp_path: Path, kind: str, change: tuple[str, str], environ: dict[str, str], message: str
) -> None:
    old, new = change
    text = CONFIG.replace(old, new) if old else CONFIG + new
    assert text != CONFIG or environ, kind
    assert message in failure(write(tmp_path, text), environ)


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    assert failure(tmp_path / "absent.toml") == (
        f"{tmp_path / 'absent.toml'}: cannot read the configuration file (No such file or directory)"
    )
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[processor]\n")
    assert failure(binary) == f"{binary}: cannot read the configuration file (not UTF-8 text)"
    broken = write(tmp_path, CONFIG.replace("[engine]", "[engine"))
    assert failure(broken).startswith(f"{broken}:9: not valid TOML (")
