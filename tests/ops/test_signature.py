"""The one signature type every kernel ladder keys on (``ops/signature.py``) and its three families:
hashable and equal field by field, never equal across families, and every field shows in the text
that the ladders' lines and errors print."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sglang_ascend_hybrid.ops.attention.signature import AttentionSignature
from sglang_ascend_hybrid.ops.conv.signature import ConvSignature
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.signature import Signature, dtype_name

# family -> (a signature, another value for each of its fields)
SAMPLES = {
    "gdn": (GdnSignature(4, 2, 128, 128, torch.bfloat16, chunk_states=False, state_dtype=None),
            dict(value_heads=8, key_heads=4, head_dim_k=64, head_dim_v=256, dtype=torch.float16,
                 chunk_states=True, state_dtype=torch.float32)),
    "conv": (ConvSignature("update", 3, 64, "float16", "float16", "float16", "window-major", 2),
             dict(kind="verify", width=4, dim=32, x_dtype="bfloat16", weight_dtype="bfloat16", state_dtype="bfloat16",
                  layout="window-major-strided", state_len=5)),
    "attention": (AttentionSignature(4, 2, 128, 128, 128, "bfloat16", "cpu"),
                  dict(query_heads=8, key_value_heads=4, head_dim_q=64, head_dim_k=64, head_dim_v=256,
                       dtype="float16", device="npu")),
}


def test_every_family_signature_is_a_signature_with_a_sample_for_each_field():
    for sig, others in SAMPLES.values():
        assert isinstance(sig, Signature)
        assert set(others) == {f.name for f in dataclasses.fields(sig)}


@pytest.mark.parametrize("family,field", [(family, field) for family, (_, others) in SAMPLES.items()
                                          for field in others])
def test_each_field_tells_signatures_apart_and_shows_in_the_text(family, field):
    sig, others = SAMPLES[family]
    changed = dataclasses.replace(sig, **{field: others[field]})
    assert changed != sig
    assert str(changed) != str(sig), f"{family}: the text does not show {field}"


def test_equal_fields_are_one_key_and_families_never_meet():
    for sig, _ in SAMPLES.values():
        again = dataclasses.replace(sig)
        assert again == sig and hash(again) == hash(sig) and {sig: 1}[again] == 1
    conv, attention = SAMPLES["conv"][0], SAMPLES["attention"][0]
    assert conv != attention and len({conv, attention, SAMPLES["gdn"][0]}) == 3


def test_a_signature_cannot_change():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES["conv"][0].width = 4


def test_the_base_text_is_the_field_values_in_order():
    assert str(SAMPLES["conv"][0]) == "('update', 3, 64, 'float16', 'float16', 'float16', 'window-major', 2)"
    assert str(SAMPLES["attention"][0]) == "(4, 2, 128, 128, 128, 'bfloat16', 'cpu')"
    assert str(SAMPLES["gdn"][0]) == "(NumValueHeads, NumKeyHeads)=(4, 2) K=128 V=128 bfloat16"


def test_dtype_name_is_the_bare_name():
    assert dtype_name(torch.bfloat16) == "bfloat16"
    assert dtype_name(torch.float32) == "float32"
