"""The serving GDN decode path's inputs: without ``query_start_loc`` the Triton rung hands the
kernel one offset per request (not ``cu_seqlens=None``, which it reads as one sequence of the whole
batch); shapes and dtypes are checked on every call, slots and offsets only with
``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1`` (or ``check_values=True``), each error naming the argument."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops.gdn import decode
from tests.ops.gdn.decode.test_gdn_decode_ladder import SLOTS, _call, _device, _inputs, _oracle
from tests.support.sync_counter import SyncCounter


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv(ENV.DEBUG_CHECKS.name, raising=False)


# ---------------------------------------------------------------- query_start_loc=None


@pytest.mark.parametrize("entry", ["optimized", "generic"])
@pytest.mark.parametrize("rung", ["triton_decode", "torch"])
def test_without_query_start_loc_each_request_is_its_own_sequence(entry, rung):
    indices = [5, 2, 7, 0]
    x = _inputs(len(indices), pool_dtype=torch.float32, seed=3)
    before = x["pool"].clone()
    call = decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"], x["pool"],
                                  torch.tensor(indices, dtype=torch.int32), None, entry=entry)
    with _device("value_first", entry=entry):
        o = decode.run_decode(call, backend=rung)
    o_ref, new = _oracle(x, before, indices, [True] * len(indices))
    for i, slot in enumerate(indices):
        assert float((o[0, i].double() - o_ref[i]).abs().max()) <= 2e-2 * float(o_ref[i].abs().max()), i
        assert float((x["pool"][slot].double() - new[i]).abs().max()) <= 1e-5 * float(new[i].abs().max()), i
    others = [s for s in range(SLOTS) if s not in indices]
    assert torch.equal(x["pool"][others], before[others])


# ---------------------------------------------------------------- shapes and dtypes: every call


def _bad(x, what):
    """A call with one argument wrong, and the text its error must carry."""
    idx = torch.tensor([1, 3, 4], dtype=torch.int32)
    qsl = torch.arange(4, dtype=torch.int32)
    args = dict(q=x["q"], k=x["k"], v=x["v"], a=x["a"], b=x["b"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                pool=x["pool"], cache_indices=idx, query_start_loc=qsl)
    change, text = {
        "int pool": (dict(pool=x["pool"].to(torch.int32)),
                     r"pool \(ssm_states\)\.dtype=torch\.int32: expected a floating-point dtype"),
        "pool heads": (dict(pool=x["pool"][:, :3].contiguous()),
                       r"pool \(ssm_states\)=shape \(8, 3, 16, 16\) float32: expected \[slots, 4, 16, 16\]"),
        "3-d pool": (dict(pool=x["pool"][0]), r"pool \(ssm_states\)=shape \(4, 16, 16\)"),
        "cache_indices length": (dict(cache_indices=idx[:2]),
                                 r"cache_indices=shape \(2,\) int32: expected \[3\] \(one slot per request"),
        "cache_indices 2-d": (dict(cache_indices=idx.view(3, 1)), r"cache_indices=shape \(3, 1\)"),
        "cache_indices float": (dict(cache_indices=idx.float()),
                                r"cache_indices\.dtype=torch\.float32: expected an integer index dtype .*; indices are "
                                r"whole numbers$"),
        "query_start_loc length": (dict(query_start_loc=qsl[:3]),
                                   r"query_start_loc=shape \(3,\) int32: expected \[4\] \(B \+ 1 offsets"),
        "query_start_loc bool": (dict(query_start_loc=qsl.bool()),
                                 r"query_start_loc\.dtype=torch\.bool: expected an integer index dtype .*; a bool mask "
                                 r"is not an index$"),
        "q 3-d": (dict(q=x["q"][0]), r"q=shape \(3, 2, 16\) bfloat16: expected \[1, B, Hk, K\]"),
        "q batch 2": (dict(q=x["q"].expand(2, -1, -1, -1)), r"q=shape \(2, 3, 2, 16\)"),
        "k shape": (dict(k=x["k"][:, :2]), r"k=shape \(1, 2, 2, 16\) bfloat16: expected the shape of q"),
        "v batch": (dict(v=x["v"][:, :2]), r"v=shape \(1, 2, 4, 16\) bfloat16: expected \[1, 3, Hv, V\]"),
        "v 3-d": (dict(v=x["v"][0]), r"v=shape \(3, 4, 16\)"),
        "v heads": (dict(v=x["v"][:, :, :3], pool=x["pool"][:, :3]), r"v=.*a multiple of the 2 key heads"),
        "a entries": (dict(a=x["a"][:2]), r"a=shape \(2, 4\) bfloat16: expected 3 x 4 = 12 entries"),
        "b entries": (dict(b=x["b"][:, :2]), r"b=shape \(3, 2\)"),
        "A_log entries": (dict(A_log=x["A_log"][:3]), r"A_log=shape \(3,\) float32: expected 4 entries"),
        "dt_bias entries": (dict(dt_bias=x["dt_bias"][:3]), r"dt_bias=shape \(3,\)"),
        "int a": (dict(a=x["a"].to(torch.int32)), r"a\.dtype=torch\.int32: expected a floating-point dtype"),
        "int q": (dict(q=x["q"].to(torch.int32)), r"q\.dtype=torch\.int32"),
        "q not a tensor": (dict(q=None), r"q=None: expected a torch\.Tensor"),
        "cache_indices not a tensor": (dict(cache_indices=[0, 1, 2]),
                                       r"cache_indices=\[0, 1, 2\]: expected a torch\.Tensor"),
        "no key heads": (dict(q=x["q"][:, :, :0], k=x["k"][:, :, :0]), r"v=.*a multiple of the 0 key heads"),
    }[what]
    args.update(change)
    return decode.DecodeCall(**args), "GDN decode: " + text


SHAPE_CASES = ["int pool", "pool heads", "3-d pool", "cache_indices length", "cache_indices 2-d",
               "cache_indices float", "query_start_loc length", "query_start_loc bool", "q 3-d", "q batch 2",
               "k shape", "v batch", "v 3-d", "v heads", "a entries", "b entries", "A_log entries",
               "dt_bias entries", "int a", "int q", "q not a tensor", "cache_indices not a tensor", "no key heads"]


@pytest.mark.parametrize("what", SHAPE_CASES)
@pytest.mark.parametrize("rung", ["auto", "torch"])
def test_a_wrong_shape_or_dtype_names_the_argument(what, rung):
    x = _inputs(3)
    before = x["pool"].clone()
    call, text = _bad(x, what)
    with _device("value_first"), pytest.raises(ValueError, match=text):
        decode.run_decode(call, backend=rung)
    assert torch.equal(x["pool"], before)


def test_the_shape_checks_read_no_value():
    x = _inputs(3)
    with SyncCounter(device_of_interest="cpu") as syncs:
        decode.run_decode(_call(x, [1, 3, 4]), backend="torch")
    assert syncs.total == 0, syncs.counts


# ---------------------------------------------------------------- values: debug checks only


VALUE_CASES = [  # (slots, query_start_loc, the error's text)
    ([1, 3, 1], [0, 1, 2, 3], r"cache_indices=\[1, 3, 1\]: expected each live request's slot once.*repeated: \[1\]"),
    ([1, 9, 4], [0, 1, 2, 3], r"cache_indices=\[1, 9, 4\]: expected slots in \[0, 8\) or -1.*out of range: \[9\]"),
    ([1, -2, 4], [0, 1, 2, 3], r"cache_indices=\[1, -2, 4\]: expected slots in \[0, 8\) or -1"),
    ([1, 3, 4], [0, 1, 1, 2], r"query_start_loc=\[0, 1, 1, 2\]: expected offsets from 0 with lengths 0 or 1, "
                              r"request n's token in q row n"),
    ([1, 3, 4], [0, 2, 2, 3], r"query_start_loc=\[0, 2, 2, 3\]"),
    ([1, 3, 4], [1, 2, 3, 4], r"query_start_loc=\[1, 2, 3, 4\]"),
]


@pytest.mark.parametrize("slots,qsl,text", VALUE_CASES)
def test_debug_checks_reject_bad_slots_and_offsets_before_anything_is_written(slots, qsl, text, monkeypatch):
    monkeypatch.setenv(ENV.DEBUG_CHECKS.name, "1")
    x = _inputs(3)
    before = x["pool"].clone()
    with _device("value_first"), pytest.raises(ValueError, match="GDN decode: " + text):
        decode.run_decode(_call(x, slots, torch.tensor(qsl, dtype=torch.int32)))
    assert torch.equal(x["pool"], before)
    with pytest.raises(ValueError, match=text):  # the same without the variable, asked for explicitly
        decode.run_decode(_call(x, slots, torch.tensor(qsl, dtype=torch.int32)), check_values=True)


def test_duplicate_live_slots_pass_unchecked_without_debug_checks():
    """Without the variable no value is read (graph capture): a repeated slot is not detected."""
    x = _inputs(3)
    with SyncCounter(device_of_interest="cpu") as syncs:
        decode.run_decode(_call(x, [1, 3, 1]), backend="torch")
    assert syncs.total == 0, syncs.counts
    with pytest.raises(IndexError):  # an out-of-range slot: torch's own error, as before
        decode.run_decode(_call(x, [1, 9, 4]), backend="torch")


def test_debug_checks_accept_padding_sharing_slot_0(monkeypatch):
    """SGLang's graph replay pads with slot 0 and length 0, several times, also next to a live slot 0."""
    monkeypatch.setenv(ENV.DEBUG_CHECKS.name, "1")
    x = _inputs(5)
    before = x["pool"].clone()
    o = decode.run_decode(_call(x, [0, -1, -1, 0, 0], torch.tensor([0, 1, 2, 3, 3, 3], dtype=torch.int32)),
                                  backend="torch")
    o_ref, new = _oracle(x, before, [0, -1, -1, 0, 0], [True, True, True, False, False])
    assert float((x["pool"][0].double() - new[0]).abs().max()) <= 1e-5 * float(new[0].abs().max())
    assert torch.equal(o[0, 3:], torch.zeros_like(o[0, 3:]))


def test_debug_checks_without_query_start_loc_take_every_request_as_live(monkeypatch):
    monkeypatch.setenv(ENV.DEBUG_CHECKS.name, "1")
    x = _inputs(2)
    call = decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"], x["pool"],
                                  torch.tensor([2, 2], dtype=torch.int32), None)
    with pytest.raises(ValueError, match=r"cache_indices=\[2, 2\]: expected each live request's slot once"):
        decode.run_decode(call, backend="torch")
    decode.run_decode(call, backend="torch", check_values=False)  # explicitly off: not read
