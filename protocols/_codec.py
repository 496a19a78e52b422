"""JSON encoding and decoding of wire types, with decoders built once.

Pure functions over bytes: no files, no sockets.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from agentrt.protocols._events import Event

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


_WHOLE_LIMIT = (1 << 63) - 1


def whole_numbers(value: Any) -> Any:
    """``value`` (decoded JSON) with every float that has no fractional
    part, within 64 bits, made an int: JSON does not tell 130.0 from 130,
    and JSON Schema's ``integer`` takes both."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _WHOLE_LIMIT else value
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    return value


def to_builtins(value: object) -> Any:
    """Convert a wire type to dicts/lists/str (for JSON APIs and templates):
    a step's tuples become lists too (``msgspec.to_builtins`` keeps tuples,
    which a JSON schema's ``array`` does not accept)."""
    return _lists(msgspec.to_builtins(value))


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value
