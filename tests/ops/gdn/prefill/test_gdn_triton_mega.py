"""The plugin's ``triton`` prefill rung when sgl-kernel-npu's Triton entry runs the mega kernel
inside (``GDN_USE_MEGA_GDN=1``, sgl-project/sgl-kernel-npu f425bdf1 ``fla/chunk.py`` lines 26-27 and
216-222, read at every call; by default in releases 2026.05.01.post3 and 2026.6.0): the rung then
takes the mega kernel's contract -- never for an fp32 pool (fp16 state), never when 64-token chunk
states are asked for (the mega ``h`` is per 128 tokens), only head pairs the installed mega kernel
takes (the entry does not plan heads) -- and the mega refusal texts are known refusals.  It never
changes the environment (process-wide)."""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_sets, gdn_triton_chunk
from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, prefill, signature
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_TRITON
from sglang_ascend_hybrid.ops.gdn.prefill import entries
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from tests.support import gdn_inputs
from tests.support.call_counter import Counting

D = 128


# the plugin's ladder against sgl-kernel-npu emulators: no SGLang code runs (~40 s per release)
pytestmark = [pytest.mark.usefixtures("fresh_gdn"), pytest.mark.base_release_only]


def _inputs(hv=16, hk=8, lens=(150, 20), pool_dtype=torch.bfloat16, seed=0):
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=D, dtype=torch.bfloat16, gate_shift=3.0,
                             state_dtype=pool_dtype).prefill()


def _machine(mega_variant=caps.MEGA_CURRENT, version="2026.6.1"):
    """A build whose chunk op is absent: the mega rung is skipped by the caller (``skip``, as the
    integration hook of the Triton entry does), so the triton rung is the first device rung."""
    mega = Counting(gdn_mega.make_mega_emulator(variant=mega_variant))
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=mega, version=version))
    return {OP_MEGA: mega, OP_TRITON: triton}, mega, triton


def _run(ops, version, *args, chunk_states=False, **kw):
    q, k, v, g, beta, cu, h0 = args
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version=version), seam.install_emulators(ops):
        return chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=chunk_states,
                                 skip=("mega",), **kw)


def _torch(*args, chunk_states=False):
    q, k, v, g, beta, cu, h0 = args
    return chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=chunk_states,
                             backend="torch")


@pytest.mark.parametrize("use_mega", ["0", "1"])
def test_bf16_pool_runs_on_the_triton_rung_either_way(monkeypatch, caplog, use_mega):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", use_mega)
    ops, mega, triton = _machine()
    args = _inputs()
    with caplog.at_level(logging.INFO):
        o, final, _ = _run(ops, "2026.6.1", *args)
    assert triton.calls == 1 and mega.calls == int(use_mega == "1")
    assert "runs on the triton kernel" in caplog.text
    ref_o, ref_final, _ = _torch(*args)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(final, ref_final, atol=3e-2, rtol=3e-2)
    if use_mega == "1":  # the mega kernel's fp16 state came back
        assert torch.equal(final, final.half().float())
    assert os.environ["GDN_USE_MEGA_GDN"] == use_mega  # never changed for the call


def test_fp32_pool_never_gets_fp16_states(monkeypatch, caplog):
    args = _inputs(pool_dtype=torch.float32)
    ops, mega, triton = _machine()
    o, final, _ = _run(ops, "2026.6.1", *args)  # without the variable: Triton keeps fp32
    assert triton.calls == 1 and mega.calls == 0
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    with caplog.at_level(logging.INFO):
        o, final, _ = _run(ops, "2026.6.1", *args)
    assert triton.calls == 1 and mega.calls == 0  # the triton rung was not asked
    assert "cannot use the triton kernel: it keeps the state in float16" in caplog.text
    ref_o, ref_final, _ = _torch(*args)
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)  # the torch rung's result


def test_64_token_chunk_states_are_never_read_from_128_token_ones(monkeypatch, caplog):
    args = _inputs()
    ops, mega, triton = _machine()
    _, _, h = _run(ops, "2026.6.1", *args, chunk_states=True)
    assert triton.calls == 1 and h.shape[0] == 3 + 1  # 64-token states from the Triton path
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    with caplog.at_level(logging.INFO):
        o, final, h = _run(ops, "2026.6.1", *args, chunk_states=True)
    assert triton.calls == 1 and mega.calls == 0
    assert "per 128 tokens" in caplog.text
    ref = _torch(*args, chunk_states=True)
    assert all(torch.equal(a, b) for a, b in zip((o, final, h), ref))


def test_a_pair_the_mega_kernel_refuses_is_predicted(monkeypatch, caplog):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    args = _inputs(hv=6, hk=2, lens=(40,))
    ops, mega, triton = _machine()
    with caplog.at_level(logging.INFO):
        _run(ops, "2026.6.1", *args)
    assert triton.calls == 0 and mega.calls == 0
    assert "refuses this head pair" in caplog.text
    assert not [r for r in caplog.records if "refused" in r.getMessage() or r.levelno >= logging.WARNING]


def test_an_unpredicted_mega_refusal_inside_the_entry_is_a_known_refusal(monkeypatch, caplog):
    """The installed kernel is older than its version string says (the post3 kernel behind a wheel
    reporting 2026.6.1): the current table admits (8, 4), the post3 kernel was not compiled for it and
    refuses inside the entry with its text; that is a known refusal (INFO), the call falls back."""
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    args = _inputs(hv=8, hk=4, lens=(40,))  # current set: 8 % 4 == 0 and 8 in the set; post3: not compiled
    ops, mega, triton = _machine(mega_variant=caps.MEGA_POST3)
    with caplog.at_level(logging.INFO):
        o, final, _ = _run(ops, "2026.6.1", *args)
        _run(ops, "2026.6.1", *args)
    assert triton.calls == 1 and mega.calls == 1  # refused once, remembered
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.INFO
    assert caps.MEGA_PAIR_TEXT in refusals[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    ref_o, ref_final, _ = _torch(*args)
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)


@pytest.mark.parametrize("env,mega_inside", [({}, True), ({"GDN_ATTN_BACKEND_TRITON": "1"}, False)])
def test_release_2026_6_0_runs_the_mega_kernel_by_default(monkeypatch, caplog, env, mega_inside):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = _inputs(pool_dtype=torch.float32)
    ops, mega, triton = _machine(version="2026.6.0")
    with caplog.at_level(logging.INFO):
        o, final, _ = _run(ops, "2026.6.0", *args)
    assert mega.calls == 0  # an fp32 pool never reaches the mega kernel
    assert triton.calls == (0 if mega_inside else 1)


def test_the_h_shape_backstop_when_the_mode_changes_under_the_rung(monkeypatch, caplog):
    """A Triton entry that returns 128-token states although the predicate and the stride probe saw
    the Triton path (the variable flipped after them): the rung refuses rather than read them as
    64-token states."""
    args = _inputs()
    mega = gdn_mega.make_mega_emulator()

    def flipping(*a, **kw):
        if probes.probing():  # the probe before serving sees the Triton path; the variable flips after it
            return gdn_triton_chunk.make_triton_chunk_emulator(mega=mega)(*a, **kw)
        monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
        try:
            return gdn_triton_chunk.make_triton_chunk_emulator(mega=mega)(*a, **kw)
        finally:
            monkeypatch.setenv("GDN_USE_MEGA_GDN", "0")

    ops = {OP_TRITON: flipping}
    with caplog.at_level(logging.INFO):
        o, final, h = _run(ops, "2026.6.1", *args, chunk_states=True)
    ref = _torch(*args, chunk_states=True)
    assert all(torch.equal(a, b) for a, b in zip((o, final, h), ref))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "expected 4 64-token chunk states" in warnings[0]


def test_triton_runs_mega_follows_the_installed_release(monkeypatch):
    sig = signature.GdnSignature(16, 8, D, D, torch.bfloat16)
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.1"):
        assert not prefill.triton_runs_mega(sig, {})
        assert prefill.triton_runs_mega(sig, {"GDN_USE_MEGA_GDN": "1"})
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.0"):
        assert prefill.triton_runs_mega(sig, {})
    with seam.install_device_facts(sgl_kernel_npu_version="2026.05.01"):
        assert not prefill.triton_runs_mega(sig, {})  # no mega wrapper here: post1 / post2
        with seam.install_emulators({OP_MEGA: gdn_mega.make_mega_emulator(variant=caps.MEGA_POST3)}):
            assert prefill.triton_runs_mega(sig, {})  # post3


def test_the_rung_calls_the_entry_inside_the_ladder_and_returns_no_h_unless_asked(monkeypatch):
    seen = []
    real = gdn_triton_chunk.make_triton_chunk_emulator()

    def entry(*a, **kw):
        seen.append(entries.IN_LADDER.get())  # an integration hook wrapping it must pass through
        return real(*a, **kw)

    args = _inputs(lens=(20,))
    o, final, h = _run({OP_TRITON: entry}, "2026.6.1", *args)
    assert seen == [True] and h is None and entries.IN_LADDER.get() is False


def test_non_finite_output_of_the_entry_in_mega_mode_is_declined(monkeypatch):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    real = gdn_mega.make_mega_emulator()

    def nan_o(*a, **kw):
        out = list(real(*a, **kw))
        out[1] = out[1].clone()
        out[1][0, -1, 0, 0] = float("nan")  # the output only: the final state is finite
        return tuple(out)

    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=nan_o))
    args = _inputs(lens=(20,))
    o, final, _ = _run({OP_MEGA: real, OP_TRITON: triton}, "2026.6.1", *args)
    assert triton.calls == 1
    ref_o, ref_final, _ = _torch(*args)
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)


def test_head_dims_above_128_never_reach_the_triton_path():
    gen = torch.Generator().manual_seed(4)
    q = l2norm(torch.randn(1, 9, 2, 256, generator=gen)).bfloat16()
    k = l2norm(torch.randn(1, 9, 2, 256, generator=gen)).bfloat16()
    v = torch.randn(1, 9, 4, 128, generator=gen).bfloat16()
    g, beta = F.logsigmoid(torch.randn(1, 9, 4, generator=gen)), torch.rand(1, 9, 4, generator=gen).bfloat16()
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator())
    with seam.install_emulators({OP_TRITON: triton}):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 9]))
    assert triton.calls == 0


def test_a_real_mega_kernel_never_serves_cpu_tensors(monkeypatch, caplog):
    """A real (not emulated) mega kernel and the Triton entry in mega mode: CPU tensors are not the
    kernel's, so neither the mega rung nor the triton rung in mega mode takes them."""
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    kernel = Counting(gdn_mega.make_mega_emulator())
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=kernel))
    args = _inputs(lens=(20,))
    with seam.install_real_kernels({OP_MEGA: kernel}), seam.install_emulators({OP_TRITON: triton}), \
            caplog.at_level(logging.INFO):
        chunk_gated_delta_rule(*args[:5], cu_seqlens=args[5], initial_state=args[6])
    assert kernel.calls == 0 and triton.calls == 0


@pytest.mark.parametrize("case,text", [
    ("950", "this sgl-kernel-npu build has no torch.ops.npu.mega_chunk_gdn (Ascend 950 builds leave it out)"),
    ("chunk_states", "its per-chunk states are per 128 tokens, and 64-token chunk states were asked for"),
    ("pair", "the installed mega kernel refuses this head pair (the Triton entry does not plan heads)"),
    ("dim", "the mega kernel takes head dim 128 only"),
])
def test_the_skip_reasons_in_full(monkeypatch, caplog, case, text):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    ops, mega, triton = _machine()
    if case == "950":
        ops = {OP_TRITON: gdn_triton_chunk.make_triton_chunk_emulator(mega=gdn_sets.missing_torch_op("mega_chunk_gdn"))}
    args = _inputs(hv=6, hk=2, lens=(20,)) if case == "pair" else _inputs(lens=(20,))
    if case == "dim":
        q, k, v, g, beta, cu, h0 = args
        args = (q[..., :64].contiguous(), k[..., :64].contiguous(), v[..., :64].contiguous(), g, beta, cu,
                h0[..., :64, :64].contiguous())
    with caplog.at_level(logging.INFO):
        _run(ops, "2026.6.1", *args, chunk_states=case == "chunk_states")
    assert ("cannot use the triton kernel: sgl-kernel-npu's Triton entry runs the mega kernel here "
            f"(GDN_USE_MEGA_GDN=1 or its release's default) and {text}") in caplog.text


def test_fp32_pool_chunk_states_never_come_from_the_triton_path(caplog):
    """Radix-cache tracking on an fp32 pool: the Triton path stores its per-chunk states in k's dtype
    (bf16), so a snapshot from them would be rounded; the rung is skipped without probing and the
    torch rung's fp32 chunk states serve."""
    args = _inputs(hv=4, hk=2, pool_dtype=torch.float32)
    ops, mega, triton = _machine()
    with caplog.at_level(logging.INFO):
        o, final, h = _run(ops, "2026.6.1", *args, chunk_states=True)
    assert triton.calls == 0 and mega.calls == 0
    assert "stored in the inputs' bfloat16, below the pool's float32" in caplog.text
    ref = _torch(*args, chunk_states=True)
    assert all(torch.equal(a, b) for a, b in zip((o, final, h), ref))
    # without chunk states the same fp32 pool keeps the Triton path (its running state is fp32)
    _run(ops, "2026.6.1", *args)
    assert triton.calls == 1


def test_the_triton_entry_rounds_its_chunk_states_to_the_inputs_dtype():
    """The emulator's rule the rung above relies on (chunk_gated_delta_rule_fwd_h_npu's
    ``h = k.new_empty(...)``): h is bf16 for bf16 inputs even from an fp32 initial state."""
    q, k, v, g, beta, cu, h0 = _inputs(hv=4, hk=2, pool_dtype=torch.float32)
    entry = gdn_triton_chunk.make_triton_chunk_emulator(mega=None, version="2026.6.1")
    _, final, h = entry(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(), cu_seqlens=cu)
    assert h.dtype == torch.bfloat16 and final.dtype == torch.float32


def test_named_chunk_states_of_an_fp32_pool_are_recomputed_exactly(caplog):
    """With ``exact_chunks`` (what radix-cache tracking reads) the Triton path serves an fp32 pool:
    the named chunk states are the fp32 final states of the entry run on those prefixes (the state
    the full run carried there), one extra launch; the other chunk states stay the entry's bf16."""
    q, k, v, g, beta, cu, h0 = _inputs(hv=4, hk=2, pool_dtype=torch.float32, lens=(150, 20, 200))
    ops, mega, triton = _machine()
    named = ((0, 2), (2, 1), (1, 0))
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), seam.install_emulators(ops):
        o, final, h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True,
                                        exact_chunks=named, skip=("mega",))
    assert triton.calls == 2 and mega.calls == 0
    entry = gdn_triton_chunk.make_triton_chunk_emulator(mega=None, version="2026.6.1")
    kf = h0.float().transpose(-1, -2).contiguous()
    offsets = {0: 0, 1: 3, 2: 4}  # 150 -> 3 chunks, 20 -> 1, 200 -> 4
    starts = {0: 0, 1: 150, 2: 170}
    for i, c in named:
        if c == 0:
            want = h0[i].float()
        else:
            s = slice(starts[i], starts[i] + 64 * c)
            _, fin, _ = entry(q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], initial_state=kf[i:i + 1],
                              cu_seqlens=torch.tensor([0, 64 * c]))
            want = fin[0].transpose(-1, -2)
        assert torch.equal(h[offsets[i] + c], want), (i, c)
    full_o, full_final, full_h = entry(q, k, v, g, beta, initial_state=kf, cu_seqlens=cu)
    assert torch.equal(o, full_o) and torch.equal(final, full_final.transpose(-1, -2))  # the one full launch
    unnamed = [j for j in range(8) if j not in (2, 3, 5)]
    assert torch.equal(h[unnamed], full_h[0, unnamed].float().transpose(-1, -2))
    assert not torch.equal(h[2], full_h[0, 2].float().transpose(-1, -2))  # the rounding it repairs
    ref = _torch(q, k, v, g, beta, cu, h0, chunk_states=True)[2]  # independent: the exact chunk states
    torch.testing.assert_close(h[[2, 3, 5]], ref[[2, 3, 5]], atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("bad", [((3, 0),), ((0, 3),), ((0, -1),), ((0,),), ((0.0, 1),), ((True, 1),)])
def test_exact_chunks_naming_no_chunk_is_an_error(bad):
    q, k, v, g, beta, cu, h0 = _inputs(pool_dtype=torch.float32)  # lens 150, 20: 3 and 1 chunks
    with pytest.raises(ValueError, match=r"exact_chunks=.*\(sequence, chunk\) int pairs"):
        chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True,
                          exact_chunks=bad, backend="torch")
    with pytest.raises(ValueError, match="None unless chunk_states=True"):
        chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, exact_chunks=((0, 0),))
