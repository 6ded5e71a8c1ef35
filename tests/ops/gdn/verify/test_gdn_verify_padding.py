"""GDN verify: graph-padding rows (index -1) on the npu_recurrent rung.

The op (sgl-project/sgl-kernel-npu f425bdf1 ``csrc/recurrent_gated_delta_rule/op_kernel/
recurrent_gated_delta_rule_kernel.cpp``, ``Process`` / ``Compute``) has no padding skip: every token
``t < actual_seq_lengths[b]`` stores its state to row ``ssm_state_indices[b, t]``.  The rung used to
send padding rows to the scratch's last S rows; with a scratch of exactly ``B*S`` rows those are a
live request's rows, which padding then overwrote (or raced with, on the device).  Now padding goes to
the last row no request names (one exists whenever padding does, given ``rows >= B*S``; fewer rows: the
predicate refuses), and padding outputs are 0 on both rungs.

Oracle: ``naive_verify.naive_gdn_verify`` (fp64, padding writes skipped) for the live rows; the
torch rung for everything the two rungs both define."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.gdn.verify.test_gdn_verify import DK, NK, NV, _case, _max_rel, _oracle
from tests.support.sync_counter import SyncCounter


def _padded(idx_rows, *, rows, seed=0, accepted=None, lens=None):
    """A bf16 verify step whose ``ssm_state_indices`` are ``idx_rows`` (a list of B lists of S rows,
    -1 = padding; a request of all -1 is padding and gets cache index -1), over a scratch of ``rows``
    rows filled with distinct values (so an overwrite shows)."""
    B, S = len(idx_rows), len(idx_rows[0])
    c = _case(B, S, seed=seed, accepted=accepted, lens=lens)
    c["idx"] = torch.tensor(idx_rows, dtype=torch.int32)
    c["cache"] = torch.tensor([-1 if all(r < 0 for r in req) else 1 + b for b, req in enumerate(idx_rows)],
                              dtype=torch.int32)
    gen = torch.Generator().manual_seed(seed + 100)
    c["inter"] = (torch.randn(rows, *c["pool"].shape[1:], generator=gen) * 0.3).bfloat16()
    return c


def _call(c, pool, inter):
    return gv.VerifyCall(c["mix"], pool, c["beta"], c["g"], DK ** -0.5, c["lengths"], c["idx"], NK, NV,
                         intermediate_state=inter, cache_indices=c["cache"], num_accepted_tokens=c["nat"])


def _live_rows(c):
    return sorted({r for b, req in enumerate(c["idx"].tolist()) for t, r in enumerate(req)
                   if r >= 0 and t < int(c["lengths"][b])})


def _run(c, backend, op=None):
    pool, inter = c["pool"].clone(), c["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: op or gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        out = gv.recurrent_verify(_call(c, pool, inter), backend=backend, check_values=False)
    return out, pool, inter


# (name, ssm_state_indices, scratch rows): B*S rows exactly unless said otherwise
CASES = [
    ("padding in the middle, SGLang's b*S + t rows", [[0, 1], [-1, -1], [4, 5]], 6),
    ("a live request owns the last S rows", [[4, 5], [0, 1], [-1, -1]], 6),
    ("two padding requests around a live one", [[-1, -1, -1], [3, 4, 5], [-1, -1, -1], [0, 1, 2]], 12),
    ("padding first, every other row live", [[-1, -1], [0, 1], [2, 3], [4, 5]], 8),
    ("a -1 inside a live request", [[0, -1, 2], [3, 4, 5], [-1, -1, -1]], 9),
    ("SGLang's scratch, one spare entry", [[0, 1], [-1, -1], [4, 5]], 8),
]


@pytest.mark.parametrize("name,idx_rows,rows", CASES, ids=[c[0] for c in CASES])
def test_padding_never_writes_a_live_row_and_live_rows_equal_the_torch_rung_and_the_oracle(name, idx_rows, rows):
    c = _padded(idx_rows, rows=rows, seed=len(name))
    calls = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()
    out, pool, inter = _run(c, "npu_recurrent", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert calls == [1], "the npu_recurrent rung did not serve the call"
    t_out, t_pool, t_inter = _run(c, "torch")
    ref_out, _, ref_inter = _oracle(c)
    live = _live_rows(c)
    live_tok = (c["idx"] >= 0).view(*c["idx"].shape, 1, 1).expand_as(out)
    assert torch.equal(pool, c["pool"]) and torch.equal(t_pool, c["pool"])       # verify never writes the pool
    # every row a live token writes: the oracle's value (bf16 rounding), and the torch rung's
    assert _max_rel(inter[live], ref_inter[live]) < 2e-2, name
    assert _max_rel(inter[live], t_inter[live].double()) < 2e-2, name
    assert torch.isfinite(inter[live]).all()
    # live outputs equal; padding outputs are 0 on both rungs
    assert _max_rel(out[live_tok].view(-1), ref_out[live_tok].view(-1)) < 2e-2, name
    assert _max_rel(out.float(), t_out.double()) < 2e-2
    assert torch.equal(out[~live_tok], torch.zeros_like(out[~live_tok]))
    assert torch.equal(t_out[~live_tok], torch.zeros_like(t_out[~live_tok]))


def test_a_scratch_smaller_than_the_batch_is_refused_by_the_predicate():
    """Fewer than B*S scratch rows: no row is sure to be free for padding, so the rung refuses from
    shapes alone (capture-safe) and the torch rung serves."""
    c = _padded([[0, 1], [-1, -1], [2, 3]], rows=5)
    assert "fewer than B*S" in gv._npu_reason(_call(c, c["pool"], c["inter"]))
    calls = []
    out, _, inter = _run(c, "auto", lambda *a, **k: calls.append(1))
    assert calls == []
    t_out, _, t_inter = _run(c, "torch")
    assert torch.equal(out, t_out) and torch.equal(inter, t_inter)
    with pytest.raises(ForcedRungUnavailable):
        _run(c, "npu_recurrent")


def test_the_remap_reads_no_value_on_the_host():
    """The padding remap is tensor ops of fixed shapes: no sync, nothing data-dependent."""
    c = _padded([[0, 1], [-1, -1], [4, 5]], rows=6)
    pool, inter = c["pool"].clone(), c["inter"].clone()
    op = gdn_npu_recurrent.make_npu_recurrent_emulator()
    seen = []

    def shape_only(mix, state, beta, scale, lens, idx, nk, nv, **kw):
        seen.append(idx)
        return mix.new_zeros(mix.shape[0], mix.shape[1], nv, state.shape[2])

    with seam.install_emulators({OP_NPU_RECURRENT: shape_only}):
        with SyncCounter(device_of_interest="cpu") as counter:
            gv.recurrent_verify(_call(c, pool, inter), backend="npu_recurrent", check_values=False)
    assert counter.total == 0, counter.counts
    sent = seen[0].tolist()
    assert sent[0] == [0, 1] and sent[2] == [4, 5]
    assert sent[1] == [3, 3]   # the last row no request names
    with seam.install_emulators({OP_NPU_RECURRENT: op}):
        gv.recurrent_verify(_call(c, pool, inter), backend="npu_recurrent", check_values=False)


# ----------------------------------------------------------------------------- the emulator


# ----------------------------------------------------------------------------- value checks


def test_value_checks_name_overlapping_writes():
    c = _padded([[0, 1], [2, 1], [-1, -1]], rows=6)
    with pytest.raises(ValueError, match=r"^ssm_state_indices=.*each state row written once per step "
                                         r"\(row 1: request 0 token 1 and request 1 token 1\)"):
        gv.recurrent_verify(_call(c, c["pool"].clone(), c["inter"].clone()))


def test_value_checks_name_a_scratch_row_read_while_another_request_writes_it():
    """Request 1 starts from scratch row 1 (num_accepted_tokens 2, 1 % S != 0) and writes only its
    first token; request 0 writes row 1 in the same step: the read has no defined value."""
    c = _padded([[0, 1], [2, 3], [4, 5]], rows=6, accepted=[1, 2, 1], lens=[2, 1, 2])
    gv.recurrent_verify(_call(c, c["pool"].clone(), c["inter"].clone()), backend="torch")  # row 3: written by no one
    c["idx"] = torch.tensor([[0, 1], [2, 1], [4, 5]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^ssm_state_indices=.*no initial state row another request writes in the "
                                         r"same step \(row 1: read by request 1, written by request 0\)"):
        gv.recurrent_verify(_call(c, c["pool"].clone(), c["inter"].clone()))


def test_value_checks_name_a_padding_initial_row_of_a_request_that_writes():
    c = _padded([[-1, 1], [2, 3], [4, 5]], rows=6)
    with pytest.raises(ValueError, match=r"^ssm_state_indices=.*request 0 starts from padding"):
        gv.recurrent_verify(_call(c, c["pool"].clone(), c["inter"].clone()))


def test_steps_on_one_index_buffer_refilled_in_place_get_their_own_padding():
    """The padded indices are kept across a step's layers (``ops.step_cache``); the next step refills the
    same index buffer in place and must get its own padding (outputs 0 where it pads, the oracle elsewhere)."""
    first = _padded([[0, 1], [-1, -1], [4, 5]], rows=8, seed=3)
    buffer = first["idx"]
    for idx_rows in ([[0, 1], [-1, -1], [4, 5]], [[-1, -1], [2, 3], [4, 5]], [[0, 1], [2, 3], [-1, -1]]):
        c = _padded(idx_rows, rows=8, seed=3)
        buffer.copy_(c["idx"])
        c["idx"] = buffer                                  # the same tensor object every step
        for _ in range(2):                                 # two layers of the step
            out, _, inter = _run(c, "npu_recurrent")
            ref_out, _, ref_inter = _oracle(c)
            live_tok = (c["idx"] >= 0).view(*c["idx"].shape, 1, 1).expand_as(out)
            assert torch.equal(out[~live_tok], torch.zeros_like(out[~live_tok]))
            assert _max_rel(out[live_tok].view(-1), ref_out[live_tok].view(-1)) < 2e-2
            live = _live_rows(c)
            assert _max_rel(inter[live], ref_inter[live]) < 2e-2
