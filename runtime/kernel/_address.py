"""Actor addresses: where an actor lives, as plain serializable data.

An :class:`ActorAddress` names an actor independently of the process holding
it, so it can travel in events, run records and (later) across a distributed
placement; ``ActorSystem.ref(address)`` turns it back into a live ref.  This
module is pure data and must not import agents, tools or aggregators.
"""

from __future__ import annotations

import re

import msgspec

# Names become path segments and log keys: keep them boring and unambiguous.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,127}")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid path segment, else raise ``ValueError``."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid actor name {name!r}: use 1-128 characters from "
            "[A-Za-z0-9_.:@+-], not starting with a punctuation mark"
        )
    return name


class ActorAddress(msgspec.Struct, frozen=True, gc=False):
    """Where an actor lives: ``system`` id, a ``path`` and a ``uid``.

    ``path`` is hierarchical (``/user/sup/worker-3``) and stays the same when a
    supervisor restarts the actor: a restart is a fresh instance at the same
    address.  ``uid`` tells apart two actors that held the same path one after
    the other (stop, then spawn again); ``0`` matches whatever lives at the
    path now.

    ``gc=False``: only strings and an int inside, so no cycles are possible;
    every actor holds one, and the garbage collector need not walk them.
    """

    system: str
    path: str
    uid: int = 0

    @property
    def name(self) -> str:
        """The last path segment."""
        return self.path.rsplit("/", 1)[-1]

    def child(self, name: str, uid: int = 0) -> ActorAddress:
        """The address of a child called ``name`` under this one."""
        return ActorAddress(self.system, f"{self.path}/{validate_name(name)}", uid)

    def to_json(self) -> bytes:
        """Encode as JSON (``{"system": ..., "path": ..., "uid": ...}``)."""
        return msgspec.json.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> ActorAddress:
        """Decode what :meth:`to_json` produced; raises ``msgspec.ValidationError``."""
        return msgspec.json.decode(data, type=cls)

    def __str__(self) -> str:
        return f"actor://{self.system}{self.path}"
