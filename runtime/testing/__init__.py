"""Fakes for testing agentrt and code built on it (shipped, public).

- ``ScriptedBackend``: a deterministic in-process ``ModelBackend`` driven by
  a script of replies, tool calls and exceptions;
- the sim-server: an OpenAI- and SGLang-compatible HTTP model server with
  simulated latency, a radix-tree prefix cache and fault injection, run
  in-process (``SimServer``), as a subprocess (``spawn_sim_server``, or
  ``start_sim_server_process`` for synchronous callers) or from
  the command line (``agentrt sim-server`` = ``sim_server.main``);
- ``RecordingSink``: records progress/log notifications and waits for one.

Part of the runtime floor: never imports agents, tools or aggregators.
``agentrt.testing`` re-exports the public names.
"""
