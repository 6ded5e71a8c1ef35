# Sourced by setup_env.sh / test.sh / compat_table.sh: which SGLang releases the
# project tests, and where each one's environment lives.
#   BASE_RELEASE  the release pinned in constraints.txt; its environment is .venv/
#   RELEASES      BASE_RELEASE plus one per constraints/sglang-<release>.txt, newest first
#   venv_for R    .venv for BASE_RELEASE, .venv-sglang-R otherwise
BASE_RELEASE="$(sed -n 's/^sglang==//p' constraints.txt)"
RELEASES="$(
  { echo "$BASE_RELEASE"; for f in constraints/sglang-*.txt; do [ -e "$f" ] && basename "$f" .txt | sed 's/^sglang-//'; done; } |
  sort -u -t. -k1,1nr -k2,2nr -k3,3nr | tr '\n' ' '
)"
venv_for() {
  if [ "$1" = "$BASE_RELEASE" ]; then echo .venv; else echo ".venv-sglang-$1"; fi
}
known_release() {
  case " $RELEASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}
