"""SGLang's short-conv calls -> the plugin's conv ops.

SGLang's LFM2 imports ``causal_conv1d_fn`` / ``causal_conv1d_update`` from
``sglang.srt.layers.attention.mamba.causal_conv1d`` into its own module;
:func:`causal_conv1d_fn_around` / :func:`causal_conv1d_update_around` are AROUND hooks for the
two names (HookRegistry rebinds the from-import copies).  A call is the plugin's
(:func:`routes_to_plugin`) when its input lives on an NPU, when a conv emulator is installed
in the seam (CPU self-test), or when the conv state is a window-major view (only the Ascend
pool is laid out that way); every other call (CUDA, ROCm, CPU with a CUDA-layout pool) runs
the original.

Around the plugin's calls the Ascend short-conv sidecar's radix-cache tracking runs
(:func:`~sglang_ascend_hybrid.integration.short_conv_track.before_prefill` /
:func:`~sglang_ascend_hybrid.integration.short_conv_track.after_update`; both do nothing
unless the sidecar published a tracked step).  The hooks pass
``check_values=SGLANG_ASCEND_HYBRID_DEBUG_CHECKS``: decode under graph capture never reads
tensor values on the host.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.integration import short_conv_track
from sglang_ascend_hybrid.ops.conv import api as conv_ops
from sglang_ascend_hybrid.ops.conv.dispatch import device_possible
from sglang_ascend_hybrid.ops.conv.signature import is_window_major
from sglang_ascend_hybrid.ops.errors import bad_input


def routes_to_plugin(x, conv_state) -> bool:
    """Whether an upstream conv call belongs to this plugin (see the module docstring)."""
    if not isinstance(x, torch.Tensor):
        return False
    return device_possible(x) or (isinstance(conv_state, torch.Tensor) and is_window_major(conv_state))


def check_host_seq_lens(seq_lens_cpu, x) -> None:
    """Value check on SGLang's host mirror of the query lengths (no device read)."""
    if seq_lens_cpu is None or not isinstance(x, torch.Tensor) or x.dim() != 2:
        return
    lens = [int(v) for v in seq_lens_cpu]
    if any(v < 0 for v in lens) or sum(lens) > x.shape[1]:
        raise bad_input("seq_lens_cpu", lens, f"non-negative lengths summing to at most the {x.shape[1]} tokens of x",
                        op="causal_conv1d_fn")


def causal_conv1d_fn_around(original, *args, **kwargs):
    """AROUND hook for ``sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_fn``."""
    x = args[0] if args else kwargs.get("x")
    state = args[6] if len(args) > 6 else kwargs.get("conv_states")
    if routes_to_plugin(x, state):
        check_host_seq_lens(kwargs.get("seq_lens_cpu"), x)
        kwargs.setdefault("check_values", ENV.DEBUG_CHECKS.get())
        short_conv_track.before_prefill(x, state)
        return conv_ops.causal_conv1d_fn(*args, **kwargs)
    return original(*args, **kwargs)


def causal_conv1d_update_around(original, *args, **kwargs):
    """AROUND hook for ``sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_update``
    (the serving decode path: no host sync unless SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1)."""
    x = args[0] if args else kwargs.get("x")
    state = args[1] if len(args) > 1 else kwargs.get("conv_state")
    if routes_to_plugin(x, state):
        kwargs.setdefault("check_values", ENV.DEBUG_CHECKS.get())
        out = conv_ops.causal_conv1d_update(*args, **kwargs)
        short_conv_track.after_update(state)
        return out
    return original(*args, **kwargs)
