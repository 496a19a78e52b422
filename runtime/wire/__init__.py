"""The OpenAI wire: chat completions and Responses, as msgspec Structs.

One package for every side of the wire: the model client
(``runtime/models/openai``) encodes requests and reads replies with these
types, the daemon (``runtime/serve/openai``) decodes and validates requests
and writes replies with them, and the sim-server (``runtime/testing/sim``)
reads the requests the client sends and writes its replies with the
daemon's types.  See ``docs/design/wire.md``.

On the floor: imports only ``agentrt.protocols`` and msgspec.  Private
modules: ``_common`` (shared by both APIs), ``_chat_parts`` (agentrt
messages in the request shape), ``_chat``, ``_completions``, ``_responses``.
"""
