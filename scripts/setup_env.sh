#!/usr/bin/env bash
# Build (or reuse) the test environment in .venv/ at the repository root.
# Installs torch + torchvision, sglang==0.5.23 (--no-deps) plus its light
# requirements, the test tools, and this package (editable). Never torch_npu.
# Everything is pinned by constraints.txt. Reused when already complete.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp_src="$(cat constraints.txt requirements/*.txt pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)"
if [ -f .venv/.complete ] && [ "$(cat .venv/.complete)" = "$stamp_src" ]; then
  echo "setup_env: reusing complete .venv"
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install -c constraints.txt torch torchvision
"${PIP[@]}" install -c constraints.txt --no-deps sglang
"${PIP[@]}" install -c constraints.txt -r requirements/sglang-light.txt -r requirements/test.txt
"${PIP[@]}" install -c constraints.txt --no-deps --no-build-isolation -e .
if .venv/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch_npu') is None)"; then
  echo "setup_env: torch_npu must not be installed in the test environment" >&2; exit 1
fi
echo "$stamp_src" > .venv/.complete
echo "setup_env: .venv ready"
