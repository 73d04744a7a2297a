"""The sandbox bank shares no code with the processor: no module of `sandbox/` imports our other packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import ROOT

SANDBOX = ROOT / "sandbox"
OURS = ("processor", "consumers", "producers", "schemas", "benchmarks", "tests")


def imported_modules(source: str) -> set[str]:
    """Every absolute module name a Python source imports (relative imports stay inside the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_scan_sees_imports_of_every_form() -> None:
    source = "import processor.bank\nfrom consumers import x\nif True:\n    from schemas.codec import y\n"
    assert imported_modules(source) == {"processor.bank", "consumers", "schemas.codec"}


@pytest.mark.parametrize("path", sorted(SANDBOX.rglob("*.py")), ids=lambda p: p.name)
def test_sandbox_module_imports_none_of_our_other_packages(path: Path) -> None:
    shared = sorted(name for name in imported_modules(path.read_text(encoding="utf-8")) if name.split(".")[0] in OURS)
    assert shared == [], f"{path.name} imports {shared}: the sandbox must stay an independent reading of the spec"


def test_the_sandbox_has_modules_to_check() -> None:
    assert len(list(SANDBOX.rglob("*.py"))) > 10


OAUTH = SANDBOX / "oauth"
WEB = ("starlette", "uvicorn", "httpx")


@pytest.mark.parametrize("path", sorted(OAUTH.rglob("*.py")), ids=lambda p: p.name)
def test_oauth_logic_imports_no_web_framework(path: Path) -> None:
    # The grant logic takes plain values and returns status, body and headers; only sandbox/routes speaks HTTP.
    web = sorted(name for name in imported_modules(path.read_text(encoding="utf-8")) if name.split(".")[0] in WEB)
    assert web == [], f"sandbox/oauth/{path.name} imports {web}"


def test_oauth_has_the_grant_modules() -> None:
    names = {p.stem for p in OAUTH.glob("*.py")}
    assert {"grants", "par", "assertions", "client_auth", "tokens", "discovery", "signature"} <= names
