"""Malformed input to the CLI: configs `plan` cannot interpret and invalid environment values.

What users see is the contract: one line on stderr naming the problem, exit status 2, no
traceback -- for ``plan`` (every malformed config class, every invalid variable), ``selftest``
(invalid variables, at startup) and ``doctor`` (flags the invalid value in its report, exits 2).
A few cases run the CLI as a subprocess, the rest in-process through :func:`cli.main`.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ascend_hybrid import cli, envs

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"
QWEN = json.loads((CONFIGS / "qwen3_6-27b" / "config.json").read_text())
NEXT = json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text())
LFM2 = json.loads((CONFIGS / "lfm2-1.2b" / "config.json").read_text())
ZAYA = json.loads((CONFIGS / "zaya1-base" / "config.json").read_text())


def _clean_env(monkeypatch):
    for var in envs.all_vars():
        monkeypatch.delenv(var.name, raising=False)


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_config(tmp_path, capsys, cfg, *extra):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return run_main(capsys, "plan", "--config", str(path), *extra)


def assert_one_line_error(code, out, err, command, *needles):
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"sglang-ascend-hybrid {command}: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _with(base, path, value):
    """A copy of ``base`` with ``path`` (keys, ``text_config`` first where present) set to
    ``value``; the sentinel ``DELETE`` removes the field."""
    cfg = copy.deepcopy(base)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return cfg


DELETE = object()
T = ("text_config",)

# (id, config, needles the one-line error must contain)
MALFORMED = [
    ("interval_zero", _with(NEXT, ("full_attention_interval",), 0),
     ["'full_attention_interval' = 0", "expected an integer from 1"]),
    ("interval_negative", _with(NEXT, ("full_attention_interval",), -4), ["'full_attention_interval' = -4"]),
    ("interval_string", _with(NEXT, ("full_attention_interval",), "4"), ["'full_attention_interval' = \"4\""]),
    ("interval_fraction", _with(NEXT, ("full_attention_interval",), 2.5), ["'full_attention_interval' = 2.5"]),
    ("null_heads", _with(QWEN, T + ("num_attention_heads",), None), ["'num_attention_heads' = null"]),
    ("zero_heads", _with(QWEN, T + ("num_attention_heads",), 0), ["'num_attention_heads' = 0"]),
    ("null_value_heads", _with(QWEN, T + ("linear_num_value_heads",), None), ["'linear_num_value_heads' = null"]),
    ("zero_key_heads", _with(QWEN, T + ("linear_num_key_heads",), 0), ["'linear_num_key_heads' = 0"]),
    ("bool_key_heads", _with(QWEN, T + ("linear_num_key_heads",), True), ["'linear_num_key_heads' = true"]),
    ("huge_value_heads", _with(QWEN, T + ("linear_num_value_heads",), 10**12),
     ["'linear_num_value_heads' = 1000000000000", "to 4096"]),
    ("value_not_multiple_of_key", _with(QWEN, T + ("linear_num_value_heads",), 40),
     ["linear_num_value_heads = 40", "linear_num_key_heads = 16", "multiple"]),
    ("kv_heads_not_dividing", _with(QWEN, T + ("num_key_value_heads",), 5), ["num_key_value_heads = 5"]),
    ("head_dim_zero", _with(QWEN, T + ("linear_key_head_dim",), 0), ["'linear_key_head_dim' = 0"]),
    ("value_head_dim_zero", _with(NEXT, ("linear_value_head_dim",), 0), ["'linear_value_head_dim' = 0"]),
    ("head_dim_string", _with(NEXT, ("linear_key_head_dim",), "128"), ["'linear_key_head_dim' = \"128\""]),
    ("layer_types_string", _with(QWEN, T + ("layer_types",), "linear_attention"),
     ["'layer_types' = \"linear_attention\"", "expected a list of strings"]),
    ("layer_types_dict", _with(LFM2, ("layer_types",), {"0": "conv"}), ["'layer_types'"]),
    ("layer_types_numbers", _with(LFM2, ("layer_types",), [1, 2]), ["'layer_types' = [1, 2]"]),
    ("zaya_layers_string", _with(ZAYA, ("zaya_layers",), "a16a16"), ["'zaya_layers'", "layer codes"]),
    ("zaya_layers_nested", _with(ZAYA, ("zaya_layers",), [["a"]]), ["'zaya_layers'"]),
    ("layers_missing", _with(LFM2, ("num_hidden_layers",), DELETE), ["lacks the field 'num_hidden_layers'"]),
    ("layers_negative", _with(LFM2, ("num_hidden_layers",), -1), ["'num_hidden_layers' = -1"]),
    ("layers_nan", _with(LFM2, ("num_hidden_layers",), float("nan")), ["'num_hidden_layers' = NaN"]),
    ("conv_width_zero", _with(LFM2, ("conv_L_cache",), 0), ["'conv_L_cache' = 0"]),
    ("hidden_null", _with(LFM2, ("hidden_size",), None), ["'hidden_size' = null"]),
    ("zaya_head_dim_zero", _with(ZAYA, ("head_dim",), 0), ["'head_dim' = 0"]),
    ("zaya_hidden_below_heads", _with(_with(ZAYA, ("head_dim",), None), ("hidden_size",), 4),
     ["hidden_size = 4", "num_attention_heads = 8"]),
    ("zaya_cca_time_zero", _with(ZAYA, ("cca_time0",), 0), ["'cca_time0' = 0"]),
    ("text_config_list", _with(QWEN, ("text_config",), [1]), ["'text_config' = [1]", "JSON object"]),
    ("architectures_number", _with(QWEN, ("architectures",), 5), ["'architectures' = 5"]),
    ("model_type_number", _with(QWEN, ("model_type",), 5), ["no model_type"]),
]


@pytest.mark.parametrize("name,cfg,needles", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_config_is_one_line_exit_2(tmp_path, capsys, monkeypatch, name, cfg, needles):
    _clean_env(monkeypatch)
    code, out, err = plan_config(tmp_path, capsys, cfg)
    assert_one_line_error(code, out, err, "plan", *needles)
    assert out == ""


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe{}", "is not valid JSON"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    (b'{"model_type": "qwen3_next", "num_hidden_layers": 1e400}', "'num_hidden_layers' = Infinity"),
    (b'{"model_type": "qwen3_next", "num_hidden_layers": NaN}', "'num_hidden_layers' = NaN"),
])
def test_unreadable_config_files(tmp_path, capsys, monkeypatch, content, needle):
    _clean_env(monkeypatch)
    (tmp_path / "config.json").write_bytes(content)
    code, out, err = run_main(capsys, "plan", "--config", str(tmp_path))
    assert_one_line_error(code, out, err, "plan", needle)


def test_config_that_cannot_be_read(tmp_path, capsys, monkeypatch):
    _clean_env(monkeypatch)
    path = tmp_path / "config.json"
    path.write_text("{}")
    monkeypatch.setattr(Path, "read_text", lambda self, **kw: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")))
    code, out, err = run_main(capsys, "plan", "--config", str(path))
    assert_one_line_error(code, out, err, "plan", f"cannot read {path}: Permission denied")


@pytest.mark.parametrize("base", [QWEN, NEXT, LFM2, ZAYA], ids=["qwen3_5", "qwen3_next", "lfm2", "zaya"])
def test_the_unmodified_configs_plan_fine(tmp_path, capsys, monkeypatch, base):
    """The malformed cases above are single edits of these, which plan accepts."""
    _clean_env(monkeypatch)
    code, out, err = plan_config(tmp_path, capsys, base)
    assert code == 0, err
    assert "TP=1" in out


# Every field plan reads, and values of every wrong kind.
FIELDS = ["num_hidden_layers", "full_attention_interval", "layer_types", "zaya_layers", "num_attention_heads",
          "num_key_value_heads", "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
          "linear_value_head_dim", "hidden_size", "conv_L_cache", "head_dim", "cca_time0", "cca_time1",
          "torch_dtype", "dtype", "architectures", "text_config", "model_type"]
BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([10**6, 10**12, 4097, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.lists(st.one_of(st.integers(-1, 2), st.text(max_size=2), st.none()), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(DELETE),
)


def test_fuzzed_configs_never_traceback(tmp_path, capsys, monkeypatch):
    """Random edits (1-3 fields, top level or text_config) of the example configs: plan either
    plans (exit 0) or prints one line and exits 2; it never raises."""
    _clean_env(monkeypatch)
    seen = {0: 0, 2: 0}

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(base=st.sampled_from([QWEN, NEXT, LFM2, ZAYA]),
           edits=st.lists(st.tuples(st.sampled_from(FIELDS), st.booleans(), BAD_VALUES), min_size=1, max_size=3),
           tp=st.sampled_from([[], ["--tp", "1", "3"], ["--tp", "16"]]), as_json=st.booleans())
    def check(base, edits, tp, as_json):
        cfg = base
        for field, inner, value in edits:
            inner = inner and isinstance(cfg.get("text_config"), dict)
            cfg = _with(cfg, ("text_config", field) if inner else (field,), value)
        code, out, err = plan_config(tmp_path, capsys, cfg, *tp, *(["--json"] if as_json else []))
        seen[code] += 1
        if code == 2:
            assert_one_line_error(code, out, err, "plan")
            assert out == ""
        else:
            assert code == 0 and out and err == "", err

    check()
    assert seen[2] >= 50 and seen[0] >= 5, seen  # both outcomes really exercised


def test_kernel_heads_with_no_limit(capsys, monkeypatch):
    """GDN_MAX_OVERHEAD=inf with --kernel-heads 16 for (3, 1) at TP=16: one launch of 16 value heads
    (the real key group padded to 4 value heads plus 3 inert groups), cost 16/3."""
    _clean_env(monkeypatch)
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "inf")
    code, out, err = run_main(capsys, "plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "16",
                              "--kernel-heads", "16", "--json")
    assert code == 0, err
    g = json.loads(out)["rows"][0]["gdn"]["mega_plan"]
    assert g["strategy"] == "pad" and g["launches"] == [[16, 4]] and g["overhead"] == pytest.approx(16 / 3)


# ---------------------------------------------------------------------------
# Invalid environment values
# ---------------------------------------------------------------------------

BAD_ENV = [
    ("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "nan"),
    ("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "-inf"),
    ("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "0.5"),
    ("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "-2"),
    ("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "garbage"),
    ("SGLANG_ASCEND_HYBRID_DISABLE", "maybe"),
    ("SGLANG_ASCEND_HYBRID_STRICT", "2"),
    ("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", "inf"),
    ("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "bogus"),
    ("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "npu_v2"),  # a conv rung
    ("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "mega"),  # a GDN rung
    ("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "nan"),
    ("SGLANG_ASCEND_HYBRID_EMULATED_NPU", "maybe"),
    ("SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32", "2"),
    ("SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK", "everything"),
    ("SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS", "relative/records.jsonl"),
]


def test_bad_env_cases_cover_every_variable():
    assert {name for name, _ in BAD_ENV} == {v.name for v in envs.all_vars()}


@pytest.mark.parametrize("name,raw", BAD_ENV)
@pytest.mark.parametrize("argv", [["plan", "--config", str(CONFIGS / "qwen3_6-27b")],
                                  ["selftest", "--quick"]], ids=["plan", "selftest"])
def test_invalid_env_stops_plan_and_selftest_with_one_line(capsys, monkeypatch, name, raw, argv):
    _clean_env(monkeypatch)
    monkeypatch.setenv(name, raw)
    code, out, err = run_main(capsys, *argv)
    assert_one_line_error(code, out, err, argv[0], f"{name}={raw!r}", "expected ")
    assert out == ""


def test_plan_accepts_inf_overhead(capsys, monkeypatch):
    _clean_env(monkeypatch)
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "inf")
    code, out, err = run_main(capsys, "plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--json")
    assert code == 0, err
    g16 = {r["tp"]: r for r in json.loads(out)["rows"]}[16]["gdn"]  # (3, 1): padded, no longer "none"
    assert g16["mega_plan"]["strategy"] == "pad" and g16["mega_plan"]["launches"] == [[8, 2]]


# -- as users run them: subprocesses ----------------------------------------

def run_cli(*argv, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_ASCEND_HYBRID_")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "sglang_ascend_hybrid.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=600)


def test_subprocess_plan_malformed_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_with(NEXT, ("full_attention_interval",), 0)))
    proc = run_cli("plan", "--config", str(path))
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "plan", "'full_attention_interval' = 0")


def test_subprocess_plan_inf_overhead_and_bad_overhead():
    proc = run_cli("plan", "--config", str(CONFIGS / "qwen3-next-80b-a3b"), "--tp", "16",
                   env_extra={"SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD": "inf"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    # (2, 1) per rank: no head plan under the default limit, a 4x padded plan without a limit
    tp16 = proc.stdout.split("TP=16  GDN per rank (Hv=2, Hk=1, d=128)", 1)[1]
    assert "head plan pad, launches [[8, 4]], overhead 4.00" in tp16.split("verify (MTP)", 1)[0]
    proc = run_cli("plan", "--config", str(CONFIGS / "qwen3_6-27b"),
                   env_extra={"SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD": "nan"})
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "plan",
                          "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD='nan': expected a number >= 1")


def test_subprocess_selftest_bad_backend():
    proc = run_cli("selftest", "--quick", env_extra={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "bogus"})
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "selftest",
                          "SGLANG_ASCEND_HYBRID_CONV_BACKEND='bogus': expected one of auto, npu_v2")


@pytest.mark.parametrize("env", [
    {"SGLANG_ASCEND_HYBRID_DISABLE": "maybe"},
    {"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "bogus", "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD": "nan",
     "SGLANG_ASCEND_HYBRID_STRICT": "2", "SGLANG_ASCEND_HYBRID_CONV_BACKEND": "mega",
     "SGLANG_ASCEND_HYBRID_DEBUG_CHECKS": "maybe"},
], ids=["disable", "every_other_variable"])
@pytest.mark.base_release_only  # the settings' checks do not depend on SGLang's release (CI time)
def test_subprocess_doctor_flags_invalid_settings(env):
    """Between them the two runs give every variable an invalid value."""
    proc = run_cli("doctor", env_extra=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    # (SGLang's own import-time UserWarnings may precede them on stderr)
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sglang-ascend-hybrid doctor: ")]
    assert len(err_lines) == len(env), proc.stderr
    for name, raw in env.items():
        problem = f"environment variable {name}={raw!r}: expected "
        assert f"  {name} = INVALID: {problem}" in proc.stdout
        assert any(line.startswith(f"problem: {problem}") for line in proc.stdout.splitlines())
        assert any(line.startswith(f"sglang-ascend-hybrid doctor: error: {problem}") for line in err_lines)
    assert "Versions" in proc.stdout and "Patches:" in proc.stdout  # the report is still complete
    if "SGLANG_ASCEND_HYBRID_DISABLE" in env:
        assert "problem: plugin not loaded: environment variable SGLANG_ASCEND_HYBRID_DISABLE" in proc.stdout
    else:
        assert "applied" in proc.stdout  # the plugin itself loaded: a backend is read at call time
