#!/usr/bin/env bash
# The plugin's main job on a CPU-only machine: build/reuse .venv, then show
# what the plugin finds and applies, check its ops against the pure-torch
# references (CPU emulators behind the device seam), show what it would run
# for Qwen3.6-27B on Ascend at TP 1-16, and finally serve tiny models through
# SGLang's real Engine with the plugin on the emulated Ascend device (CPU):
# the requests, generated tokens, cached tokens, the plugin kernels that served
# and the comparison with transformers.  The device is emulated: this shows
# SGLang's scheduler, caches and the plugin's decisions working together, not
# NPU numerics or speed (README, "What the emulated device proves").
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
echo
echo "=== SGLang's real Engine on the emulated Ascend device: LFM2-1.2B shrunk, bf16, radix cache on"
.venv/bin/sglang-ascend-hybrid rehearse --model-path examples/configs/lfm2-1.2b --disable-cuda-graph
echo
echo "=== the same for Qwen3.6-27B shrunk (its 48 value / 16 key GDN heads of dim 128 on one rank), bf16 SSM state"
.venv/bin/sglang-ascend-hybrid rehearse --model-path examples/configs/qwen3_6-27b --disable-cuda-graph \
  --mamba-ssm-dtype bfloat16
