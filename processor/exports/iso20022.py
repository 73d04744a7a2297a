"""ISO 20022 XML: reading a document safely and validating it against ISO's published schema for its message.

The schemas are ISO's own `.xsd` files, kept byte for byte in `processor/exports/xsd/` (their provenance is in
`xsd/PROVENANCE.md`). Documents are parsed with no DTD, no entity expansion and no network access: a file with a
DOCTYPE is refused before anything else is read from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

from lxml import etree

XSD_DIR: Final = Path(__file__).resolve().parent / "xsd"
NAMESPACE_PREFIX: Final = "urn:iso:std:iso:20022:tech:xsd:"
MESSAGES: Final = (
    "pain.001.001.03",
    "pain.001.001.09",
    "pain.002.001.03",
    "pain.002.001.10",
    "camt.054.001.02",
    "camt.054.001.08",
)
MAX_DOCUMENT_BYTES: Final = 64 * 1024 * 1024


class Iso20022Error(Exception):
    """The document is not one we can read or does not match its schema; `problems` lists every finding."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems[:3]))
        self.problems = problems


@dataclass(frozen=True)
class Document:
    """A parsed document: its message name (`pain.001.001.09`) and its root element."""

    message: str
    root: etree._Element

    def ns(self, path: str) -> str:
        """An ElementPath `a/b/c` with every step in the message's namespace."""
        space = NAMESPACE_PREFIX + self.message
        return "/".join(step if step in (".", "..") else f"{{{space}}}{step}" for step in path.split("/"))


def namespace(message: str) -> str:
    """`urn:iso:std:iso:20022:tech:xsd:<message>`."""
    return NAMESPACE_PREFIX + message


@cache
def schema(message: str) -> etree.XMLSchema:
    """ISO's schema for `message` (one of MESSAGES), loaded once."""
    if message not in MESSAGES:
        raise ValueError(f"no schema for {message}")
    return etree.XMLSchema(etree.parse(str(XSD_DIR / f"{message}.xsd"), _parser()))


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False, huge_tree=False
    )


def parse(data: bytes, accepted: tuple[str, ...]) -> Document:
    """Parse `data`, name its message from the root's namespace (one of `accepted`) and validate it against the
    message's schema; Iso20022Error lists every problem (each XSD finding with its line)."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise Iso20022Error([f"the file has {len(data):,} bytes; at most {MAX_DOCUMENT_BYTES:,} are read"])
    try:
        tree = etree.fromstring(data, _parser()).getroottree()
    except etree.XMLSyntaxError as exc:
        raise Iso20022Error([f"not well-formed XML: {exc}"]) from None
    docinfo = tree.docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None or docinfo.system_url or docinfo.public_id:
        raise Iso20022Error(["a DOCTYPE is not allowed in an ISO 20022 message (entities are never expanded)"])
    root = tree.getroot()
    qname = etree.QName(root)
    space = qname.namespace or ""
    message = space.removeprefix(NAMESPACE_PREFIX) if space.startswith(NAMESPACE_PREFIX) else ""
    if qname.localname != "Document" or message not in accepted:
        found = f"{message or space or 'no namespace'}" if qname.localname == "Document" else f"<{qname.localname}>"
        raise Iso20022Error([f"expected an ISO 20022 Document of {' or '.join(accepted)}, found {found}"])
    problems = validation_errors(root, message)
    if problems:
        raise Iso20022Error(problems)
    return Document(message, root)


def validation_errors(root: etree._Element, message: str) -> list[str]:
    """Every finding of ISO's schema for `message` on the document, as `line N: text`; empty when valid."""
    checker = schema(message)
    if checker.validate(root):
        return []
    errors: Iterable[Any] = checker.error_log  # type: ignore[assignment]  # iterable; lxml-stubs miss it
    return [f"line {error.line}: {_short(error.message)}" for error in errors]


def _short(text: str) -> str:
    """libxml2 names elements `{urn:iso:...}Name`: the namespace is the same everywhere, so leave it out."""
    while "{" + NAMESPACE_PREFIX in text:
        start = text.index("{" + NAMESPACE_PREFIX)
        end = text.index("}", start)
        text = text[:start] + text[end + 1 :]
    return text


def serialise(root: etree._Element) -> bytes:
    """The document as UTF-8 bytes with an XML declaration, indented for people."""
    etree.indent(root, space="  ")
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8"))
