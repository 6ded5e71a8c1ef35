#!/usr/bin/env bash
# Regenerate README's compatibility table (SGLang release x fix) from what each
# tested release's environment verifies (tests/integration/compat_table.py).
# Builds missing environments.  Each release's CI run checks its column
# (tests/integration/test_compat_table.py), so a stale table fails CI.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
. scripts/_releases.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1
tmp="$(mktemp -d)"
for release in $RELEASES; do
  scripts/setup_env.sh "$release" >/dev/null
  (cd "$tmp" && "$root/$(venv_for "$release")/bin/python" "$root/tests/integration/compat_table.py" --column) \
    > "$tmp/$release.json" 2> "$tmp/$release.err" || { cat "$tmp/$release.err" >&2; exit 1; }
  cols+=("$tmp/$release.json")
done
.venv/bin/python tests/integration/compat_table.py --write README.md "${cols[@]}"
rm -rf "$tmp"
echo "compat_table: README.md updated for SGLang $RELEASES"
