"""ATen op counts of the pure-torch chunked GDN (a performance goal): the op count is the launch count
an NPU would pay, so it must not grow back to many small ops per chunk.

The count does not depend on the head dimensions (every op is batched over them), so the
issue's shape (Hv = 16, Hk = 8, T = 4096) is counted with K = V = 32 to stay fast; one test
checks that K = V = 128 counts the same.  Design (CPU: compute chunks of ``C`` tokens and
groups of ``PAIRS`` (chunk, head) pairs, from ``reference._compute_chunk``): per group of
``PAIRS // Hv`` chunks a fixed number of ops (intra-chunk factors, inverse, output; about 120), plus four
matmul-class ops per chunk position (the hand-over; one more with ``chunk_states``).
Counts are of a call whose CPU workspaces are already allocated (a first call also counts
their ``empty``).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks import harness
from sglang_ascend_hybrid.ops.gdn import torch_impl as gdn_torch
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.support import gdn_inputs

# counts aten ops of the plugin's own torch path: no SGLang code runs (~65 s per release)
pytestmark = pytest.mark.base_release_only

HV, HK = 16, 8
C, PAIRS = gdn_torch._compute_chunk(gdn_torch.CHUNK_SIZE, torch.device("cpu"))  # compute chunk, pairs per group
OP_GOAL = 5000                # the goal: ATen ops per call at T = 4096, Hv = 16, Hk = 8
PER_POSITION = 4              # hand-over ops per chunk position: q S, u = u0 - w S, gamma S, + k_end^T u
PER_GROUP = 150               # fixed ops per group of chunks (measured about 120)


def _count(lens, d=32, seed=0, **kw):
    x = gdn_inputs.packed(lens, seed=seed, hv=HV, hk=HK, k_dim=d, with_state=False)
    args, call_kw = (x.q, x.k, x.v, x.g, x.beta), dict(cu_seqlens=x.cu_seqlens, initial_state=x.state)
    call = lambda: chunk_gdn_torch(*args, cu_seqlens=call_kw["cu_seqlens"], **kw)  # noqa: E731
    call()  # workspaces allocated
    return harness.count_torch_ops(call)[0]


def test_t4096_single_sequence_meets_the_op_goal():
    assert _count([4096]) <= OP_GOAL


def test_ops_grow_with_positions_no_faster_than_the_design():
    """Doubling the chunk positions adds at most PER_POSITION ops per position plus the fixed
    cost of the added groups; a hand-over of many ops per position (or a per-chunk loop)
    fails."""
    per_group_chunks = PAIRS // HV
    small, large = _count([2048]), _count([4096])
    positions = (4096 - 2048) // C
    groups = positions // per_group_chunks
    assert 0 < large - small <= positions * PER_POSITION + groups * PER_GROUP, (small, large)
    assert small >= (2048 // C) * PER_POSITION  # the count sees the hand-over (not a mode that saw nothing)


def test_head_dims_do_not_change_the_count():
    assert _count([512], d=128) == _count([512], d=32)


def test_varlen_batch_and_chunk_states_stay_within_the_design():
    lens = torch.randint(1, 512, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    chunks = sum((n + C - 1) // C for n in lens)
    positions = max((n + C - 1) // C for n in lens)
    groups = -(-chunks // (PAIRS // HV))
    # no per-chunk or per-sequence loop of ops: a position split by a group boundary is two
    # pieces (each with at most two new views of the running states), plus the fixed costs
    pieces = positions + groups
    assert _count(lens) <= 100 + pieces * (PER_POSITION + 2) + groups * PER_GROUP
    # per-chunk states: one copy per reported position piece (and a split per group), not a
    # per-chunk loop
    groups = 4096 // C // (PAIRS // HV)
    reported = 4096 // gdn_torch.CHUNK_SIZE
    assert _count([4096], chunk_states=True) - _count([4096]) <= 2 * (reported + groups) + 10


def test_compute_chunk_is_shorter_on_cpu_only():
    """On CPU the maths runs at 32-token chunks (fewer FLOPs, the reported states still every
    chunk_size tokens); on other devices, where each op is a launch, at chunk_size itself with the
    larger groups; a chunk_size the CPU chunk does not divide is used as it is."""
    assert gdn_torch._compute_chunk(64, torch.device("cpu")) == (32, gdn_torch._CPU_BLOCK_HEAD_CHUNKS)
    assert gdn_torch._compute_chunk(64, torch.device("meta")) == (64, gdn_torch._BLOCK_HEAD_CHUNKS)
    assert gdn_torch._compute_chunk(16, torch.device("cpu")) == (16, gdn_torch._BLOCK_HEAD_CHUNKS)
    assert gdn_torch._CPU_BLOCK_HEAD_CHUNKS < gdn_torch._BLOCK_HEAD_CHUNKS
