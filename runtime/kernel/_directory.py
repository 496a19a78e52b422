"""Addresses of one actor system: minting them, and resolving them to nodes.

There is no flat index: the supervision tree is the index.  Resolving
``/user/team/worker-3`` walks from the root supervisor through each
supervisor's children (keyed by path), so an idle actor costs no extra entry
here, and an actor is findable exactly while its supervisor holds it.  A
restart keeps the node (same address, same mailbox).  This module must not
import agents, tools or aggregators.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING

from agentrt.runtime.kernel._actor_errors import ActorNotFound
from agentrt.runtime.kernel._address import ActorAddress

if TYPE_CHECKING:
    from agentrt.runtime.kernel._supervisor import Child


class Directory:
    """Mints addresses (fresh uids) and resolves them through the tree."""

    __slots__ = ("_uids", "root", "system_id")

    def __init__(self, system_id: str) -> None:
        self.system_id = system_id
        #: The root supervisor while the system is open, else ``None``.
        self.root: Child | None = None
        self._uids = count(1)

    def new_address(self, parent: ActorAddress | None, name: str) -> ActorAddress:
        """A fresh address (new uid) for ``name`` (a spec's: checked
        already, ``validate_name``) under ``parent``."""
        if parent is None:
            return ActorAddress(self.system_id, f"/{name}", next(self._uids))
        return ActorAddress(self.system_id, f"{parent.path}/{name}", next(self._uids))

    def resolve(self, address: ActorAddress) -> Child:
        """The live node at ``address``, or ``ActorNotFound`` saying why not."""
        if address.system != self.system_id:
            raise ActorNotFound(
                str(address), f"belongs to system {address.system!r}, not {self.system_id!r}"
            )
        node = self.root
        if node is None:
            raise ActorNotFound(str(address), "the actor system is not open")
        prefix = node.address.path
        path = address.path
        if path != prefix:
            if not path.startswith(prefix + "/"):
                raise ActorNotFound(str(address))
            for segment in path[len(prefix) + 1 :].split("/"):
                prefix = f"{prefix}/{segment}"
                found = node.child_at(prefix)
                if found is None:
                    raise ActorNotFound(str(address))
                node = found
        if address.uid and address.uid != node.address.uid:
            raise ActorNotFound(
                str(address),
                f"uid {address.uid} is gone; the actor now at this path has uid {node.address.uid}",
            )
        return node
