"""Shared by the command-line tests (`submit`, `status`, `topics`): a sample ERP export, the origin options, a
captured run, and a configuration file with a `[kafka]` table and one integration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bank_support import key_pair

ORIGIN = ("--origin-account", "3001234567", "--origin-currency", "GTQ")
EXPORT = """employee_reference,account_number,account_type,amount,currency,email,concept
E-1001,2001002001,SAVINGS,8500.00,GTQ,ana.lopez@example.com,Payroll November
E-1002,2001002002,SAVINGS,7250.50,GTQ,bruno.diaz@example.com,Payroll November
E-1003,2001002003,MONETARY,12000.00,GTQ,carla.mendez@example.com,Payroll November
E-1004,2001002004,SAVINGS,0.01,GTQ,dora.ruiz@example.com,Payroll November
E-1005,2001002005,SAVINGS,15475.99,GTQ,eva.soto@example.com,Payroll November
"""


@dataclass
class Run:
    """What a command returned and printed."""

    code: int
    out: str
    err: str


def write_config(
    path: Path,
    bootstrap: str,
    topics: Mapping[str, str] | None = None,
    *,
    secret_env: str | None = None,
    kafka: Mapping[str, str] | None = None,
) -> Path:
    """A configuration file with one integration (`sandbox`) and the given `[kafka]` table (`kafka`: more string
    keys of it, e.g. `wire_format`); with `secret_env`, the client secret comes from that environment variable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "signing-key.pem").write_text(key_pair().private_pem)
    mapping = "".join(f'"{logical}" = "{physical}"\n' for logical, physical in (topics or {}).items())
    secret = f'client_secret_env = "{secret_env}"' if secret_env else 'client_secret = "s3cret-value-for-tests"'
    extra = "".join(f'{key} = "{value}"\n' for key, value in (kafka or {}).items())
    path.write_text(
        f"""[processor]
store = "sqlite:///{path.parent}/dispersion.sqlite"

[kafka]
bootstrap_servers = "{bootstrap}"
{extra}
[kafka.topics]
{mapping}
[integrations.sandbox]
issuer = "http://127.0.0.1:8700"
resource_server = "http://127.0.0.1:8700"
client_id = "client-1"
{secret}
redirect_uri = "http://127.0.0.1:8600/callback"
kid = "kid-1"
signing_key_path = "signing-key.pem"
financial_id = "0015800001041RHAAY"
customer_ip = "127.0.0.1"
token_auth_method = "private_key_jwt"
grant_parameter = "grand_type"
assertion_signing = "local"
"""
    )
    return path
