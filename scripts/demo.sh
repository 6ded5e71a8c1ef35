#!/usr/bin/env bash
# The plugin's main job on a CPU-only machine: build/reuse .venv, then show
# what the plugin finds and applies, check its ops against the pure-torch
# references (CPU emulators behind the device seam), and show what it would run
# for Qwen3.6-27B on Ascend at TP 1-16.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup_env.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1
.venv/bin/sglang-ascend-hybrid doctor
echo
.venv/bin/sglang-ascend-hybrid selftest --device cpu
echo
.venv/bin/sglang-ascend-hybrid plan --config examples/configs/qwen3_6-27b --tp 1 2 4 8 16
