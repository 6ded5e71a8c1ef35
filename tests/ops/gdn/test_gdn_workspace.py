"""The CPU workspaces of the chunked GDN path are kept from call to call (per thread): what a
call returns must never alias them, and threads must not share them."""

from __future__ import annotations

import threading

import torch

from sglang_ascend_hybrid.ops import cpu_workspace
from sglang_ascend_hybrid.ops.gdn import torch_impl as ref_mod
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
