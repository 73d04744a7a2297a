"""The kinds of flow the engine runs, one enum for every place that names them.

The values are what the store holds (`auth_attempts.flow_kind`: "file", "vrp") and what logs and task names
say. `link` is the kind's segment of the approval links already published (`/approve/file/...`,
`/approve/mandate/...`), kept so links sent before stay valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from processor.domain.file_states import FILE_TABLE
from processor.domain.steps import Approval, Rule
from processor.domain.vrp_states import MANDATE_TABLE, PAYMENT_TABLE


class Kind(StrEnum):
    """A kind of flow: a file payment, a VRP mandate, a payment under a mandate."""

    FILE = "file"
    MANDATE = "vrp"
    VRP_PAYMENT = "vrp_payment"

    @property
    def link(self) -> str:
        """The kind's segment of an approval link (`{public_url}/approve/{link}/{flow_id}`)."""
        return _LINKS[self]

    @classmethod
    def of_link(cls, segment: str) -> Kind | None:
        """The kind an approval link's segment names (None: not a kind with approval links)."""
        return next((kind for kind, link in _LINKS.items() if link == segment and kind.approved), None)

    @property
    def approved(self) -> bool:
        """Whether flows of this kind wait for an approver (have approval links and authorization attempts)."""
        return self is not Kind.VRP_PAYMENT

    @property
    def log_field(self) -> str:
        """The name a flow's key gets in log lines."""
        return _LOG_FIELDS[self]

    @property
    def table(self) -> Mapping[Any, Rule[Any]]:
        """The kind's state table."""
        return _TABLES[self]

    def approval(self, state: str) -> Approval:
        """What the approval link answers for a flow of this kind in `state` (a state the table does not know,
        say one a later version wrote, counts as not ready)."""
        rule = self.table.get(state)
        return Approval.NOT_READY if rule is None else rule.approval


_LINKS = {Kind.FILE: "file", Kind.MANDATE: "mandate", Kind.VRP_PAYMENT: "vrp_payment"}
_LOG_FIELDS = {Kind.FILE: "batch_id", Kind.MANDATE: "mandate_id", Kind.VRP_PAYMENT: "payment_id"}
_TABLES: dict[Kind, Mapping[Any, Rule[Any]]] = {
    Kind.FILE: FILE_TABLE,
    Kind.MANDATE: MANDATE_TABLE,
    Kind.VRP_PAYMENT: PAYMENT_TABLE,
}
