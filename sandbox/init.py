"""`dispersion sandbox init DIR`: a fresh RSA key pair, a clients file and a matching processor configuration.

Writes, in DIR:

- ``signing-key.pem``: the client's RSA 2048 private key (PKCS#8, mode 0600);
- ``public-key.pem``: its public key;
- ``clients.json``: the sandbox's clients file (format in DESIGN.md, "Sandbox") with one client, a random
  secret and the key's kid (its RFC 7638 JWK thumbprint), mode 0600 since it holds the secret;
- ``dispersion.toml``: the processor configuration pointing at that sandbox, mode 0600 (it holds the secret).

Existing files are never overwritten unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

DEFAULT_SANDBOX_URL = "http://127.0.0.1:8700"
DEFAULT_REDIRECT_URI = "http://127.0.0.1:8600/callback"
FINANCIAL_ID = "0015800001041RHAAY"
FILES = ("signing-key.pem", "public-key.pem", "clients.json", "dispersion.toml")


@dataclass(frozen=True)
class Setup:
    """Everything written by `init`."""

    directory: Path
    client_id: str
    client_secret: str
    kid: str
    private_pem: str
    public_pem: str
    redirect_uri: str
    callback_url: str | None
    sandbox_url: str
    console_password: str = field(default="", repr=False)  # shown once; the file keeps its scrypt hash
    admin_token: str = field(default="", repr=False)  # shown once; the file keeps its SHA-256
    console_salt: bytes = field(default=b"", repr=False)
    session_key: str = field(default="", repr=False)


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion sandbox init`."""
    p = argparse.ArgumentParser(
        prog="dispersion sandbox init",
        description="Write a fresh RSA key pair, a sandbox clients file and a matching processor configuration.",
    )
    p.add_argument("directory", help="where to write the files (created if missing)")
    p.add_argument("--client-id", help="client id to register (default: dispersion-<random>)")
    p.add_argument("--redirect-uri", default=DEFAULT_REDIRECT_URI, help="the client's registered redirect URI")
    p.add_argument(
        "--callback-url", help="where the sandbox also POSTs {redirect_url} after a decision (default: none)"
    )
    p.add_argument("--sandbox-url", default=DEFAULT_SANDBOX_URL, help="base address the sandbox will serve at")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    return p


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def jwk_thumbprint(key: RSAPublicKey) -> str:
    """RFC 7638 thumbprint (SHA-256, base64url) of an RSA public key: a kid that names the key."""
    numbers = key.public_numbers()
    canonical = json.dumps(
        {"e": _b64url_uint(numbers.e), "kty": "RSA", "n": _b64url_uint(numbers.n)}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode("ascii")


def generate_key_pair() -> tuple[str, str, str]:
    """A new RSA 2048 key: (private PEM, public PEM, kid)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")
    public = key.public_key()
    public_pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")
    return private_pem, public_pem, jwk_thumbprint(public)


def clients_document(setup: Setup) -> dict[str, object]:
    """The sandbox's clients file for this setup."""
    client: dict[str, object] = {
        "client_id": setup.client_id,
        "client_secret": setup.client_secret,
        "redirect_uris": [setup.redirect_uri],
        "kid": setup.kid,
        "public_key_pem": setup.public_pem,
        "name": "Dispersion",
    }
    if setup.callback_url:
        client["callback_url"] = setup.callback_url
    return {"clients": [client]}


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes; control characters as \\uXXXX).
    return json.dumps(value, ensure_ascii=False)


def origin(url: str) -> str:
    """scheme://host[:port] of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def processor_config(setup: Setup) -> str:
    """The processor configuration (dispersion.toml) matching this sandbox client."""
    directory = setup.directory
    sandbox = setup.sandbox_url.rstrip("/")
    return f"""[processor]
store = {_toml(f"sqlite:///{directory}/dispersion.sqlite")}
public_url = {_toml(origin(setup.redirect_uri))}  # callback API and approval links
[kafka]
bootstrap_servers = ""                       # empty: start a local broker / use KAFKA_BOOTSTRAP_SERVERS
[integrations.sandbox]
issuer = {_toml(sandbox)}
resource_server = {_toml(sandbox)}
client_id = {_toml(setup.client_id)}
client_secret = {_toml(setup.client_secret)}  # Basic credential = base64(client_id:client_secret)
redirect_uri = {_toml(setup.redirect_uri)}
kid = {_toml(setup.kid)}
signing_key_path = {_toml(str(directory / "signing-key.pem"))}
financial_id = {_toml(FINANCIAL_ID)}          # must equal the sandbox's --financial-id (its default)
customer_ip = "127.0.0.1"
tpp_name = "Dispersion"
token_auth_method = "private_key_jwt"        # or "client_secret_basic"
grant_parameter = "grand_type"               # or "grant_type"
assertion_signing = "local"                  # or "remote" (the spec's message-signature operation)
""" + (operator_tables(setup) if setup.console_password else "")


CONSOLE_OPERATOR = "operator"


def scrypt_hash(password: str, salt: bytes) -> str:
    """A console password as the processor's `[console] operators` keep it: `scrypt:16384:8:1:<salt>:<hash>`
    (base64url without padding). Written here, not imported: the sandbox imports nothing of the processor."""
    digest = hashlib.scrypt(password.encode(), salt=salt, n=16384, r=8, p=1, maxmem=256 * 1024 * 1024, dklen=32)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"scrypt:16384:8:1:{b64(salt)}:{b64(digest)}"


def operator_tables(setup: Setup) -> str:
    """`[console]` (a session key, one operator with the admin role) and `[admin.tokens]` (that person's admin
    API token, as its SHA-256)."""
    password_hash = scrypt_hash(setup.console_password, setup.console_salt)
    token_digest = hashlib.sha256(setup.admin_token.encode()).hexdigest()
    return f"""# the operator console at public_url/console/ (docs/console.md); the password was printed once
[console]
session_key = {_toml(setup.session_key)}
[console.operators.{CONSOLE_OPERATOR}]
password = {_toml(password_hash)}
role = "admin"
# the admin API (dispersion report, find, retry-failed, dlq): a personal token, printed once
[admin.tokens.{CONSOLE_OPERATOR}]
token_sha256 = {_toml(token_digest)}
role = "admin"
"""


def _check_url(name: str, url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{name} must be an http(s) URL with a host, got {url!r}"
    return None


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)  # also when the file already existed with other permissions (--force)


def write_files(setup: Setup) -> list[Path]:
    """Write the four files; return their paths."""
    d = setup.directory
    d.mkdir(parents=True, exist_ok=True)
    written = [d / name for name in FILES]
    _write(written[0], setup.private_pem, 0o600)
    _write(written[1], setup.public_pem, 0o644)
    _write(written[2], json.dumps(clients_document(setup), indent=2) + "\n", 0o600)
    _write(written[3], processor_config(setup), 0o600)
    return written


def main(argv: list[str]) -> int:
    """Run `dispersion sandbox init`; 0 on success, 1 when files exist, 2 on bad arguments."""
    args = build_parser().parse_args(argv)
    problems = [
        p
        for p in (
            _check_url("--redirect-uri", args.redirect_uri),
            _check_url("--sandbox-url", args.sandbox_url),
            _check_url("--callback-url", args.callback_url) if args.callback_url else None,
        )
        if p
    ]
    client_id = args.client_id if args.client_id is not None else f"dispersion-{secrets.token_hex(4)}"
    if not client_id or ":" in client_id or client_id != client_id.strip():
        problems.append("--client-id must be non-empty, without ':' or surrounding spaces")
    if problems:
        for problem in problems:
            print(f"dispersion sandbox init: {problem}", file=sys.stderr)
        return 2
    directory = Path(args.directory).expanduser().resolve()
    existing = [directory / name for name in FILES if (directory / name).exists()]
    if existing and not args.force:
        names = ", ".join(str(p) for p in existing)
        print(f"dispersion sandbox init: refusing to overwrite {names} (use --force)", file=sys.stderr)
        return 1
    private_pem, public_pem, kid = generate_key_pair()
    setup = Setup(
        directory=directory,
        client_id=client_id,
        client_secret=secrets.token_urlsafe(32),
        kid=kid,
        private_pem=private_pem,
        public_pem=public_pem,
        redirect_uri=args.redirect_uri,
        callback_url=args.callback_url,
        sandbox_url=args.sandbox_url.rstrip("/"),
        console_password=secrets.token_urlsafe(12),
        admin_token=secrets.token_urlsafe(32),
        console_salt=secrets.token_bytes(16),
        session_key=secrets.token_urlsafe(32),
    )
    paths = write_files(setup)
    notes = {
        "signing-key.pem": "the client's private key (keep it secret)",
        "public-key.pem": "its public key",
        "clients.json": f"sandbox clients file: client {client_id}, kid {kid}",
        "dispersion.toml": "processor configuration for this sandbox",
    }
    for path in paths:
        print(f"wrote {path}: {notes[path.name]}")
    sandbox = urlsplit(setup.sandbox_url)
    port = sandbox.port or (443 if sandbox.scheme == "https" else 80)
    print("\nnext, start the sandbox bank:")
    print(f"  dispersion sandbox --host {sandbox.hostname} --port {port} --clients {paths[2]}")
    print(f"then point the processor at {paths[3]}")
    console = f"{origin(setup.redirect_uri)}/console/"
    print(f"\noperator console: {console} (sign in as {CONSOLE_OPERATOR}, password {setup.console_password})")
    print(f"admin API token: export DISPERSION_ADMIN_TOKEN={setup.admin_token}")
    print(f"(shown this once: {paths[3].name} keeps only their hashes)")
    return 0
