"""``python -m agentrt`` runs the CLI."""

from agentrt.runtime.cli import main

raise SystemExit(main())
