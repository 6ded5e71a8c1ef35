"""``selftest``: passes on CPU through the emulators, and can fail."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as conv
from sglang_ascend_hybrid.tools import selftest

OPS = ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
       "recurrent_gated_delta_rule", "fused_infer_attention_varlen")


def _rows(text: str, op: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(op + " ")]


@pytest.fixture
def conv_only(monkeypatch):
    """Restrict the selftest to its short-conv checks (keeps failure tests fast)."""
    every = selftest.checks
    monkeypatch.setattr(selftest, "checks", lambda: [c for c in every() if c.op.startswith("causal_conv1d")])


def test_cpu_quick_passes_and_lists_every_op(capsys):
    rc = selftest.main(SimpleNamespace(device="cpu", quick=True))
    out = capsys.readouterr().out
    assert rc == 0, out
    header = out.splitlines()[1]
    for col in ("op", "case", "max abs error", "tolerance", "emulator wall (ms)", "verdict"):
        assert col in header
    # the times are the emulators': the table says so, and never calls them the ops' speed
    assert "npu" not in header.lower()
    assert "CPU emulators" in out.splitlines()[-2] and "nothing about the ops' speed" in out.splitlines()[-2]
    for op in OPS:
        rows = _rows(out, op)
        assert rows, f"{op} missing from the table:\n{out}"
        assert all(r.rstrip().endswith("PASS") for r in rows), out
    assert "FAIL" not in out
    assert not seam.is_emulated(selftest.checks()[0].expect[0])  # emulators removed afterwards


def test_broken_op_fails(monkeypatch, capsys, conv_only):
    real = conv.causal_conv1d_fn
    monkeypatch.setattr(conv, "causal_conv1d_fn", lambda *a, **k: real(*a, **k) + 1)
    rc = selftest.main(SimpleNamespace(device="cpu", quick=True))
    out = capsys.readouterr().out
    assert rc == 1, out
    assert all(r.rstrip().endswith("FAIL") for r in _rows(out, "causal_conv1d_fn")), out
    assert all(r.rstrip().endswith("PASS") for r in _rows(out, "causal_conv1d_update")), out
    assert "FAILED: causal_conv1d_fn" in out


def test_crashing_op_is_a_fail_row(monkeypatch, capsys, conv_only):
    def boom(*a, **k):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(conv, "causal_conv1d_update", boom)
    rc = selftest.main(SimpleNamespace(device="cpu", quick=True))
    out = capsys.readouterr().out
    assert rc == 1
    assert all(r.rstrip().endswith("FAIL") for r in _rows(out, "causal_conv1d_update")), out
    assert "RuntimeError: kernel exploded" in out


def test_device_path_not_taken_fails(monkeypatch, capsys, conv_only):
    """Right numbers from the torch path are not enough: the device kernel must run."""
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "torch")
    rc = selftest.main(SimpleNamespace(device="cpu", quick=True))
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "device kernel not called" in out


def test_npu_without_torch_npu_is_one_named_line_exit_2(monkeypatch, capsys):
    real = seam.package_available
    monkeypatch.setattr(seam, "package_available", lambda name: False if name == "torch_npu" else real(name))
    assert selftest.main(SimpleNamespace(device="npu", quick=True)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("sglang-ascend-hybrid selftest: error: --device npu: no NPU is usable here "
                               "(torch_npu is not importable)"), lines[0]
    assert "--device cpu" in lines[0]


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu installed here")
def test_npu_on_this_machine_returns_2(capsys):
    assert selftest.main(SimpleNamespace(device="npu", quick=False)) == 2
    err = capsys.readouterr().err
    assert err.startswith("sglang-ascend-hybrid selftest: error: ") and "--device cpu" in err


def test_unknown_device_is_one_named_line_exit_2(capsys):
    assert selftest.main(SimpleNamespace(device="tpu", quick=True)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("sglang-ascend-hybrid selftest: error: --device 'tpu': expected 'cpu' or 'npu'\n")


def test_time_column_names_what_it_measured():
    """Same results, two devices: the emulators' times are never labelled as the device's."""
    r = [selftest.Result("op", "case", 0.0, 1.0, 14000.0, True)]
    cpu, npu = selftest.format_table(r, "cpu"), selftest.format_table(r, "npu")
    assert "emulator wall (ms)" in cpu.splitlines()[0] and "npu" not in cpu.splitlines()[0]
    assert "npu wall (ms)" in npu.splitlines()[0] and "emulator" not in npu
    assert "CPU emulators" in cpu.splitlines()[-1] and "emulator" not in npu.splitlines()[-1]


def test_npu_mode_skips_missing_kernels_and_forces_rungs(monkeypatch, capsys):
    """--device npu (faked): an absent kernel is a SKIP row, not a failure; a present
    one runs with its rung forced through the environment, restored afterwards."""
    import os

    monkeypatch.setattr(selftest, "npu_status", lambda: (True, ""))
    monkeypatch.setattr(seam, "available", lambda name: False)
    assert selftest.main(SimpleNamespace(device="npu", quick=True)) == 0
    out = capsys.readouterr().out
    assert "npu wall (ms)" in out.splitlines()[1]
    assert all(_rows(out, op) and all(r.rstrip().endswith("SKIP") for r in _rows(out, op)) for op in OPS), out
    n = len(selftest.checks())
    assert "kernel not installed" in out and f"0/{n} checks passed, {n} skipped" in out

    seen = {}
    monkeypatch.setattr(seam, "available", lambda name: True)
    check = next(c for c in selftest.checks() if c.npu_env.get("SGLANG_ASCEND_HYBRID_CONV_BACKEND") == "npu_aclnn")
    check.run = lambda device, quick: (seen.update(os.environ), (0.0, 1.0))[1]
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", raising=False)
    result = selftest.run_check(check, "npu", True)
    assert result.verdict == "PASS"
    assert seen["SGLANG_ASCEND_HYBRID_CONV_BACKEND"] == "npu_aclnn"
    assert "SGLANG_ASCEND_HYBRID_CONV_BACKEND" not in os.environ


@pytest.fixture
def gdn_decode_only(monkeypatch):
    """Restrict the selftest to its GDN decode checks (the decode ladder's device rungs)."""
    every = selftest.checks
    monkeypatch.setattr(selftest, "checks", lambda: [c for c in every() if c.op == "gdn decode"])


def test_the_decode_ladders_device_rungs_are_each_checked(gdn_decode_only):
    """One check per device rung of the one GDN decode ladder, each expecting its rung's kernel, and one of
    the npu_recurrent rung with its gates on the gating ladder's device rung."""
    from sglang_ascend_hybrid.ops.gdn import decode
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
    from sglang_ascend_hybrid.ops.gdn.decode.gates import GATES

    checks = selftest.checks()
    device_rungs = [r for r in decode.DECODE.rungs if r.device]
    gate_rungs = [r for r in GATES.rungs if r.device]
    assert len(checks) == len(device_rungs) + len(gate_rungs)
    entry = decode_contract.installed_decode_entry() or "optimized"
    assert checks[0].expect == (decode_contract.DECODE_ENTRIES[entry],)
    assert checks[1].expect == decode.DECODE.rung("npu_recurrent").ops
    assert checks[2].expect == decode.DECODE.rung("npu_recurrent").ops + GATES.rung("npu_gating").ops
    assert [c.npu_env["SGLANG_ASCEND_HYBRID_GDN_BACKEND"] for c in checks] == [
        *(r.name for r in device_rungs), "npu_recurrent"]


@pytest.mark.parametrize("broken", ["triton", "recurrent", "gating"])
def test_a_broken_decode_device_rung_is_reported(monkeypatch, capsys, gdn_decode_only, broken):
    """A device rung of the GDN decode ladder (or the gating kernel its npu_recurrent rung takes its gates
    from) that returns wrong numbers fails its checks, by name; the other checks still pass."""
    from sglang_ascend_hybrid.ops import probes
    from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
    from sglang_ascend_hybrid.ops.gdn.decode import ladder

    if broken == "recurrent":   # the rung's kernel call on the pool rows comes back off by one
        real_rows = ladder.recurrent_on_rows
        monkeypatch.setattr(ladder, "recurrent_on_rows", lambda *a, **k: real_rows(*a, **k) + 1)
    elif broken == "gating":    # the gating kernel's g off by one
        real_gating = seam.call

        def gating(name, *a, **k):
            out = real_gating(name, *a, **k)
            return (out[0] - 1, out[1]) if name == OP_GATING else out

        monkeypatch.setattr(seam, "call", gating)
    else:                       # the Triton decode kernel off by one when the rung calls it (not in its probe)
        real_call = seam.call

        def call(name, *a, **k):
            out = real_call(name, *a, **k)
            return out + 1 if name in decode_contract.DECODE_ENTRIES.values() and not probes.probing() else out

        monkeypatch.setattr(ladder.seam, "call", call)
    rc = selftest.main(SimpleNamespace(device="cpu", quick=True))
    out = capsys.readouterr().out
    assert rc == 1, out
    rows = _rows(out, "gdn decode")
    labels = {"triton": ["(triton decode)"], "recurrent": ["(npu recurrent)", "(npu recurrent, fused gating)"],
              "gating": ["(npu recurrent, fused gating)"]}[broken]
    failed = [row for row in rows if row.rstrip().endswith("FAIL")]
    assert len(failed) == len(labels) and all(label in row for label, row in zip(labels, failed)), out
    assert sum(row.rstrip().endswith("PASS") for row in rows) == 3 - len(labels), out
    assert "FAILED: gdn decode" in out


def test_every_rung_a_device_check_forces_is_a_valid_setting(monkeypatch):
    from sglang_ascend_hybrid import envs

    by_name = {v.name: v for v in envs.all_vars()}
    forced = [(k, v) for c in selftest.checks() for k, v in c.npu_env.items()]
    assert forced
    for name, value in forced:
        monkeypatch.setenv(name, value)
        assert by_name[name].problem() is None and by_name[name].get() == value, (name, value)


def test_an_unproven_device_kernel_is_a_skip_row_of_its_own_check(monkeypatch):
    monkeypatch.setattr(seam, "available", lambda name: True)
    check = next(c for c in selftest.checks() if c.npu_unproven is not None)
    check.npu_unproven = lambda: "its probe found it key-first"
    result = selftest.run_check(check, "npu", True)
    assert (result.op, result.case, result.skipped, result.ok) == (check.op, check.case, True, True)
    assert result.note == "its probe found it key-first"


@pytest.mark.parametrize("verdict,expected", [
    (None, "the decode ladder does not run it here: its layout probe found it unreachable"),
    (SimpleNamespace(usable=False, verdict="key_first"),
     "the decode ladder does not run it here: its layout probe found it key_first"),
    (SimpleNamespace(usable=True, verdict="value_first"), None),
])
def test_the_triton_decode_check_runs_only_where_the_probe_proves_the_kernel(monkeypatch, verdict, expected):
    import torch

    from sglang_ascend_hybrid.ops.gdn import decode

    asked = []
    monkeypatch.setattr(selftest, "_decode_entry", lambda: "the_entry")
    monkeypatch.setattr(decode, "probe_before_serving", lambda *a: asked.append(a) or verdict)
    assert selftest._triton_decode_unproven() == expected
    assert asked == [("the_entry", torch.bfloat16, torch.bfloat16, 128, 128, "npu")]


def test_the_table_header_and_the_mode_line(capsys, monkeypatch):
    r = [selftest.Result("op", "case", 0.0, 1.0, 2.0, True)]
    assert selftest.format_table(r, "cpu").splitlines()[0] == \
        "op  case  max abs error  tolerance  emulator wall (ms)  verdict"
    monkeypatch.setattr(selftest, "run_all", lambda device, quick: r)
    assert selftest.main(SimpleNamespace(device="cpu", quick=False)) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "sglang-ascend-hybrid selftest: device=cpu (CPU emulators behind the device seam); "
        "references: pure torch, fp32 on CPU")
