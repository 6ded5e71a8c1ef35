#!/usr/bin/env bash
# Build (or reuse) the test environment for one SGLang release.
#
#   scripts/setup_env.sh            the base release (constraints.txt) in .venv/
#   scripts/setup_env.sh 0.5.21     that release in .venv-sglang-0.5.21/
#   SGLANG_RELEASE=0.5.21 scripts/setup_env.sh    the same
#
# Base: torch + torchvision, sglang (--no-deps) plus its light requirements
# (requirements/sglang-light.txt), the test tools and this package (editable),
# all pinned by constraints.txt.  Never torch_npu.
#
# Other releases: a hard-linked copy of .venv (cp -al: no copy of torch, seconds,
# almost no disk; pip unlinks a file before writing it, so .venv stays intact),
# then that release's sglang and the light requirements whose pins differ,
# pinned by constraints.txt overridden line by line with
# constraints/sglang-<release>.txt (plus requirements/sglang-<release>.txt when a
# release needs more).  Every environment is reused when its inputs are unchanged.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
. scripts/_releases.sh
release="${1:-${SGLANG_RELEASE:-$BASE_RELEASE}}"
if ! known_release "$release"; then
  echo "setup_env: unknown SGLang release $release (tested: $RELEASES); add constraints/sglang-$release.txt" >&2
  exit 2
fi
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

base_stamp="$(cat constraints.txt requirements/sglang-light.txt requirements/test.txt pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)"
if [ -f .venv/.complete ] && [ "$(cat .venv/.complete)" = "$base_stamp" ]; then
  echo "setup_env: reusing complete .venv (sglang $BASE_RELEASE)"
else
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
  rm -f .venv/.complete  # never write through a hard link
  echo "$base_stamp" > .venv/.complete
  echo "setup_env: .venv ready (sglang $BASE_RELEASE)"
fi
[ "$release" = "$BASE_RELEASE" ] && exit 0

venv="$(venv_for "$release")"
over="constraints/sglang-$release.txt"
extra="requirements/sglang-$release.txt"
stamp="$(cat .venv/.complete "$over" $( [ -f "$extra" ] && echo "$extra") | sha256sum | cut -d' ' -f1)"
if [ -f "$venv/.complete" ] && [ "$(cat "$venv/.complete")" = "$stamp" ]; then
  echo "setup_env: reusing complete $venv"
  exit 0
fi
rm -rf "$venv"
cp -al .venv "$venv"
rm -f "$venv/.complete"
# pyvenv.cfg and the activate scripts name the directory: give the copy its own files.
for f in "$venv/pyvenv.cfg" "$venv"/bin/activate*; do
  [ -f "$f" ] || continue
  sed "s#$root/.venv\b#$root/$venv#g" "$f" > "$f.new" && rm -f "$f" && mv "$f.new" "$f"
done
# Merged constraints: the base pins, each one the release overrides replaced.
merged="$venv/constraints.txt"
"$venv/bin/python" - "$over" constraints.txt > "$merged.new" <<'PYEOF'
import re, sys
name = lambda line: re.split(r"[<>=!~ ;\[]", line.strip(), 1)[0].lower().replace("_", "-")
pins = lambda path: [l.strip() for l in open(path) if l.strip() and not l.lstrip().startswith("#")]
over = pins(sys.argv[1])
names = {name(l) for l in over}
print("\n".join([l for l in pins(sys.argv[2]) if name(l) not in names] + over))
PYEOF
rm -f "$merged" && mv "$merged.new" "$merged"
PIP=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -c "$merged" --no-deps "sglang==$release"
"${PIP[@]}" install -c "$merged" -r requirements/sglang-light.txt -r requirements/test.txt \
  $( [ -f "$extra" ] && echo "-r $extra")
# The editable install's finder names this checkout, which is what we want; reinstall
# it anyway so the copy's dist-info is its own file.
"${PIP[@]}" install -c "$merged" --no-deps --no-build-isolation -e . >/dev/null 2>&1
got="$("$venv/bin/python" -c "from importlib.metadata import version; print(version('sglang'))")"
[ "$got" = "$release" ] || { echo "setup_env: $venv has sglang $got, expected $release" >&2; exit 1; }
if "$venv/bin/python" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch_npu') is None)"; then
  echo "setup_env: torch_npu must not be installed in the test environment" >&2; exit 1
fi
echo "$stamp" > "$venv/.complete"
echo "setup_env: $venv ready (sglang $release)"
