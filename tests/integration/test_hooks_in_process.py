"""In-process checks of backend-module behaviour that otherwise only subprocess resolutions or an NPU
reach: the ascend_hybrid factory, the window-major conv views, the GDN probe at backend construction,
the GDN state-dtype plan and report, the launch-default helpers and the entry-point registry (CPU,
stand-ins for SGLang records / runners; SGLang's own resolving-view accessors where they apply)."""

from __future__ import annotations

import dataclasses
import types
from typing import Optional

import msgspec
import pytest
import torch

from sglang_ascend_hybrid.integration import conv_state_layout, gdn_hooks, gdn_state_dtype, registry
from sglang_ascend_hybrid.integration.launch import decision, extra_buffer, resolution
from sglang_ascend_hybrid.model_families import GDN_ARCHS, SHORT_CONV_ARCHS
from sglang_ascend_hybrid.patches import mode
from tests.support.fresh_state import fresh_patch_state

NS = types.SimpleNamespace
GDN_ARCH = sorted(GDN_ARCHS)[0]
SHORT_CONV_ARCH = sorted(SHORT_CONV_ARCHS)[0]


# ------------------------------------------------------------------ ascend_hybrid factory


def test_ascend_hybrid_factory_passes_the_model_runner_to_sglangs_ascend_factory(monkeypatch):
    import sglang.srt.utils as sgl_utils
    from sglang.srt.layers.attention import attention_registry

    from sglang_ascend_hybrid.integration import ascend_hybrid
    from sglang_ascend_hybrid.patches import apply

    seen = []
    monkeypatch.setattr(sgl_utils, "is_npu", lambda: True)
    monkeypatch.setattr(apply, "enforce_strict", lambda: None)
    monkeypatch.setitem(attention_registry.ATTENTION_BACKENDS, "ascend", lambda r: seen.append(r) or ("ascend", r))
    runner = NS(name="the model runner")
    fresh_patch_state(monkeypatch)  # the request the factory records is gone after the test
    built = ascend_hybrid.create_ascend_hybrid_backend(runner)
    assert mode.hybrid_requested()
    assert built == ("ascend", runner)
    assert seen == [runner] and seen[0] is runner


# ------------------------------------------------------------------ conv_state_layout


@dataclasses.dataclass(frozen=True)
class _State:  # the shape of MambaPool.State: frozen, a list of conv states next to other fields
    conv: list
    temporal: torch.Tensor


def _window_major_state(slots=3, window=4, channels=5):
    convs = [torch.arange(slots * window * channels, dtype=torch.float32).reshape(slots, window, channels) + 1000 * i
             for i in range(2)]
    return _State(conv=convs, temporal=torch.zeros(slots, 2))


def test_layer_cache_cuda_view_treats_every_conv_state_as_window_major_by_default():
    state = _window_major_state()
    out = conv_state_layout.layer_cache_cuda_view(state)
    assert out.temporal is state.temporal
    assert len(out.conv) == 2
    for pool, view in zip(state.conv, out.conv):
        assert view.shape == (3, 5, 4)  # [slots, channels, window]: the CUDA layout
        assert conv_state_layout.shares_storage(view, pool)
        torch.testing.assert_close(view, pool.transpose(-1, -2))
        view[1, 2, 3] = -7.0  # writes through the view land in the window-major pool
        assert pool[1, 3, 2].item() == -7.0


def test_layer_cache_cuda_view_leaves_entries_marked_false_unchanged():
    state = _window_major_state()
    out = conv_state_layout.layer_cache_cuda_view(state, window_major=[True, False])
    assert out.conv[0].shape == (3, 5, 4)
    assert out.conv[1] is state.conv[1]


# ------------------------------------------------------------------ probe_gdn_backend


class AscendGDNAttnBackend:  # stand-in carrying the upstream class name (the probe goes by name)
    pass


class _TunedAscendGDN(AscendGDNAttnBackend):
    pass


class _OtherLinearBackend:
    pass


def _gdn_runner(Hv=2, V=32, K=16, pool_dtype=torch.float32, model_dtype=torch.bfloat16):
    temporal = torch.zeros(3, 4, Hv, V, K, dtype=pool_dtype)  # [layers, slots, Hv, V, K]
    pool = NS(mamba_pool=NS(mamba_cache=NS(temporal=temporal)))
    return NS(req_to_token_pool=pool, dtype=model_dtype)


@pytest.fixture
def probe_calls(monkeypatch):
    from sglang_ascend_hybrid.ops.gdn import decode
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    calls = []
    monkeypatch.setattr(decode_contract, "installed_decode_entry", lambda: "the-installed-entry")
    monkeypatch.setattr(decode, "probe_before_serving", lambda *a, **kw: calls.append((a, kw)))
    return calls


@pytest.mark.parametrize("cls", [AscendGDNAttnBackend, _TunedAscendGDN], ids=["ascend-gdn", "subclass"])
def test_probe_asks_for_the_installed_decode_entry_with_model_and_pool_signature(probe_calls, cls):
    runner = _gdn_runner(V=32, K=16, pool_dtype=torch.float32, model_dtype=torch.bfloat16)
    gdn_hooks.probe_gdn_backend(runner, NS(linear_attn_backend=cls()))
    assert len(probe_calls) == 1
    args, kwargs = probe_calls[0]
    bound = dict(zip(("entry", "q_dtype", "pool_dtype", "head_dim_k", "head_dim_v", "device"), args), **kwargs)
    assert bound == {"entry": "the-installed-entry", "q_dtype": torch.bfloat16, "pool_dtype": torch.float32,
                     "head_dim_k": 16, "head_dim_v": 32, "device": torch.device("cpu")}


@pytest.mark.parametrize("config,key_heads", [(NS(linear_num_value_heads=48, linear_num_key_heads=16), 2),
                                               (NS(), None)], ids=["qwen3.6-27b-tp8", "no-gdn-fields"])
def test_triton_entry_stride_probe_runs_at_construction_with_per_rank_heads(probe_calls, monkeypatch, config,
                                                                             key_heads):
    """6 value heads per rank (48 / TP=8) and the config's 3:1 ratio: the stride probe is asked for
    (6, 2) before serving; a config without the GDN head fields asks for none."""
    from sglang_ascend_hybrid.ops.gdn import prefill

    asked = []
    monkeypatch.setattr(prefill, "probe_triton_entry_before_serving", lambda *a: asked.append(a))
    runner = _gdn_runner(Hv=6, V=128, K=128)
    runner.model_config = NS(hf_text_config=config)
    gdn_hooks.probe_gdn_backend(runner, NS(linear_attn_backend=AscendGDNAttnBackend()))
    want = [] if key_heads is None else [(6, key_heads, 128, 128, torch.bfloat16, torch.device("cpu"))]
    assert asked == want


@pytest.mark.parametrize("backend", [NS(linear_attn_backend=_OtherLinearBackend()), NS(), object()],
                         ids=["other-linear-backend", "no-linear-backend", "plain-backend"])
def test_probe_skips_backends_that_serve_no_ascend_gdn_layers(probe_calls, backend):
    gdn_hooks.probe_gdn_backend(_gdn_runner(), backend)
    assert probe_calls == []


# ------------------------------------------------------------------ gdn_state_dtype


def test_bf16_plan_runs_the_fused_npu_ops():
    plan = gdn_state_dtype.plan_state("bfloat16", "--mamba-ssm-dtype")
    assert (plan.dtype, plan.source) == ("bfloat16", "--mamba-ssm-dtype")
    assert plan.prefill.startswith("torch.ops.npu.chunk_gated_delta_rule ")
    assert "mega kernel" in plan.prefill  # later rungs
    assert plan.verify == "torch.ops.npu.recurrent_gated_delta_rule"


def test_fp16_plan_names_the_mega_kernel_with_fp16_states_first():
    plan = gdn_state_dtype.plan_state("float16", "the model config's mamba_ssm_dtype")
    assert plan.prefill == "sgl-kernel-npu's mega kernel (fp16 states), then Triton, torch"
    assert "torch verify path" in plan.verify and "bf16-only" in plan.verify


def test_fp32_plan_runs_triton_prefill_and_torch_verify_on_a2_a3():
    plan = gdn_state_dtype.plan_state("float32", "SGLang default")
    assert plan.prefill.startswith("sgl-kernel-npu's Triton chunk kernel, torch if absent")
    assert "mega" not in plan.prefill.split("(")[0]
    assert "torch verify path, fp32 compute and storage" in plan.verify
    plan950 = gdn_state_dtype.plan_state("float32", "SGLang default", chip="950")
    assert plan950.prefill == "torch.ops.npu.chunk_gated_delta_rule with fp32 states (Ascend 950)"


def test_plans_differ_per_dtype():
    prefills = {d: gdn_state_dtype.plan_state(d, "x").prefill for d in gdn_state_dtype.DTYPES}
    assert len(set(prefills.values())) == len(gdn_state_dtype.DTYPES)


def test_message_mentions_speculative_verify_only_when_speculative():
    plan = gdn_state_dtype.plan_state("float32", "SGLang default")
    spec = plan.message(GDN_ARCH, speculative=True)
    plain = plan.message(GDN_ARCH, speculative=False)
    assert f" Speculative verify (MTP): {plan.verify}." in spec
    assert "Speculative" not in plain and plan.verify not in plain
    for text in (spec, plain):
        assert f"GDN prefill: {plan.prefill}." in text and "--mamba-ssm-dtype bfloat16" in text


def test_config_dtype_prefers_the_text_config_when_it_sets_one():
    both = NS(mamba_ssm_dtype="float16", text_config=NS(mamba_ssm_dtype="bfloat16"))
    assert gdn_state_dtype._config_dtype(both) == "bfloat16"


@pytest.mark.parametrize("text", [NS(), NS(mamba_ssm_dtype=None)], ids=["text-without-field", "text-field-none"])
def test_config_dtype_falls_back_to_the_top_level_when_the_text_config_sets_none(text):
    assert gdn_state_dtype._config_dtype(NS(mamba_ssm_dtype="float16", text_config=text)) == "float16"
    assert gdn_state_dtype._config_dtype(NS(text_config=text)) is None


def test_config_dtype_without_text_config_reads_the_top_level():
    assert gdn_state_dtype._config_dtype(NS(mamba_ssm_dtype="bfloat16")) == "bfloat16"
    assert gdn_state_dtype._config_dtype(NS()) is None


# ------------------------------------------------------------------ stand-in records
# SGLang's resolving_view reads a record's attributes under its declarations; model_config_of hands
# back a ModelConfig a fixture put on the record (``_model_config`` without a build key).


def _record(arch, *, device="npu", model_path="/models/m", declared=None, architectures=None, **fields):
    hf_config = NS(architectures=[arch] if architectures is None else architectures, **fields.pop("hf", {}))
    values = dict(device=device, model_path=model_path, page_size=128, disable_radix_cache=False,
                  mamba_radix_cache_strategy="auto", enable_hierarchical_cache=False, linear_attn_backend="triton",
                  mamba_ssm_dtype=None, speculative_algorithm=None)
    values.update(fields)
    rec = NS(**values, _model_config=NS(hf_config=hf_config), _resolved_overrides=list(declared or []))
    return rec


def test_gdn_state_report_records_the_decision_on_the_server_args(monkeypatch):
    monkeypatch.delenv("SGLANG_MAMBA_SSM_DTYPE", raising=False)
    rec = _record(GDN_ARCH, speculative_algorithm="NEXTN", hf={"mamba_ssm_dtype": "float32"})
    plan = gdn_state_dtype.report(rec)
    assert plan == gdn_state_dtype.plan_state("float32", "the model config's mamba_ssm_dtype")
    assert getattr(rec, gdn_state_dtype.RECORD_ATTR) == {
        "dtype": "float32", "source": "the model config's mamba_ssm_dtype", "prefill": plan.prefill,
        "verify": plan.verify, "speculative": True}


def test_gdn_state_report_ignores_non_gdn_and_non_npu_launches(monkeypatch):
    monkeypatch.delenv("SGLANG_MAMBA_SSM_DTYPE", raising=False)
    for rec in (_record(SHORT_CONV_ARCH), _record(GDN_ARCH, device="cuda")):
        assert gdn_state_dtype.report(rec) is None
        assert not hasattr(rec, gdn_state_dtype.RECORD_ATTR)


# ------------------------------------------------------------------ launch defaults (integration/launch/)


def test_decide_changes_nothing_when_extra_buffer_serves_the_default_strategy():
    facts = decision.LaunchFacts(arch=GDN_ARCH, extra_buffer_supported=True)
    assert facts.strategy == "auto" and facts.page_size == 128
    d = decision.decide(facts)
    assert (d.declare, d.adjustments, d.error) == ({}, [], None)  # nothing declared: only the INFO line
    assert "mamba extra_buffer strategy, page_size=128" in d.info and "SGLang's GDN backend" in d.info
    for strategy in ("extra_buffer", "extra_buffer_lazy"):
        d = decision.decide(dataclasses.replace(facts, strategy=strategy, strategy_explicit=True))
        assert (d.declare, d.adjustments, d.error) == ({}, [], None)
        assert f"mamba {strategy} strategy" in d.info


def test_decide_disables_the_radix_cache_without_extra_buffer():
    d = decision.decide(decision.LaunchFacts(arch=SHORT_CONV_ARCH))
    assert d.declare == {"disable_radix_cache": True} and d.error is None


def test_npu_model_is_the_first_architecture_of_an_npu_launch():
    archs = frozenset({"FirstArch"})
    rec = _record("FirstArch", architectures=["FirstArch", "SecondArch"])
    found = resolution.npu_model(rec, archs)
    assert found is not None
    cfg, hf_config, arch = found
    assert arch == "FirstArch"
    assert hf_config is rec._model_config.hf_config
    assert (cfg.device, cfg.model_path) == ("npu", "/models/m")
    assert resolution.npu_model(_record("x", architectures=["SecondArch", "FirstArch"]), archs) is None
    assert resolution.npu_model(_record("x", architectures=[]), archs) is None


def test_npu_model_reads_the_resolving_view_not_the_raw_record():
    rec = _record(GDN_ARCH, device="cpu", declared=[("sglang", {"device": "npu"})])
    found = resolution.npu_model(rec, GDN_ARCHS)
    assert found is not None and found[0].device == "npu" and found[2] == GDN_ARCH
    gone = _record(GDN_ARCH, declared=[("sglang", {"device": "cpu"})])
    assert resolution.npu_model(gone, GDN_ARCHS) is None


@pytest.mark.parametrize("device,model_path", [("cuda", "/models/m"), ("cpu", "/models/m"), ("npu", "dummy"),
                                               ("npu", "DUMMY"), ("npu", None), ("npu", "None")])
def test_npu_model_is_none_off_npu_or_for_a_dummy_model(device, model_path):
    assert resolution.npu_model(_record(GDN_ARCH, device=device, model_path=model_path), GDN_ARCHS) is None


def test_explicit_tells_a_given_flag_from_a_default_on_a_plain_record():
    rec = NS(_raw_input={"mamba_radix_cache_strategy": "auto", "page_size": None, "disable_radix_cache": True})
    assert resolution._explicit(rec, "mamba_radix_cache_strategy") is False
    assert resolution._explicit(rec, "page_size") is False
    assert resolution._explicit(rec, "disable_radix_cache") is True
    assert resolution._explicit(NS(_raw_input={"page_size": 128}), "page_size") is True
    # without a raw snapshot the record's own values are compared with the defaults
    assert resolution._explicit(NS(linear_attn_backend="triton"), "linear_attn_backend") is False
    assert resolution._explicit(NS(linear_attn_backend="ascend"), "linear_attn_backend") is True


class _StructRecord(msgspec.Struct, dict=True):  # a msgspec record like SGLang's ServerArgs
    page_size: Optional[int] = None
    mamba_radix_cache_strategy: str = "extra_buffer"  # a release default unlike the plugin's table
    disable_radix_cache: bool = False


def test_explicit_compares_with_the_records_own_field_default():
    rec = _StructRecord()
    rec._raw_input = {"page_size": 128, "mamba_radix_cache_strategy": "extra_buffer", "disable_radix_cache": False}
    assert resolution._explicit(rec, "page_size") is True
    assert resolution._explicit(rec, "mamba_radix_cache_strategy") is False  # the struct's default
    assert resolution._explicit(rec, "disable_radix_cache") is False
    rec._raw_input = {"mamba_radix_cache_strategy": "auto"}
    assert resolution._explicit(rec, "mamba_radix_cache_strategy") is True


def test_adjustments_of_returns_what_was_recorded_on_the_server_args():
    rec = NS(**{resolution._ADJUSTMENTS_ATTR: ["disable_radix_cache=True (page_size=128 kept): x"]},
             _resolved_overrides=[(resolution.SOURCE, {"disable_radix_cache": True})])
    assert resolution.adjustments_of(rec) == ["disable_radix_cache=True (page_size=128 kept): x"]


def test_adjustments_of_falls_back_to_the_plugins_declarations():
    rec = NS(_resolved_overrides=[("sglang", {"page_size": 128}),
                                  (resolution.SOURCE, {"disable_radix_cache": True})])
    assert resolution.adjustments_of(rec) == ["disable_radix_cache=True"]
    assert resolution.adjustments_of(NS()) == []


HELPER = "_platform_supports_mamba_cache_extra_buffer"


@pytest.mark.parametrize("answer", [True, False])
def test_platform_extra_buffer_support_asks_the_releases_helper(monkeypatch, answer):
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups import mamba_hook

    asked = []
    # where a release has no helper this installs one: the function must then ask it too
    monkeypatch.setattr(mamba_hook, HELPER, lambda: asked.append(1) or answer, raising=False)
    opposite = not answer  # the inline predicate would say the opposite
    monkeypatch.setattr(runtime_context, "get_platform",
                        lambda: NS(is_cuda=False, is_musa=False, is_npu=opposite, is_hip=False, is_xpu=False))
    assert extra_buffer.platform_supports_extra_buffer() is answer
    assert asked == [1]


@pytest.mark.parametrize("flag", ["is_cuda", "is_musa", "is_npu", "is_hip", "is_xpu", None])
def test_platform_extra_buffer_support_without_a_helper_uses_the_inline_predicate(monkeypatch, flag):
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups import mamba_hook

    monkeypatch.delattr(mamba_hook, HELPER, raising=False)
    flags = {f: f == flag for f in ("is_cuda", "is_musa", "is_npu", "is_hip", "is_xpu")}
    monkeypatch.setattr(runtime_context, "get_platform", lambda: NS(**flags))
    assert extra_buffer.platform_supports_extra_buffer() is (flag is not None)


def test_facts_from_server_args_describe_an_npu_launch_of_a_supported_model(monkeypatch):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: False)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: True)
    rec = _record(SHORT_CONV_ARCH, declared=[("sglang", {"page_size": 128})], page_size=None,
                  mamba_radix_cache_strategy="auto")
    rec._raw_input = {"page_size": None, "mamba_radix_cache_strategy": "auto", "enable_hierarchical_cache": False}
    facts = resolution._facts_from_server_args(rec)
    assert facts == decision.LaunchFacts(arch=SHORT_CONV_ARCH, device="npu", page_size=128)
    # a GDN model whose linear-attention backend rules extra_buffer out says why
    gdn = _record(GDN_ARCH, linear_attn_backend="ascend")
    gdn._raw_input = {"linear_attn_backend": "ascend"}
    facts = resolution._facts_from_server_args(gdn)
    assert facts.arch == GDN_ARCH and not facts.extra_buffer_supported
    assert facts.extra_buffer_reason == " with --linear-attn-backend ascend (needs triton)"


def test_facts_from_server_args_are_none_for_unsupported_or_off_npu_launches(monkeypatch):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: pytest.fail("asked"))
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: pytest.fail("asked"))
    assert resolution._facts_from_server_args(_record("LlamaForCausalLM")) is None
    assert resolution._facts_from_server_args(_record(SHORT_CONV_ARCH, device="cuda")) is None


# ------------------------------------------------------------------ registry


class _EP:
    def __init__(self, name, value="pkg.mod:factory"):
        self.name, self.value = name, value

    def load(self):
        return lambda runner: (self.name, runner)


def test_backend_factories_after_an_already_registered_name_are_still_added(monkeypatch):
    from sglang.srt.layers.attention import attention_registry

    def existing(runner):
        return "existing"

    backends = {"survivor_taken": existing}
    monkeypatch.setattr(attention_registry, "ATTENTION_BACKENDS", backends)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    eps = [_EP("survivor_first"), _EP("survivor_taken"), _EP("survivor_second"), _EP("survivor_third")]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    assert registry.add_backend_factories() == ["survivor_first", "survivor_second", "survivor_third"]
    assert backends["survivor_taken"] is existing
    assert backends["survivor_third"]("runner") == ("survivor_third", "runner")


def test_discover_keeps_entries_after_a_skipped_or_duplicate_one(monkeypatch):
    eps = [_EP("a"), _EP("skipped"), _EP("a", "other.pkg:factory"), _EP("b")]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    monkeypatch.setenv("SGLANG_PLUGINS", "a, b")
    found = registry.discover()
    assert [(ep.name, ep.value) for ep in found] == [("a", "pkg.mod:factory"), ("b", "pkg.mod:factory")]


# ------------------------------------------------------------------ apply_launch_defaults on a record


def _short_conv_record(**fields):
    rec = _record(SHORT_CONV_ARCH, **fields)
    rec._raw_input = {}
    return rec


def test_apply_launch_defaults_declares_on_the_record_and_records_each_adjustment_once(monkeypatch, caplog):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: False)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: True)
    rec = _short_conv_record()
    with caplog.at_level("INFO", logger=resolution.logger.name):
        d = resolution.apply_launch_defaults(rec)
        assert d.declare == {"disable_radix_cache": True} and d.adjustments
        assert rec._resolved_overrides == [(resolution.SOURCE, {"disable_radix_cache": True})]
        assert getattr(rec, resolution._ADJUSTMENTS_ATTR) == d.adjustments
        again = resolution.apply_launch_defaults(rec)  # SGLang may resolve one record twice
    # the view now has the radix cache off: nothing more to declare, the record's list unchanged
    assert again.declare == {} and len(rec._resolved_overrides) == 1
    assert getattr(rec, resolution._ADJUSTMENTS_ATTR) == d.adjustments
    # a record that already carries the adjustment (a resolution retried from its raw input): kept once,
    # and nothing new to say
    retried = _short_conv_record()
    setattr(retried, resolution._ADJUSTMENTS_ATTR, list(d.adjustments))
    with caplog.at_level("INFO", logger=resolution.logger.name):
        resolution.apply_launch_defaults(retried)
    assert getattr(retried, resolution._ADJUSTMENTS_ATTR) == d.adjustments
    assert retried._resolved_overrides == [(resolution.SOURCE, {"disable_radix_cache": True})]
    said = [r.getMessage() for r in caplog.records if r.name == resolution.logger.name]
    assert said == [d.info]


def test_apply_launch_defaults_without_a_declaration_says_the_prefix_line_once_per_record(monkeypatch, caplog):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: True)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: True)
    rec, other = _short_conv_record(), _short_conv_record()
    with caplog.at_level("INFO", logger=resolution.logger.name):
        d = resolution.apply_launch_defaults(rec)
        resolution.apply_launch_defaults(rec)
        resolution.apply_launch_defaults(other)
    assert d.declare == {} and d.info and "extra_buffer" in d.info
    assert rec._resolved_overrides == [] and not hasattr(rec, resolution._ADJUSTMENTS_ATTR)
    assert getattr(rec, resolution._PREFIX_INFO_ATTR) is True
    said = [r.getMessage() for r in caplog.records if r.name == resolution.logger.name]
    assert said == [d.info, d.info]  # once for each record


def test_apply_launch_defaults_leaves_other_launches_alone_and_raises_on_conflicts(monkeypatch):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: False)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: True)
    off_npu = _short_conv_record(device="cuda")
    assert resolution.apply_launch_defaults(off_npu) == decision.Decision()
    assert off_npu._resolved_overrides == []
    conflict = _short_conv_record(mamba_radix_cache_strategy="no_buffer")
    conflict._raw_input = {"mamba_radix_cache_strategy": "no_buffer"}
    with pytest.raises(decision.LaunchConfigError, match="--mamba-radix-cache-strategy no_buffer"):
        resolution.apply_launch_defaults(conflict)
    assert conflict._resolved_overrides == [] and not hasattr(conflict, resolution._ADJUSTMENTS_ATTR)


def test_facts_read_the_flags_the_user_set_and_hand_the_view_to_sglangs_check(monkeypatch):
    views = []
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: views.append(cfg) or True)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: True)
    rec = _record(GDN_ARCH, disable_radix_cache=True, mamba_radix_cache_strategy="extra_buffer",
                  enable_hierarchical_cache=True)
    rec._raw_input = {"disable_radix_cache": True, "mamba_radix_cache_strategy": "extra_buffer",
                      "enable_hierarchical_cache": True}
    facts = resolution._facts_from_server_args(rec)
    assert views and views[0].device == "npu"  # the resolving view, not None
    assert facts.disable_radix_cache is True and facts.strategy == "extra_buffer"
    assert facts.strategy_explicit is True and facts.hierarchical_cache_explicit is True
    assert facts.extra_buffer_supported is True and facts.extra_buffer_reason == ""
    # hierarchical cache on by someone else's declaration, not the user's flag: not explicit
    declared = _record(GDN_ARCH, declared=[("sglang", {"enable_hierarchical_cache": True})])
    declared._raw_input = {"enable_hierarchical_cache": False}
    assert resolution._facts_from_server_args(declared).hierarchical_cache_explicit is False
    # the user's flag that a declaration turned off: not on
    turned_off = _record(GDN_ARCH, enable_hierarchical_cache=True,
                         declared=[("sglang", {"enable_hierarchical_cache": False})])
    turned_off._raw_input = {"enable_hierarchical_cache": True}
    assert resolution._facts_from_server_args(turned_off).hierarchical_cache_explicit is False


def test_facts_say_why_extra_buffer_is_off_on_this_platform(monkeypatch):
    monkeypatch.setattr(extra_buffer, "arch_supports_extra_buffer", lambda cfg, hf: True)
    monkeypatch.setattr(extra_buffer, "platform_supports_extra_buffer", lambda: False)
    rec = _record(GDN_ARCH)
    rec._raw_input = {}
    facts = resolution._facts_from_server_args(rec)
    assert facts.extra_buffer_supported is False and facts.extra_buffer_reason == " on this platform"


def test_explicit_without_a_snapshot_or_the_field_is_not_explicit():
    assert resolution._explicit(NS(), "mamba_radix_cache_strategy") is False
    assert resolution._explicit(NS(), "linear_attn_backend") is False


def test_the_arch_name_form_of_the_extra_buffer_check_gets_an_empty_name_without_architectures(monkeypatch):
    from sglang.srt.arg_groups import overrides

    seen = []

    def by_arch(view, model_arch):
        seen.append(model_arch)
        return False

    monkeypatch.setattr(overrides, "supports_mamba_cache_extra_buffer", by_arch)
    assert extra_buffer.arch_supports_extra_buffer(object(), NS()) is False
    assert extra_buffer.arch_supports_extra_buffer(object(), NS(architectures=[])) is False
    assert seen == ["", ""]


def test_the_extra_buffer_gate_asks_sglang_with_every_argument_first(monkeypatch):
    from sglang.srt.arg_groups.overrides import supports_mamba_cache_extra_buffer  # noqa: F401 (release has it)

    from sglang_ascend_hybrid.integration.launch import registration
    from sglang_ascend_hybrid.model_families import PLUGIN_SNAPSHOT_ARCHS

    monkeypatch.setattr(registration, "launch_hooks_registered", lambda: True)
    asked = []

    def original(view, model, *args, **kwargs):
        asked.append((view, model, args, kwargs))
        return model == "YesArch"

    view = NS(device="npu")
    assert extra_buffer.supports_extra_buffer_around(original, view, "YesArch", 1, flag=2) is True
    assert asked == [(view, "YesArch", (1,), {"flag": 2})]
    snap = sorted(PLUGIN_SNAPSHOT_ARCHS)[0]
    assert extra_buffer.supports_extra_buffer_around(original, view, NS(architectures=[snap])) is True
    assert extra_buffer.supports_extra_buffer_around(original, view, NS()) is False  # no architectures
    assert extra_buffer.supports_extra_buffer_around(original, NS(device="cuda"), snap) is False


# ------------------------------------------------------------------ the decision planned from a config


def _qwen3_5_config():
    from sglang_ascend_hybrid.model_families import FAMILIES

    arch = next(a for f in FAMILIES if f.radix_snapshots == "sglang" for a in f.architectures)
    return {"architectures": [arch]}


def test_planned_decision_follows_the_installed_releases_extra_buffer_list(monkeypatch):
    from sglang_ascend_hybrid.integration.launch import planned

    config = _qwen3_5_config()
    monkeypatch.setattr(planned, "upstream_extra_buffer_archs", lambda: frozenset())  # a release without it
    assert planned.planned_decision(config).declare == {"disable_radix_cache": True}
    # off, so nobody writes snapshots, whoever would have
    assert planned.planned_prefix_cache(config) == {"on": False, "strategy": None, "snapshots": None}
    monkeypatch.setattr(planned, "upstream_extra_buffer_archs", lambda: None)  # SGLang not installed
    assert planned.planned_decision(config).declare == {}
    assert planned.planned_prefix_cache(config) == {"on": True, "strategy": "extra_buffer", "snapshots": "sglang"}


@pytest.mark.parametrize("tp", [0, -2])
def test_planned_decision_refuses_a_tp_size_below_one(tp):
    from sglang_ascend_hybrid.integration.launch import planned

    with pytest.raises(ValueError, match=rf"^planned_decision: tp_size={tp}: expected an integer >= 1$"):
        planned.planned_decision(_qwen3_5_config(), tp)


# ------------------------------------------------------------------ decide(): each explicit conflict, in-process


def _no_snapshot_arch():
    from sglang_ascend_hybrid.integration.launch.decision import SUPPORTED_ARCHS, snapshot_writer

    return sorted(a for a in SUPPORTED_ARCHS if not snapshot_writer(a))[0]


@pytest.mark.parametrize("supported", [True, False])
def test_an_explicit_unaligned_page_size_says_the_fix_the_extra_buffer_answer_allows(supported):
    d = decision.decide(decision.LaunchFacts(arch=SHORT_CONV_ARCH, page_size=1, page_size_explicit=True,
                                             extra_buffer_supported=supported))
    assert d.error.startswith(f"sglang-ascend-hybrid: --page-size 1 cannot work for {SHORT_CONV_ARCH} on NPU")
    tail = "; the plugin then disables the radix cache for this model, or pass --disable-radix-cache."
    assert d.error.endswith("Fix: drop --page-size (NPU default 128)" + ("." if supported else tail))
    assert d.declare == {}


def test_extra_buffer_without_a_snapshot_writer_in_the_table_names_sglang_as_the_writer():
    d = decision.decide(decision.LaunchFacts(arch=_no_snapshot_arch(), extra_buffer_supported=True))
    assert d.info.endswith("(state snapshots at tracked boundaries written by SGLang)")


def test_an_explicit_no_buffer_without_extra_buffer_says_to_disable_the_radix_cache():
    d = decision.decide(decision.LaunchFacts(arch=SHORT_CONV_ARCH, strategy="no_buffer", strategy_explicit=True))
    assert d.error.endswith("Fix: drop --mamba-radix-cache-strategy (the plugin then disables the radix cache) or "
                            "replace it with --disable-radix-cache.")


@pytest.mark.parametrize("strategy", ["extra_buffer", "extra_buffer_lazy"])
def test_an_explicit_extra_buffer_strategy_the_model_cannot_use_is_refused(strategy):
    d = decision.decide(decision.LaunchFacts(arch=SHORT_CONV_ARCH, strategy=strategy, strategy_explicit=True,
                                             extra_buffer_reason=" on this platform"))
    assert d.error.startswith(f"sglang-ascend-hybrid: --mamba-radix-cache-strategy {strategy} is not supported "
                              f"for {SHORT_CONV_ARCH} on this platform, and no_buffer cannot work")
    assert d.declare == {}
    # the same strategy when SGLang picked it (not the user's flag): the radix cache goes off instead
    d = decision.decide(decision.LaunchFacts(arch=SHORT_CONV_ARCH, strategy=strategy))
    assert d.error is None and d.declare == {"disable_radix_cache": True}


def test_planned_decision_passes_each_flag_to_the_decision():
    from sglang_ascend_hybrid.integration.launch import planned

    config = {"architectures": [_no_snapshot_arch()]}
    assert planned.planned_decision(config).declare == {"disable_radix_cache": True}
    assert planned.planned_decision(config, disable_radix_cache=True) == decision.Decision()
    with pytest.raises(decision.LaunchConfigError, match="--enable-hierarchical-cache needs the radix cache"):
        planned.planned_decision(config, enable_hierarchical_cache=True)
