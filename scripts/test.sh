#!/usr/bin/env bash
# The test command: build/reuse .venv, then run the whole suite (2 workers).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup_env.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1 TRITON_INTERPRET=1
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" -q "$@" tests
