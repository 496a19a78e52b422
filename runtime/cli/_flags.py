"""Command-line flags more than one command takes (``run``, ``eval``,
``serve``).  Must not import the engine: only argparse."""

from __future__ import annotations

import argparse


def add_placement_arguments(parser: argparse.ArgumentParser) -> None:
    """``--placement`` and ``--ray-address`` (read by
    ``AgentrtConfig.with_placement``)."""
    parser.add_argument(
        "--placement",
        choices=["local", "ray"],
        help="where rollouts run: this process or a Ray cluster (overrides [placement])",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="the Ray cluster (local, auto, HOST:PORT, ray://HOST:PORT); implies --placement ray",
    )


__all__ = ["add_placement_arguments"]
