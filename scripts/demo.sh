#!/usr/bin/env bash
# The plugin's main job on a CPU-only machine: build/reuse .venv, then show
# what the plugin finds and applies, and what it would run on Ascend.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup_env.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1
.venv/bin/sglang-ascend-hybrid doctor
