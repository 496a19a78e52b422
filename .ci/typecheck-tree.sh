#!/usr/bin/env bash
# mypy cannot follow setuptools' editable import hook, so it checks a tree of
# symlinks named `agentrt/` that mirrors the package mapping in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .typecheck
mkdir -p .typecheck/agentrt
for f in __init__.py __main__.py _version.py actors.py client.py models.py testing.py py.typed; do
  [ -e "$f" ] && ln -s "../../$f" ".typecheck/agentrt/$f"
done
for d in protocols runtime tools agents aggregators; do
  ln -s "../../$d" ".typecheck/agentrt/$d"
done
