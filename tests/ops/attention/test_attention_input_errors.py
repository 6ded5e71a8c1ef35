"""Every input check of packed attention (and of its case builders) says
``"<op>: <argument>=<value>: expected <what>"`` (``ops.errors.bad_input``), the same on the torch
path and with the NPU op emulated; the table reaches every check call in ``ops/attention/``."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention import api, cases, inputs
from sglang_ascend_hybrid.ops.attention.cases import packed_case, random_lengths
from tests.support.input_errors import assert_form, check_sites, raising_site

MODULES = (inputs, api, cases)
OP = inputs.OP
C = packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2)  # q [5, 4, 16], k / v [6, 2, 16]
I32 = torch.int32


def _attend(**change):
    args = dict(q=C.q, k=C.k, v=C.v, cu_seqlens_q=C.cu_seqlens_q, cu_seqlens_k=C.cu_seqlens_k)
    args.update(change)
    return lambda: api.fused_infer_attention_varlen(**args)


def _debug_checks(call):
    def run():
        with mock.patch.dict("os.environ", {"SGLANG_ASCEND_HYBRID_DEBUG_CHECKS": "1"}):
            call()
    return run


HOST_SYNC = ("cpu: host data (a list, tuple or CPU tensor of ints); reading a device tensor would be a device-to-host "
             "sync")
CASES = {  # id: (op, argument, call, the message after "<op>: ")
    "host on a device": (OP, "cu_seqlens_q_host.device",
                         _attend(cu_seqlens_q_host=torch.tensor([0, 3, 5], device="meta")),
                         f"cu_seqlens_q_host.device=meta: expected {HOST_SYNC}"),
    "host float tensor": (OP, "cu_seqlens_q_host", _attend(cu_seqlens_q_host=torch.tensor([0.0, 3.0, 5.0])),
                          "cu_seqlens_q_host=shape (3,) float32: expected a 1D integer tensor (or a list / tuple of "
                          "ints)"),
    "host a string": (OP, "cu_seqlens_q_host", _attend(cu_seqlens_q_host="0,3,5"),
                      "cu_seqlens_q_host='0,3,5': expected a list, tuple or CPU tensor of ints"),
    "host not ints": (OP, "cu_seqlens_q_host", _attend(cu_seqlens_q_host=[0, 3.0, 5]),
                      "cu_seqlens_q_host=[0, 3.0, 5]: expected integers only"),
    "cu missing": (OP, "cu_seqlens_q", _attend(cu_seqlens_q=None),
                   "cu_seqlens_q=None: expected a 1D int32 or int64 tensor"),
    "cu 2d": (OP, "cu_seqlens_q", _attend(cu_seqlens_q=C.cu_seqlens_q[None]),
              "cu_seqlens_q=shape (1, 3) int32: expected a 1D int32 or int64 tensor"),
    "cu float": (OP, "cu_seqlens_k.dtype", _attend(cu_seqlens_k=C.cu_seqlens_k.float()),
                 "cu_seqlens_k.dtype=torch.float32: expected torch.int32 or torch.int64"),
    "host length": (OP, "cu_seqlens_q_host", _attend(cu_seqlens_q_host=(0, 5)),
                    "cu_seqlens_q_host=[0, 5]: expected 3 entries, as many as cu_seqlens_q has"),
    "host disagrees": (OP, "cu_seqlens_q_host", _debug_checks(_attend(cu_seqlens_q_host=(0, 1, 5))),
                       "cu_seqlens_q_host=[0, 1, 5]: expected the values of cu_seqlens_q, [0, 3, 5] "
                       "(SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1 compares them; without it the host copy is trusted)"),
    "start": (OP, "cu_seqlens_q", _attend(cu_seqlens_q=torch.tensor([1, 3, 5], dtype=I32)),
              "cu_seqlens_q=[1, 3, 5]: expected offsets starting at 0, at least one sequence"),
    "no sequence": (OP, "cu_seqlens_q", _attend(q=C.q[:0], k=C.k[:0], v=C.v[:0],
                                                cu_seqlens_q=torch.tensor([0], dtype=I32),
                                                cu_seqlens_k=torch.tensor([0], dtype=I32)),
                    "cu_seqlens_q=[0]: expected offsets starting at 0, at least one sequence"),
    "end": (OP, "cu_seqlens_k_host", _attend(cu_seqlens_k_host=(0, 2, 7)),
            "cu_seqlens_k_host=[0, 2, 7]: expected offsets ending at the packed token count 6"),
    "decreasing": (OP, "cu_seqlens_q", _attend(cu_seqlens_q=torch.tensor([0, 4, 3, 5], dtype=I32),
                                               cu_seqlens_k=torch.tensor([0, 2, 4, 6], dtype=I32)),
                   "cu_seqlens_q=[0, 4, 3, 5]: expected non-decreasing offsets"),
    "not a tensor": (OP, "k", _attend(k=None), "k=None: expected a torch.Tensor"),
    "rank": (OP, "q", _attend(q=C.q[None]), "q=shape (1, 5, 4, 16) float32: expected a 3D tensor in [T, N, D] layout"),
    "q device": (OP, "q.device", _attend(q=C.q.to("meta")), "q.device=meta: expected an NPU (or the CPU)"),
    "k device": (OP, "k.device", _attend(k=C.k.to("meta")), "k.device=meta: expected q's device (cpu)"),
    "integer": (OP, "q.dtype", _attend(q=C.q.to(I32), k=C.k.to(I32), v=C.v.to(I32)),
                "q.dtype=torch.int32: expected a floating-point dtype"),
    "mixed dtypes": (OP, "k.dtype", _attend(k=C.k.double()),
                     "k.dtype=torch.float64: expected q's dtype (torch.float32)"),
    "kv tokens": (OP, "v", _attend(v=C.v[:-1]),
                  "v=shape (5, 2, 16) float32: expected k's token and head counts [T, N] = [6, 2]"),
    "kv heads": (OP, "v", _attend(v=C.v[:, :1]),
                 "v=shape (6, 1, 16) float32: expected k's token and head counts [T, N] = [6, 2]"),
    "qk head dim": (OP, "k", _attend(k=C.k[..., :8]), "k=shape (6, 2, 8) float32: expected q's head dimension D = 16"),
    "no heads": (OP, "q", _attend(q=C.q[:, :0]),
                 "q=shape (5, 0, 16) float32: expected at least one head and a head dimension >= 1"),
    "gqa": (OP, "q", _attend(q=C.q[:, :3]),
            "q=shape (5, 3, 16) float32: expected a head count that is a multiple of the key/value head count (2)"),
    "batch": (OP, "cu_seqlens_k", _attend(cu_seqlens_k=torch.tensor([0, 2, 4, 6], dtype=I32)),
              "cu_seqlens_k=[0, 2, 4, 6]: expected 2 sequences, the batch cu_seqlens_q describes"),
    "scale": (OP, "softmax_scale", lambda: api.fused_infer_attention_varlen(*C.args(), softmax_scale=math.nan),
              "softmax_scale=nan: expected a finite number or None"),
    "case batch": ("packed_case", "k_lens", lambda: packed_case([1], [1, 2]),
                   "k_lens=[1, 2]: expected 1 lengths, one per sequence of q_lens (the same batch size)"),
    "case negative": ("packed_case", "k_lens", lambda: packed_case([2, 1], [3, -1]),
                      "k_lens=[3, -1]: expected sequence lengths >= 0"),
    "random lengths": ("random_lengths", "max_len", lambda: random_lengths(3, max_len=0),
                       "max_len=0: expected an integer >= 1"),
}


@pytest.mark.parametrize("emulated", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_every_attention_input_error_names_the_argument_the_value_and_the_expectation(case, emulated):
    op, name, call, text = CASES[case]
    with seam.install_emulators(emu.emulators() if emulated else {}), pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == f"{op}: {text}"
    assert_form(info.value, op, name)


def test_the_table_reaches_every_attention_input_check():
    reached = set()
    for _, _, call, _ in CASES.values():
        with pytest.raises(ValueError) as info:
            call()
        reached.add(raising_site(info.value, *MODULES))
    assert check_sites(*MODULES) - reached == set()
