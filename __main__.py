"""``python -m agentrt`` runs the CLI."""

from agentrt.runtime.cli._main import main

raise SystemExit(main())
