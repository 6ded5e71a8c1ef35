"""Edges of the SGLang-integration layer called in-process: the ascend_hybrid request is recorded only
for an NPU launch, the GDN decode hook hands the ladder the installed Triton decode entry, the verify
hook names its state in a layout error, the GDN state line's texts, and the packed-attention startup
probe's own checks."""

from __future__ import annotations

import types

import pytest
import torch

from sglang_ascend_hybrid.integration import ascend_hybrid, gdn_hooks, gdn_state_dtype, packed_attention
from sglang_ascend_hybrid.ops.gdn import pool_layout
from sglang_ascend_hybrid.patches import apply as patch_apply
from sglang_ascend_hybrid.patches.mode import BACKEND_NAME

NS = types.SimpleNamespace


def _launch(device, **fields):
    return NS(device=device, _resolved_overrides=[], **fields)


@pytest.mark.parametrize("device,fields,recorded,strict_checked", [
    ("npu", {"attention_backend": BACKEND_NAME}, True, True),
    ("cuda", {"attention_backend": BACKEND_NAME}, False, False),  # another device: nothing of the plugin's
    ("npu", {"attention_backend": "ascend"}, False, True),
])
def test_the_ascend_hybrid_request_is_recorded_only_for_an_npu_launch(monkeypatch, device, fields, recorded,
                                                                      strict_checked):
    seen = []
    monkeypatch.setattr(ascend_hybrid, "record_request", lambda: seen.append("recorded"))
    monkeypatch.setattr(patch_apply, "enforce_strict", lambda: seen.append("strict"))
    rec = _launch(device, **fields)
    ascend_hybrid.record_hybrid_request(rec, lambda args: seen.append(("previous", args)))
    assert seen == [*(["recorded"] if recorded else []), ("previous", rec), *(["strict"] if strict_checked else [])]


def test_the_decode_hook_serves_the_installed_triton_decode_entry(monkeypatch):
    from sglang_ascend_hybrid.ops.gdn import decode
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    calls = []
    monkeypatch.setattr(decode_contract, "installed_decode_entry", lambda: "the_entry")
    monkeypatch.setattr(decode, "run_decode", lambda call, backend: calls.append((call, backend)) or "out")
    q = torch.zeros(1, 2, 1, 4)
    pool = torch.zeros(3, 2, 4, 4)
    out = gdn_hooks.ascend_gdn_decode(None, None, q, q, torch.zeros(1, 2, 2, 4), torch.zeros(2, 2),
                                      torch.zeros(2, 2), A_log=torch.zeros(2), dt_bias=torch.zeros(2),
                                      ssm_states=pool, cache_indices=torch.tensor([0, 1]))
    assert out == "out" and calls[0][0].entry == "the_entry" and calls[0][1] == "auto"


def test_the_verify_hook_names_its_state_in_a_layout_error():
    bad = torch.zeros(4, 2, 3, 5)[:, :, :, :4]  # neither value first nor a transposed view
    backend = NS(graph_mode=False, num_accept_tokens=None, actual_seq_lengths=None)
    with pytest.raises(pool_layout.PoolLayoutError, match=r"^recurrent_state: "):
        gdn_hooks.ascend_verify_update(None, backend, torch.zeros(1, 2, 8), 1, 2, 4, 4, recurrent_state=bad,
                                       beta=torch.zeros(1, 2, 2), g=None, cache_indices=torch.tensor([0]),
                                       intermediate_state=torch.zeros(2, 2, 4, 4))


@pytest.mark.parametrize("dtype,speculative,tail", [
    ("bfloat16", True, " Speculative verify (MTP): torch.ops.npu.recurrent_gated_delta_rule. Set "
                       "--mamba-ssm-dtype float32 to keep fp32 states (slower kernels)."),
    ("bfloat16", False, "chunk_gated_delta_rule (then the mega kernel, Triton, torch as needed). Set "
                        "--mamba-ssm-dtype float32 to keep fp32 states (slower kernels)."),
])
def test_the_gdn_state_line_says_verify_only_when_speculative_and_the_other_dtype(dtype, speculative, tail):
    line = gdn_state_dtype.plan_state(dtype, "the flag").message("Arch", speculative)
    assert line.startswith(f"sglang-ascend-hybrid: Arch keeps its SSM state in {dtype} (from the flag); ")
    assert line.endswith(tail)


def _reference_fn():
    from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen

    seen = []

    def fn(q, *args, **kwargs):
        seen.append(q.dtype)
        return fused_infer_attention_varlen(q, *args, **kwargs)

    return fn, seen


def test_the_packed_attention_probe_runs_the_16_bit_case_the_npu_kernel_serves():
    fn, seen = _reference_fn()
    assert packed_attention.probe_replacement(fn) is True
    assert seen == [torch.bfloat16]


def test_the_packed_attention_probe_refuses_two_sided_rows_off_by_a_tenth():
    fn, _ = _reference_fn()

    def off(*args, **kwargs):
        out, lse = fn(*args, **kwargs)
        out = out.clone()
        out[2:] += 0.1
        return out, lse

    assert packed_attention.probe_replacement(off) is False
