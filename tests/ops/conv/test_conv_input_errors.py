"""Every input check of the short-conv ops says ``"<op>: <argument>=<value>: expected <what>"``
(``ops.errors.bad_input``), with the public function called as the op; the table reaches every
check call in ``ops/conv/`` (``inputs.py``, ``api.py``, ``torch_impl.py``)."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.ops.conv import api, inputs, torch_impl
from tests.support.input_errors import assert_form, check_sites, raising_site

MODULES = (inputs, api, torch_impl)
D = 4


def _fn(**change):
    args = dict(x=torch.randn(D, 5), weight=torch.randn(D, 3), bias=None,
                query_start_loc=torch.tensor([0, 2, 5]), cache_indices=torch.tensor([0, 1]),
                has_initial_state=None, conv_states=torch.zeros(3, D, 2), activation=None)
    args.update(change)
    return lambda: api.causal_conv1d_fn(**args)


def _fn_torch(**change):
    args = dict(x=torch.randn(D, 5), weight=torch.randn(D, 3), query_start_loc=torch.tensor([0, 2, 5]),
                conv_states=torch.zeros(3, D, 2))
    args.update(change)
    return lambda: torch_impl.causal_conv1d_fn_torch(**args)


def _update(**change):
    args = dict(x=torch.randn(2, D), conv_state=torch.zeros(3, D, 2), weight=torch.randn(D, 3),
                conv_state_indices=torch.tensor([0, 2]))
    args.update(change)
    return lambda: api.causal_conv1d_update(**args)


def _verify(**change):  # batch 2, 3 draft tokens, width 3: windows of (3 - 1) + (3 - 1) = 4 rows
    args = dict(x=torch.randn(6, D), conv_window=torch.zeros(3, 4, D), weight=torch.randn(D, 3),
                cache_indices=torch.tensor([0, 2]), draft_token_num=3)
    args.update(change)
    return lambda: api.causal_conv1d_verify(**args)


FN, UPDATE, VERIFY, FN_TORCH = inputs.FN, inputs.UPDATE, inputs.VERIFY, "causal_conv1d_fn_torch"
CASES = {  # id: (op, argument, call)
    "fn block_table": (FN, "block_table", _fn(block_table=torch.zeros(1))),
    "fn unknown kwarg": (FN, "**kwargs", _fn(cu_seqlens=1)),
    "fn x without offsets": (FN, "x", _fn(x=torch.randn(D), query_start_loc=None)),
    "fn x": (FN, "x", _fn(x=torch.randn(1, D, 5))),
    "fn x dtype": (FN, "x.dtype", _fn(x=torch.ones(D, 5, dtype=torch.int32))),
    "fn weight": (FN, "weight", _fn(weight=torch.randn(D + 1, 3))),
    "fn weight width": (FN, "weight", _fn(weight=torch.randn(D, 1))),
    "fn weight dtype": (FN, "weight.dtype", _fn(weight=torch.ones(D, 3, dtype=torch.int32))),
    "fn bias": (FN, "bias", _fn(bias=torch.randn(D + 1))),
    "fn query_start_loc": (FN, "query_start_loc", _fn(query_start_loc=torch.tensor([[0, 5]]))),
    "fn query_start_loc dtype": (FN, "query_start_loc.dtype", _fn(query_start_loc=torch.tensor([0.0, 5.0]))),
    "fn cache_indices": (FN, "cache_indices", _fn(cache_indices=torch.tensor([0, 1, 2]))),
    "fn cache_indices dtype": (FN, "cache_indices.dtype", _fn(cache_indices=torch.tensor([True, False]))),
    "fn has_initial_state dtype": (FN, "has_initial_state.dtype", _fn(has_initial_state=torch.tensor([1.0, 0.0]))),
    "fn conv_states": (FN, "conv_states", _fn(conv_states=torch.zeros(3, D, 1))),
    "fn conv_states dtype": (FN, "conv_states.dtype", _fn(conv_states=torch.zeros(3, D, 2, dtype=torch.int32))),
    "fn initial states without states": (FN, "conv_states", _fn(conv_states=None,
                                                                has_initial_state=torch.tensor([True, True]))),
    "fn too few slots": (FN, "conv_states", _fn(cache_indices=None, conv_states=torch.zeros(1, D, 2))),
    "fn activation": (FN, "activation", _fn(activation="gelu")),
    "fn offsets": (FN, "query_start_loc", _fn(query_start_loc=torch.tensor([0, 3, 2]))),
    "fn slot range": (FN, "cache_indices", _fn(cache_indices=torch.tensor([0, 3]))),
    "fn slot twice": (FN, "cache_indices", _fn(cache_indices=torch.tensor([1, 1]))),
    "fn_torch too few slots": (FN_TORCH, "conv_states", _fn_torch(conv_states=torch.zeros(1, D, 2))),
    "update x": (UPDATE, "x", _update(x=torch.randn(D))),
    "update x dtype": (UPDATE, "x.dtype", _update(x=torch.ones(2, D, dtype=torch.int64))),
    "update conv_state missing": (UPDATE, "conv_state", _update(conv_state=None)),
    "update cache_seqlens": (UPDATE, "cache_seqlens", _update(cache_seqlens=torch.tensor([1, 1]))),
    "update too few slots": (UPDATE, "conv_state", _update(conv_state_indices=None, conv_state=torch.zeros(1, D, 2))),
    "update slot range": (UPDATE, "conv_state_indices", _update(conv_state_indices=torch.tensor([0, -2]))),
    "verify draft_token_num": (VERIFY, "draft_token_num", _verify(draft_token_num=True)),
    "verify x": (VERIFY, "x", _verify(x=torch.randn(6))),
    "verify x dtype": (VERIFY, "x.dtype", _verify(x=torch.ones(6, D, dtype=torch.int32))),
    "verify cache_indices missing": (VERIFY, "cache_indices", _verify(cache_indices=None)),
    "verify cache_indices": (VERIFY, "cache_indices", _verify(cache_indices=[0, 2])),
    "verify tokens": (VERIFY, "x", _verify(x=torch.randn(5, D))),
    "verify conv_window": (VERIFY, "conv_window", _verify(conv_window=torch.zeros(3, 2, D))),
    "verify conv_window dtype": (VERIFY, "conv_window.dtype",
                                 _verify(conv_window=torch.zeros(3, 4, D, dtype=torch.int32))),
    "verify slot twice": (VERIFY, "cache_indices", _verify(cache_indices=torch.tensor([2, 2]))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_conv_input_error_names_the_argument_the_value_and_the_expectation(case):
    op, name, call = CASES[case]
    with pytest.raises(ValueError) as info:
        call()
    value, what = assert_form(info.value, op, name)
    assert value.strip() and what.strip()


def test_the_table_reaches_every_conv_input_check():
    reached = set()
    for _, _, call in CASES.values():
        with pytest.raises(ValueError) as info:
            call()
        reached.add(raising_site(info.value, *MODULES))
    assert check_sites(*MODULES) - reached == set()
