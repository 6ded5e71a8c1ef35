"""The CPU workspaces of the chunked GDN path are kept from call to call (per thread): what a
call returns must never alias them, and threads must not share them."""

from __future__ import annotations

import threading

import pytest
import torch

from sglang_ascend_hybrid.ops import cpu_workspace
from sglang_ascend_hybrid.ops.gdn import torch_impl as ref_mod
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.support import gdn_inputs


def _case(lens, seed, with_state=True):
    x = gdn_inputs.packed(lens, seed=seed, hv=4, hk=2, k_dim=16, with_state=with_state, state_scale=1.0)
    return (x.q, x.k, x.v, x.g, x.beta), dict(cu_seqlens=x.cu_seqlens, initial_state=x.state)


def _run(case):
    args, kw = case
    return chunk_gdn_torch(*args, **kw, chunk_states=True)


def test_results_survive_later_calls():
    """Single sequence (final states from the running states in order) and a varlen batch in
    another order: a later call with other inputs leaves every earlier result as it was."""
    for lens in ([200], [70, 130, 5]):
        first = _run(_case(lens, seed=1))
        kept = [t.clone() for t in first]
        for seed in (2, 3):
            _run(_case(lens, seed=seed))
            _run(_case([64, 1, 300], seed=seed, with_state=False))
        for got, want in zip(first, kept):
            assert torch.equal(got, want)
        storages = {ws.untyped_storage().data_ptr() for ws in cpu_workspace.buffers("cpu").values()}
        assert not any(t.untyped_storage().data_ptr() in storages for t in first)


def test_threads_do_not_share_workspaces():
    cases = [_case([90, 40], seed=s) for s in range(4)]
    want = [_run(c) for c in cases]
    got = [None] * len(cases)
    barrier = threading.Barrier(len(cases))

    def work(i):
        barrier.wait()
        for _ in range(3):
            got[i] = _run(cases[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g_, w_ in zip(got, want):
        for a, b in zip(g_, w_):
            assert torch.equal(a, b)


def test_workspaces_made_under_inference_mode_serve_later_calls_outside_it():
    """A first call under ``torch.inference_mode`` (as a server runs) must not leave inference
    tensors behind: a later call outside it writes the same buffers in place."""
    state = {}

    def work():  # a fresh thread: its own, empty workspaces
        try:
            case = _case([70, 9], seed=5)
            with torch.inference_mode():
                state["inside"] = _run(case)
            state["outside"] = _run(case)
            with torch.inference_mode():
                state["again"] = _run(case)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            state["error"] = exc

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "error" not in state, state.get("error")
    for a, b, c in zip(state["inside"], state["outside"], state["again"]):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_final_states_outside_the_workspace_survive_later_calls(monkeypatch):
    """States too large for the state workspace are their own tensor and returned as they are;
    states inside it are returned as a copy.  Either way a later call leaves them alone."""
    for limit in (0, 1 << 30):                      # every state outside / inside the workspace
        monkeypatch.setattr(ref_mod, "_STATE_WORKSPACE_MAX", limit)
        for lens in ([70], [40, 70]):               # final states in running order / reordered
            first = _run(_case(lens, seed=4))
            kept = first[1].clone()
            _run(_case(lens, seed=5))
            assert torch.equal(first[1], kept), (limit, lens)


# Every temporary of the chunked path that lives in the workspace, by name (buf(name, ...) keys).
WORKSPACE_NAMES = {"S", "q", "v", "kk", "qk0", "decay", "qk", "u", "w", "qg", "ke"}


def _fresh_workspace():
    cpu_workspace.buffers("cpu").clear()


def test_a_second_call_of_the_same_shapes_allocates_nothing_and_resizes_no_output():
    """Every temporary is a view of a named kept buffer sized for it: a repeated call finds each
    buffer as it left it (no new name, no new memory), and no ``out=`` tensor is ever resized (torch
    warns when it resizes one: an error here)."""
    import warnings

    _fresh_workspace()
    case = _case([70, 130, 5], seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(case)
        names = {name for name, _ in cpu_workspace.buffers("cpu")}
        ptrs = {key: t.data_ptr() for key, t in cpu_workspace.buffers("cpu").items()}
        _run(case)
    assert WORKSPACE_NAMES <= names, sorted(names)
    assert {key: t.data_ptr() for key, t in cpu_workspace.buffers("cpu").items()} == ptrs


@pytest.mark.filterwarnings("error")  # an out= tensor of another shape is resized with a warning
@pytest.mark.parametrize("limit_offset,in_workspace", [(0, True), (-1, False)])
def test_running_states_are_workspace_up_to_the_limit_and_correct_either_way(monkeypatch, limit_offset,
                                                                            in_workspace):
    lens, hv, k_dim = [70, 130, 5], 4, 16
    monkeypatch.setattr(ref_mod, "_STATE_WORKSPACE_MAX", len(lens) * hv * k_dim * k_dim + limit_offset)
    _fresh_workspace()
    case = _case(lens, seed=5)
    o, final, h = _run(case)
    assert (("S", torch.float32) in cpu_workspace.buffers("cpu")) is in_workspace
    args, kw = case
    want = naive_recurrent_gated_delta_rule(*args, **kw)
    torch.testing.assert_close(o, want[0], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(final, want[1], atol=2e-4, rtol=1e-4)


def test_only_chunks_decaying_past_the_product_range_take_the_exact_exps(monkeypatch):
    """Mild gates use the outer product exp(G_r) exp(-G_j); a head decaying about -2.1 per token goes
    past the range within a chunk and takes the exact exps of differences (the same values either
    way, so the split is checked where it is made)."""
    seen = []
    real = ref_mod._gate_factors

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out[6])  # exact: one flag per flat chunk
        return out

    monkeypatch.setattr(ref_mod, "_gate_factors", spy)
    mild = gdn_inputs.packed([64], seed=1, hv=2, hk=1, k_dim=16)
    chunk_gdn_torch(mild.q, mild.k, mild.v, mild.g, mild.beta, cu_seqlens=mild.cu_seqlens)
    strong = gdn_inputs.packed([64], seed=1, hv=2, hk=1, k_dim=16, strong_heads=(0, 1))
    chunk_gdn_torch(strong.q, strong.k, strong.v, strong.g, strong.beta, cu_seqlens=strong.cu_seqlens)
    assert not any(seen[0]) and all(seen[1])
