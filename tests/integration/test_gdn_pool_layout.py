"""The GDN hooks follow the SSM pool's physical layout, never the view SGLang hands them.

SGLang 0.5.20 with speculative decoding on NPU hands the GDN layers ``temporal.transpose(-1, -2)``
(logically ``[.., Hv, K, V]``, bytes value first) and commits accepted verify steps with
sgl-kernel-npu's ``move_intermediate_cache``, which copies raw memory.  Here one GDN layer goes
prefill (the 0.5.20 ``TritonGDNKernel.extend`` hook, then upstream's ``ssm_states[idx] = final``
through the view), verify, commit with some drafts rejected, verify again, commit, and decode,
through the plugin's hooks on exactly such a pool, against an fp64 token recurrence; the pool's
bytes are checked value first after every step.  Head dims are equal (K = V, as in every Qwen3.5 /
Qwen3-Next): a transposed state then raises nothing anywhere, it is only wrong.  The negative control
reads the view logically (the behaviour before the fix) and must fail.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.emulators.mamba_state_update import emulate_move_intermediate_cache
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import pool_layout
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT

HV, HK, D = 6, 2, 32  # the (6, 2) per-rank heads of Qwen3.6-27B at TP=8; K = V = D
SLOTS, B, S = 5, 3, 4
CACHE = torch.tensor([3, 1, 4], dtype=torch.int32)
PREFILL_LENS = (5, 9, 3)
SCALE = D ** -0.5


def _l2(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


class Oracle:
    """fp64 token recurrence per request, states value first [Hv, V, K]."""

    def __init__(self):
        self.state = {b: torch.zeros(HV, D, D, dtype=torch.float64) for b in range(B)}

    @staticmethod
    def step(state, q, k, v, g, beta):
        q, k = (_l2(x.double()).repeat_interleave(HV // HK, 0) for x in (q, k))
        state = state * g.double().exp()[:, None, None]
        u = beta.double()[:, None] * (v.double() - torch.einsum("hvk,hk->hv", state, k))
        state = state + u[:, :, None] * k[:, None, :]
        return state, torch.einsum("hvk,hk->hv", state, q * SCALE)


def _rand(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen) * scale


def _pool_0520(dtype):
    """The pool as SGLang 0.5.20 allocates it with speculative decoding on NPU: value-first bytes
    ``[layers, slots, Hv, V, K]`` handed out as their transpose, and the contiguous scratch
    ``[layers, slots, draft, Hv, K, V]`` (its shape follows the transposed view)."""
    physical = torch.zeros(1, SLOTS, HV, D, D, dtype=dtype)
    scratch = torch.zeros(1, SLOTS, S, HV, D, D, dtype=dtype)
    return physical, physical.transpose(-1, -2), scratch


def _rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _check_pool(physical, oracle, tol):
    for b in range(B):
        got = physical[0, int(CACHE[b])]
        assert _rel(got, oracle.state[b]) < tol, f"request {b}: pool bytes are not its value-first state"


def _prefill(view, oracle, gen, dtype):
    T = sum(PREFILL_LENS)
    q, k = (_rand(gen, 1, T, HK, D).bfloat16() for _ in range(2))
    v = _rand(gen, 1, T, HV, D).bfloat16()
    g = F.logsigmoid(_rand(gen, 1, T, HV) + 2.0)
    beta = torch.rand(1, T, HV, generator=gen).bfloat16()
    cu = torch.tensor([0, *torch.tensor(PREFILL_LENS).cumsum(0).tolist()], dtype=torch.int32)
    token = gdn_hooks._EXTEND_STEP.set(NS(has_mamba_track_mask=False))
    try:
        o, final, _ = gdn_hooks.triton_gdn_extend(None, None, q, k, v, g, beta, ssm_states=view[0],
                                                  cache_indices=CACHE.long(), query_start_loc=cu)
    finally:
        gdn_hooks._EXTEND_STEP.reset(token)
    view[0][CACHE.long()] = final.to(dtype)  # upstream's forward_extend, through its view
    ref = []
    for b in range(B):
        for t in range(int(cu[b]), int(cu[b + 1])):
            oracle.state[b], out = Oracle.step(oracle.state[b], q[0, t].float(), k[0, t].float(), v[0, t].float(),
                                               g[0, t], beta[0, t].float())
            ref.append(out)
    return _rel(o[0], torch.stack(ref))


def _verify(view, scratch, oracle, gen, accepted):
    mix = torch.cat([_rand(gen, B, S, 2 * HK * D), _rand(gen, B, S, HV * D)], -1).bfloat16()
    beta = _rand(gen, B, S, HV).bfloat16()  # pre-sigmoid: the op applies it
    g = F.logsigmoid(_rand(gen, B, S, HV) + 2.0)
    backend = NS(graph_mode=False, num_accept_tokens=torch.ones(B, dtype=torch.int32),
                 actual_seq_lengths=torch.full((B,), S, dtype=torch.int32),
                 ssm_state_indices=torch.arange(B * S, dtype=torch.int32))
    out = gdn_hooks.ascend_verify_update(None, backend, mix, HK, HV, D, D, recurrent_state=view[0], beta=beta, g=g,
                                         cache_indices=CACHE, intermediate_state=scratch[0])
    ref = torch.zeros(B, S, HV, D, dtype=torch.float64)
    for b in range(B):
        state = oracle.state[b]
        for t in range(S):
            q, k, v = torch.split(mix[b, t].float(), [HK * D, HK * D, HV * D])
            state, ref[b, t] = Oracle.step(state, q.view(HK, D), k.view(HK, D), v.view(HV, D), g[b, t],
                                           torch.sigmoid(beta[b, t].float()))
            if t == accepted[b]:
                oracle.state[b] = state  # what the commit keeps
    # SGLang's commit: update_mamba_state_after_mtp_verify -> move_intermediate_cache on the whole pool
    emulate_move_intermediate_cache(view, scratch, CACHE.long(), torch.arange(B), torch.tensor(accepted))
    return _rel(out, ref)


def _decode(view, oracle, gen):
    q, k = (_rand(gen, 1, B, HK, D).bfloat16() for _ in range(2))
    v = _rand(gen, 1, B, HV, D).bfloat16()
    a, b_ = _rand(gen, B, HV).bfloat16(), _rand(gen, B, HV).bfloat16()
    A_log, dt_bias = _rand(gen, HV, scale=0.5), _rand(gen, HV, scale=0.5)
    out = gdn_hooks.ascend_gdn_decode(None, None, q, k, v, a, b_, A_log=A_log, dt_bias=dt_bias, ssm_states=view[0],
                                      cache_indices=CACHE.long(), query_start_loc=torch.arange(B + 1))
    g = -A_log.exp() * F.softplus(a.float() + dt_bias)
    ref = []
    for b in range(B):
        oracle.state[b], o = Oracle.step(oracle.state[b], q[0, b].float(), k[0, b].float(), v[0, b].float(), g[b],
                                         torch.sigmoid(b_[b].float()))
        ref.append(o)
    return _rel(out.reshape(B, HV, D), torch.stack(ref))


def _run(dtype):
    """Errors per step (prefill, verify 1, pool after commit 1, verify 2, decode) and the pool checks."""
    gen = torch.Generator().manual_seed(7)
    physical, view, scratch = _pool_0520(dtype)
    oracle = Oracle()
    errors = {"prefill": _prefill(view, oracle, gen, dtype)}
    errors["verify 1"] = _verify(view, scratch, oracle, gen, accepted=[0, 3, 1])  # drafts partly rejected
    errors["pool after commit 1"] = max(_rel(physical[0, int(CACHE[b])], oracle.state[b]) for b in range(B))
    errors["verify 2"] = _verify(view, scratch, oracle, gen, accepted=[2, 0, 3])
    errors["decode"] = _decode(view, oracle, gen)
    errors["pool after decode"] = max(_rel(physical[0, int(CACHE[b])], oracle.state[b]) for b in range(B))
    return errors


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_prefill_verify_commit_decode_on_the_0_5_20_speculative_pool_match_the_fp64_recurrence(dtype):
    op, calls = gdn_npu_recurrent.make_npu_recurrent_emulator(), []

    def counted(*args, **kwargs):
        calls.append(args[1].dtype)
        return op(*args, **kwargs)

    with seam.install_emulators({OP_NPU_RECURRENT: counted}):
        errors = _run(dtype)
    assert max(errors.values()) < 2e-2, errors
    # the NPU op stays usable on the transposed view where its contract allows (bf16 only): two verifies, a decode
    assert calls == ([torch.bfloat16] * 3 if dtype == torch.bfloat16 else []), calls


def test_reading_the_view_logically_fails_after_the_first_commit(monkeypatch):
    """Negative control: the hooks indexing SGLang's view as value first (before the fix)."""
    monkeypatch.setattr(pool_layout, "layout_of", lambda t, name="": pool_layout.VALUE_FIRST)
    with seam.install_emulators({OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        errors = _run(torch.float32)
    assert errors["prefill"] < 2e-2 and errors["verify 1"] < 2e-2  # nothing shows before the commit
    # the commit copies the verify scratch's (right) bytes; every later read through the view is transposed
    assert errors["pool after commit 1"] < 2e-2
    assert min(errors["verify 2"], errors["decode"], errors["pool after decode"]) > 0.3, errors


def test_the_value_first_view_follows_strides():
    physical = torch.zeros(SLOTS, HV, D, 2 * D)  # unequal dims: shapes tell which is which here
    assert pool_layout.value_first(physical) is physical
    view = physical.transpose(-1, -2)
    assert pool_layout.layout_of(view) == pool_layout.TRANSPOSED_VIEW
    vf = pool_layout.value_first(view)
    assert vf.shape == physical.shape and vf.data_ptr() == physical.data_ptr() and vf.stride() == physical.stride()
    assert pool_layout.in_view_order(vf, pool_layout.TRANSPOSED_VIEW).shape == view.shape
    assert pool_layout.layout_of(physical[CACHE.long()]) == pool_layout.VALUE_FIRST  # a gathered copy


def test_an_unrecognised_layout_is_refused_naming_the_tensor():
    strided = torch.zeros(SLOTS, HV, D, 2 * D)[..., ::2]
    with pytest.raises(pool_layout.PoolLayoutError, match="recurrent_state: shape .* strides"):
        pool_layout.value_first(strided, "recurrent_state")
    with pytest.raises(pool_layout.PoolLayoutError, match="expected a GDN state tensor"):
        pool_layout.layout_of(torch.zeros(4, 4))


def _runner(temporal, intermediate=None, v_dim=D, k_dim=D):
    cfg = NS(linear_value_head_dim=v_dim, linear_key_head_dim=k_dim, linear_num_value_heads=HV,
             linear_num_key_heads=HK)
    cache = NS(temporal=temporal, intermediate_ssm=intermediate)
    return NS(req_to_token_pool=NS(mamba_pool=NS(mamba_cache=cache)), model_config=NS(hf_text_config=cfg),
              dtype=torch.bfloat16)


def _gdn_backend():
    return NS(linear_attn_backend=type("AscendGDNAttnBackend", (), {})())


@pytest.mark.parametrize("case,match", [
    ("strided", "neither value first"),
    ("key_first", "value head dim 64 in memory, the model's is 32"),
    ("scratch", "intermediate SSM cache.*not contiguous"),
    ("key_dim", "gives key head dim 32 in memory, the model's is 64"),
])
def test_the_backend_probe_refuses_a_pool_it_cannot_serve_at_startup(case, match):
    if case == "strided":
        runner = _runner(torch.zeros(1, SLOTS, HV, D, 2 * D)[..., ::2])
    elif case == "key_first":  # a contiguous pool whose bytes are [.., K, V] with K = 32, V = 64
        runner = _runner(torch.zeros(1, SLOTS, HV, 2 * D, D), v_dim=D, k_dim=2 * D)
    elif case == "key_dim":
        runner = _runner(torch.zeros(1, SLOTS, HV, D, D), v_dim=D, k_dim=2 * D)
    else:
        runner = _runner(torch.zeros(1, SLOTS, HV, D, D), intermediate=torch.zeros(1, SLOTS, HV, S, D, D)
                         .transpose(2, 3))
    with pytest.raises(pool_layout.PoolLayoutError, match=match):
        gdn_hooks.probe_gdn_backend(runner, _gdn_backend())


def test_the_chunk_hook_reads_the_layout_of_its_backends_pool():
    physical = torch.zeros(1, SLOTS, HV, D, D)
    assert gdn_hooks.backend_pool_layout(_runner(physical)) == pool_layout.VALUE_FIRST
    assert gdn_hooks.backend_pool_layout(_runner(physical.transpose(-1, -2))) == pool_layout.TRANSPOSED_VIEW
    assert gdn_hooks.backend_pool_layout(NS()) == pool_layout.VALUE_FIRST


def test_the_chunk_hook_on_a_transposed_view_writes_the_same_bytes_as_on_the_plain_pool():
    """``AscendGDNAttnBackend.chunk_gdn`` gets ``ssm_states[cache_indices]`` gathered through SGLang's view
    and forward_extend assigns the results back through it: the bytes must not depend on the view."""
    gen = torch.Generator().manual_seed(3)
    T = sum(PREFILL_LENS)
    q, k = (_rand(gen, T, HK, D).bfloat16() for _ in range(2))
    v = _rand(gen, T, HV, D).bfloat16()
    g = F.logsigmoid(_rand(gen, T, HV) + 2.0)
    beta = torch.rand(T, HV, generator=gen).bfloat16()
    cu = torch.tensor([0, *torch.tensor(PREFILL_LENS).cumsum(0).tolist()], dtype=torch.int32)
    start = _rand(gen, 1, SLOTS, HV, D, D, scale=0.1)
    pools = []
    for transposed in (False, True):
        physical = start.clone()
        view = physical.transpose(-1, -2) if transposed else physical
        backend = _runner(view)
        backend.forward_metadata = NS(has_mamba_track_mask=True, track_ssm_h_src=None)
        o, final, h = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g, beta, view[0][CACHE.long()], cu)
        view[0][CACHE.long()] = final
        assert h.shape[-2:] == view.shape[-2:]
        pools.append((physical, o, h.transpose(-1, -2) if transposed else h))
    (p0, o0, h0), (p1, o1, h1) = pools
    assert torch.equal(o0, o1) and torch.equal(h0, h1)
    assert torch.equal(p0, p1) and not torch.equal(p0, start)


@pytest.mark.parametrize("size,stride,expected", [
    ((3, 4, 5), (20, 5, 1), pool_layout.VALUE_FIRST),
    ((3, 5, 4), (20, 1, 5), pool_layout.TRANSPOSED_VIEW),
    ((3, 1, 5), (5, 7, 1), pool_layout.VALUE_FIRST),      # one row: its stride says nothing
    ((3, 4, 1), (4, 1, 9), pool_layout.VALUE_FIRST),      # one column: its stride says nothing
    ((3, 4, 5), (40, 10, 2), None),                       # every other element
    ((3, 4, 5), (40, 10, 1), None),                       # padded rows
    ((3, 5, 4), (40, 1, 10), None),                       # a transpose of padded rows
])
def test_the_layout_is_read_from_the_last_two_strides(size, stride, expected):
    t = torch.zeros(200).as_strided(size, stride)
    if expected is None:
        with pytest.raises(pool_layout.PoolLayoutError, match=r"ssm_states: shape \(3, "):
            pool_layout.layout_of(t)
    else:
        assert pool_layout.layout_of(t) == expected


def test_a_whole_pool_and_a_layer_slice_give_the_same_value_first_view():
    physical = torch.zeros(2, SLOTS, HV, D, 2 * D)
    vf = pool_layout.value_first(physical.transpose(-1, -2))
    assert vf.shape == physical.shape and vf.stride() == physical.stride()
    assert pool_layout.value_first(physical.transpose(-1, -2)[1]).stride() == physical[1].stride()
    assert pool_layout.layout_of(torch.zeros(HV, D, D)) == pool_layout.VALUE_FIRST  # three dims are enough


def test_check_pool_returns_the_layout_and_names_what_does_not_match():
    physical = torch.zeros(1, SLOTS, HV, D, 2 * D)  # V = 32, K = 64
    assert pool_layout.check_pool(physical, value_dim=D, key_dim=2 * D) == pool_layout.VALUE_FIRST
    assert pool_layout.check_pool(physical.transpose(-1, -2), value_dim=D, key_dim=2 * D,
                                  intermediate=torch.zeros(3)) == pool_layout.TRANSPOSED_VIEW
    with pytest.raises(pool_layout.PoolLayoutError, match="gives key head dim 64 in memory, the model's is 32"):
        pool_layout.check_pool(physical, value_dim=D, key_dim=D)
    with pytest.raises(pool_layout.PoolLayoutError, match="^mamba pool temporal state: shape"):
        pool_layout.check_pool(torch.zeros(1, SLOTS, HV, D, 2 * D)[..., ::2])


@pytest.mark.parametrize("transposed", [False, True])
def test_the_backend_probe_hands_the_probes_the_pools_dims_in_memory(monkeypatch, transposed):
    from sglang_ascend_hybrid.ops.gdn import decode, prefill

    seen = []
    monkeypatch.setattr(decode, "probe_before_serving", lambda *a: seen.append(("decode", a)))
    monkeypatch.setattr(prefill, "probe_triton_entry_before_serving", lambda *a: seen.append(("triton", a)))
    physical = torch.zeros(1, SLOTS, HV, D, 2 * D, dtype=torch.float32)  # V = 32, K = 64
    runner = _runner(physical.transpose(-1, -2) if transposed else physical, v_dim=D, k_dim=2 * D)
    runner.model_config = NS(hf_config=runner.model_config.hf_text_config)  # a config without a text part
    gdn_hooks.probe_gdn_backend(runner, _gdn_backend())
    entry = gdn_hooks.decode_contract.installed_decode_entry()
    assert seen == [("decode", (entry, torch.bfloat16, torch.float32, 2 * D, D, physical.device)),
                    ("triton", (HV, HK, 2 * D, D, torch.bfloat16, physical.device))]
    assert type(seen[1][1][1]) is int  # key heads per rank, an integer
    seen.clear()
    gdn_hooks.probe_gdn_backend(runner, NS(linear_attn_backend=object()))  # not a GDN backend: no probe
    assert seen == []


@pytest.mark.parametrize("v_dim,k_dim", [(0, D), ("32", D), (D, -1)])
def test_head_dims_the_config_does_not_state_are_not_checked(v_dim, k_dim):
    runner = _runner(torch.zeros(1, SLOTS, HV, D, 2 * D), v_dim=v_dim, k_dim=k_dim)
    dims = gdn_hooks._head_dims(runner)
    assert dims == tuple(d if isinstance(d, int) and d > 0 else None for d in (v_dim, k_dim))
    assert gdn_hooks._head_dims(_runner(torch.zeros(1), v_dim=1, k_dim=2)) == (1, 2)
    assert gdn_hooks._head_dims(NS()) == (None, None)  # a runner without a model config


def test_the_verify_hook_refuses_a_scratch_it_would_copy_instead_of_writing():
    physical, view, scratch = _pool_0520(torch.bfloat16)
    backend = NS(graph_mode=False, num_accept_tokens=torch.ones(B, dtype=torch.int32),
                 actual_seq_lengths=torch.full((B,), S, dtype=torch.int32),
                 ssm_state_indices=torch.arange(B * S, dtype=torch.int32))
    mix = torch.zeros(B, S, 2 * HK * D + HV * D, dtype=torch.bfloat16)
    with pytest.raises(pool_layout.PoolLayoutError, match=r"^intermediate_state: shape .* is not contiguous"):
        gdn_hooks.ascend_verify_update(None, backend, mix, HK, HV, D, D, recurrent_state=view[0],
                                       beta=torch.zeros(B, S, HV, dtype=torch.bfloat16), g=torch.zeros(B, S, HV),
                                       cache_indices=CACHE, intermediate_state=scratch[0].transpose(0, 1))
