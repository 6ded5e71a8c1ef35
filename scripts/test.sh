#!/usr/bin/env bash
# The test command (README, "The two commands"; .ci/run calls it).
#
#   scripts/test.sh [pytest args]                  every tested SGLang release, one after another
#   SGLANG_RELEASE=0.5.22 scripts/test.sh [args]   one release (its environment: .venv-sglang-0.5.22/)
#   scripts/test.sh --release 0.5.22 [args]        the same
#
# First `ruff check` over the repository (pyproject.toml [tool.ruff]); then for each
# release: build or reuse its environment (scripts/setup_env.sh), then run
# the whole suite with PYTEST_WORKERS workers (default 2).  Prints one line per
# release (test counts, seconds) and fails when any release's suite fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
. scripts/_releases.sh
releases="${SGLANG_RELEASE:-}"
if [ "${1:-}" = "--release" ]; then releases="$2"; shift 2; fi
releases="${releases:-$RELEASES}"
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1 TRITON_INTERPRET=1
logs="$(mktemp -d)"
summary=()
status=0
# lint first (ruff, configured in pyproject.toml), with the base environment's pinned ruff
scripts/setup_env.sh >/dev/null
echo "=== ruff check"
lint=0
.venv/bin/python -m ruff check . || lint=$?
[ "$lint" -eq 0 ] || status=1
summary+=("ruff check: $([ "$lint" -eq 0 ] && echo clean || echo "findings (exit $lint)")")
for release in $releases; do
  start=$SECONDS
  scripts/setup_env.sh "$release"
  venv="$(venv_for "$release")"
  echo "=== SGLang $release ($venv)"
  rc=0
  "$venv/bin/python" -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup -q -p no:cacheprovider "$@" tests 2>&1 |
    tee "$logs/$release.log" || rc=$?
  [ "$rc" -eq 0 ] || status=1
  counts="$(grep -E '^[0-9]+ (passed|failed|error)|^=+ .*(passed|failed|error)' "$logs/$release.log" | tail -1 | tr -d '=' | sed 's/^ *//')"
  summary+=("SGLang $release: ${counts:-no result} ($((SECONDS - start)) s, exit $rc)")
done
echo
echo "=== test matrix"
printf '%s\n' "${summary[@]}"
rm -rf "$logs"
exit "$status"
