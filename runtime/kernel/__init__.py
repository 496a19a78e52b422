"""The actor kernel: supervised actors with bounded mailboxes, on anyio (asyncio
backend, uvloop when installed).  ``Actor`` and ``ActorRef``, the
``ActorSystem``, OTP-style supervision, services and deferred replies, the one
restart-with-backoff policy (``Backoff``/``RestartBackoff``), ``Topic``.

This package is the floor of the runtime: it must not import agents, tools
or aggregators.
"""
