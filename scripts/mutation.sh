#!/usr/bin/env bash
# Mutation testing of the modules that decide results.  Not run by CI (too slow):
# run it before closing a change to ops/, integration/, plugin.py or patches/.
#
#   scripts/mutation.sh [--sample N] [--resume] [--max-children N] [group ...]
#
# Installs requirements/mutation.txt (mutmut, pinned) into .venv on demand (never part of CI's
# environment), then runs scripts/mutation.py: see its docstring for groups and outputs.
# Triage of the survivors: docs/testing.md ("Mutation testing"; history in docs/history/mutation-runs.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || scripts/setup_env.sh
if ! .venv/bin/python -c "import mutmut" 2>/dev/null; then
    .venv/bin/python -m pip install -q -r requirements/mutation.txt
fi
exec .venv/bin/python scripts/mutation.py "$@"
