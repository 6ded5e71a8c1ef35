"""The environment-variable registry: every variable is named SGLANG_ASCEND_HYBRID_*,
documented in docs/configuration.md, and parsed with clear errors."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from sglang_ascend_hybrid import envs

README = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()


@pytest.mark.parametrize("var", envs.all_vars(), ids=lambda v: v.name)
def test_every_variable_is_prefixed_and_documented(var):
    assert var.name.startswith("SGLANG_ASCEND_HYBRID_")
    assert f"`{var.name}`" in README


def test_package_reads_no_undeclared_plugin_variable():
    declared = {v.name for v in envs.all_vars()}
    pkg = Path(envs.__file__).parent
    used = set()
    for path in pkg.rglob("*.py"):
        used |= set(re.findall(r"SGLANG_ASCEND_HYBRID_[A-Z0-9_]+", path.read_text()))
    assert used <= declared, used - declared


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "lots")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD.*'lots'"):
        envs.ENV.GDN_MAX_OVERHEAD.get()
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DISABLE", "maybe")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_DISABLE"):
        envs.ENV.DISABLE.get()


def test_temporary_env_restores():
    os.environ.pop("SGLANG_ASCEND_HYBRID_GDN_BACKEND", None)
    with envs.temporary_env({"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "torch"}):
        assert envs.ENV.GDN_BACKEND.get() == "torch"
    assert "SGLANG_ASCEND_HYBRID_GDN_BACKEND" not in os.environ


# ---------------------------------------------------------------------------
# Validation: every variable, every class of bad value, one line naming it
# ---------------------------------------------------------------------------

BOOL_VARS = [v for v in envs.all_vars() if v.parse is envs._parse_bool]
CHOICE_VARS = [v for v in envs.all_vars() if v.choices]
INVALID = {var.name: ["maybe", "2", "-1", "nan", "inf", "yes please"] for var in BOOL_VARS}
INVALID.update({var.name: ["bogus", "AUTO", "-1", "nan", "inf", "torch,mega"] for var in CHOICE_VARS})
INVALID["SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS"] = ["records.jsonl", "./records.jsonl", "~/records"]
INVALID["SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD"] = ["nan", "NaN", "-inf", "0.99", "0", "-1", "lots", "1.5x", "true",
                                                   "1_0", "\u0663", "0x10", "1e", "."]


def test_every_variable_has_invalid_cases():
    assert set(INVALID) == {v.name for v in envs.all_vars()}


@pytest.mark.parametrize("name,raw", [(n, r) for n, raws in INVALID.items() for r in raws])
def test_invalid_values_are_rejected_naming_variable_value_and_expectation(monkeypatch, name, raw):
    var = next(v for v in envs.all_vars() if v.name == name)
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError) as info:
        var.get()
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"environment variable {name}={raw!r}: expected ")
    assert var.problem() == text
    assert text in envs.problems()
    assert envs.effective_settings()[name] == f"INVALID: {text}"


def test_messages_say_what_is_accepted(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "nan")
    assert "expected a number >= 1 (or inf for no limit)" in envs.ENV.GDN_MAX_OVERHEAD.problem()
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "bogus")
    assert envs.ENV.GDN_BACKEND.problem().endswith(
        "expected one of auto, npu_chunk, mega, triton, torch, triton_decode, npu_recurrent")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "mega")
    assert envs.ENV.CONV_BACKEND.problem().endswith("expected one of auto, npu_v2, npu_aclnn, npu_update_v2, torch")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DISABLE", "maybe")
    assert "expected a boolean (1/true/yes/on or 0/false/no/off)" in envs.ENV.DISABLE.problem()


@pytest.mark.parametrize("raw,value", [("1", 1.0), ("1.5", 1.5), (" 2 ", 2.0), ("inf", math.inf),
                                       ("Infinity", math.inf), ("+INF", math.inf), ("1e300", 1e300),
                                       ("1e999", math.inf), ("2.", 2.0), ("+3E0", 3.0)])
def test_max_overhead_accepts_numbers_from_one_and_inf(monkeypatch, raw, value):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", raw)
    assert envs.ENV.GDN_MAX_OVERHEAD.get() == value
    assert envs.problems() == []


@pytest.mark.parametrize("var", envs.all_vars(), ids=lambda v: v.name)
@pytest.mark.parametrize("raw", ["", "   "])
def test_empty_value_means_default(monkeypatch, var, raw):
    monkeypatch.setenv(var.name, raw)
    assert var.get() == var.default and var.problem() is None and not var.is_set()
    assert envs.effective_settings()[var.name].endswith("(default)")


@pytest.mark.parametrize("raw,value", [("1", True), ("TRUE", True), (" on ", True), ("yes", True),
                                       ("0", False), ("False", False), ("off", False), ("no", False)])
@pytest.mark.parametrize("var", BOOL_VARS, ids=lambda v: v.name)
def test_booleans(monkeypatch, var, raw, value):
    monkeypatch.setenv(var.name, raw)
    assert var.get() is value


def test_choice_values_are_stripped_and_valid_rungs_accepted(monkeypatch):
    for rung in envs.GDN_RUNGS:
        monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", f" {rung} ")
        assert envs.ENV.GDN_BACKEND.get() == rung
    for rung in envs.CONV_RUNGS:
        monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", rung)
        assert envs.ENV.CONV_BACKEND.get() == rung


def test_rung_names_equal_the_ladders_names():
    """envs lists the rung names (so validating needs no op import): they must be the ladders'."""
    from sglang_ascend_hybrid.ops.conv import dispatch as causal_conv1d
    from sglang_ascend_hybrid.ops.gdn import decode, prefill

    assert envs.GDN_PREFILL_RUNGS == prefill.PREFILL.names
    assert envs.GDN_DECODE_RUNGS == decode.DECODE.names
    assert envs.CONV_RUNGS == causal_conv1d.UPDATE_LADDER.names
    assert set(causal_conv1d.FN_LADDER.names) <= set(envs.CONV_RUNGS)
    assert set(envs.ENV.GDN_BACKEND.choices) == {"auto", *prefill.PREFILL.names, *decode.DECODE.names}
    assert set(envs.ENV.CONV_BACKEND.choices) == {"auto", *causal_conv1d.FN_LADDER.names,
                                                  *causal_conv1d.UPDATE_LADDER.names}


def test_problems_lists_every_invalid_variable(monkeypatch):
    for var in envs.all_vars():
        monkeypatch.delenv(var.name, raising=False)
    assert envs.problems() == []
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", "2")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "inf")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "cuda")
    found = envs.problems()
    assert len(found) == 2
    assert any("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS='2'" in p for p in found)
    assert any("SGLANG_ASCEND_HYBRID_CONV_BACKEND='cuda'" in p for p in found)


# ---------------------------------------------------------------------------
# Forced rungs through the environment: one wording on every ladder
# ---------------------------------------------------------------------------

def test_forced_unavailable_rung_says_so_in_the_same_words(monkeypatch):
    """A valid rung name forced by its variable, on CPU tensors where that kernel cannot run."""
    import torch

    from sglang_ascend_hybrid.ops.conv import api as causal_conv1d
    from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule
    from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable

    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "mega")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "npu_v2")
    T, Hk, Hv, K = 4, 1, 2, 8
    q, k, v = torch.randn(1, T, Hk, K), torch.randn(1, T, Hk, K), torch.randn(1, T, Hv, K)
    with pytest.raises(ForcedRungUnavailable) as gdn:
        chunk_gated_delta_rule(q, k, v, -torch.rand(1, T, Hv), torch.rand(1, T, Hv),
                               cu_seqlens=torch.tensor([0, T]))
    pool = torch.zeros(2, 2, 16).half().transpose(1, 2)  # window-major [slots, w - 1, dim] seen as [slots, dim, w - 1]
    with pytest.raises(ForcedRungUnavailable) as conv:
        causal_conv1d.causal_conv1d_update(torch.randn(1, 16).half(), pool, torch.randn(16, 3).half(),
                                           conv_state_indices=torch.tensor([1]))
    pattern = (r"^(?P<op>\w+): the forced kernel '(?P<rung>\w+)' is unavailable for .+; "
               r"use 'auto' to let the ladder \(.+\) choose$")
    gdn_match, conv_match = re.match(pattern, str(gdn.value)), re.match(pattern, str(conv.value))
    assert gdn_match and gdn_match["op"] == "gdn_prefill" and gdn_match["rung"] == "mega", str(gdn.value)
    assert conv_match and conv_match["op"] == "causal_conv1d_update" and conv_match["rung"] == "npu_v2", \
        str(conv.value)


def test_fuzzed_values_parse_or_fail_naming_the_variable(monkeypatch):
    """Any text: the variable parses to a value of its default's type, or a one-line ValueError
    naming it; nothing else escapes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
    outcomes = {"ok": 0, "error": 0}

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(var=st.sampled_from(envs.all_vars()),
           raw=st.one_of(text, st.sampled_from(["inf", "-inf", "nan", "1e999", "1_0", "0x10", "+1", "٣",
                                                        "1", "off", "auto", "torch", "2.5"])))
    def check(var, raw):
        monkeypatch.setenv(var.name, raw)
        try:
            value = var.get()
        except ValueError as exc:
            outcomes["error"] += 1
            assert str(exc).startswith(f"environment variable {var.name}={raw!r}: expected ")
            assert "\n" not in str(exc)
            return
        outcomes["ok"] += 1
        assert type(value) is type(var.default)
        if var.choices:
            assert value in var.choices
        if var is envs.ENV.GDN_MAX_OVERHEAD:
            assert value >= 1.0 and not math.isnan(value)

    check()
    assert outcomes["ok"] >= 5 and outcomes["error"] >= 100, outcomes


def test_emulated_device_breakage_names_equal_its_table():
    from sglang_ascend_hybrid.testing.emulated_npu import breakages

    assert set(envs.EMULATED_NPU_BREAKAGES) == {"none"} | set(breakages.BREAKAGES)


@pytest.mark.parametrize("var", envs.all_vars(), ids=lambda v: v.name)
def test_an_unset_variable_is_not_set_and_a_value_is(monkeypatch, var):
    monkeypatch.delenv(var.name, raising=False)
    assert not var.is_set()
    monkeypatch.setenv(var.name, " 1 ")
    assert var.is_set()


def test_a_variable_is_read_through_the_public_lookup_where_os_environ_keeps_no_dict(monkeypatch):
    """``envs.read_environ`` takes CPython's ``os.environ._data`` fast path; elsewhere ``os.environ.get``."""
    import types

    import sglang_ascend_hybrid.envs as envs_module

    plain = types.SimpleNamespace(environ={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "torch"}, path=os.path)
    monkeypatch.setattr(envs_module, "os", plain)
    assert envs_module.ENV.GDN_BACKEND.get() == "torch"
    plain.environ.clear()
    assert envs_module.ENV.GDN_BACKEND.get() == "auto"
