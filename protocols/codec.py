"""JSON encoding and decoding of wire types, with decoders built once.

Pure functions over bytes: no files, no sockets.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from agentrt.protocols.events import Event

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def encode(value: object) -> bytes:
    """Encode any wire type (or builtin) to JSON bytes."""
    return _encoder.encode(value)


def decode(data: bytes | str, type_: type[T]) -> T:
    """Decode JSON into ``type_``, validating it.  Raises
    ``msgspec.ValidationError`` naming the offending path on bad input."""
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    result: T = decoder.decode(data)
    return result


def decode_event(data: bytes | str) -> Event:
    """Decode one event of any kind (dispatching on its ``type`` tag)."""
    return _event_decoder.decode(data)


def to_builtins(value: object) -> Any:
    """Convert a wire type to dicts/lists/str (for JSON APIs and templates)."""
    return msgspec.to_builtins(value)
