"""``sglang-ascend-hybrid doctor``: what this machine has and what the plugin did.

Invalid settings (environment variables, validated by :mod:`sglang_ascend_hybrid.envs`)
are shown as ``INVALID: ...`` in the Settings section and repeated as one
``problem:`` line each, on stdout after the report and on stderr; doctor then exits
with status 2 (0 otherwise), never with a traceback.  An invalid
``SGLANG_ASCEND_HYBRID_DISABLE`` stops the plugin from registering at all, so doctor
does not load the plugins then (a server would log the same error and run without
the plugin).
"""

from __future__ import annotations

import glob
import os
import platform
import sys
from typing import TextIO

from sglang_ascend_hybrid import __version__, patches
from sglang_ascend_hybrid.envs import ENV, effective_settings, problems
from sglang_ascend_hybrid.patches.releases import installed_version, sglang_version_problem

DIFFUSION_LOADER = "sglang.multimodal_gen.runtime.platforms.plugins.load_plugins"


def qualified_op(op: str) -> str:
    """The name doctor shows for seam op ``op``: a Python entry as its seam name ``module:attr``
    (sgl-kernel-npu defines ``chunk_gated_delta_rule_npu`` in both ``fla.chunk`` and
    ``fla.chunk_gated_delta_rule_npu``: a bare attribute would not say which), a torch op as
    ``torch.ops.npu.<name>``."""
    return op if ":" in op else f"torch.ops.npu.{op}"


def cann_version() -> str | None:
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        home = os.environ.get(var)
        if not home:
            continue
        for path in glob.glob(os.path.join(home, "*", "ascend_toolkit_install.info")) + glob.glob(
            os.path.join(home, "ascend_toolkit_install.info")
        ):
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("version="):
                        return line.split("=", 1)[1].strip()
        return f"found at {home} (version file not found)"
    return None


def collect() -> dict:
    """Everything doctor prints, as data (also used by tests)."""
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.patches.status import STATUS

    versions = {
        "python": platform.python_version(),
        "sglang-ascend-hybrid": __version__,
        "torch": installed_version("torch"),
        "sglang": installed_version("sglang"),
        "torch_npu": installed_version("torch_npu") or installed_version("torch-npu"),
        "sgl-kernel-npu": installed_version("sgl-kernel-npu") or installed_version("sgl_kernel_npu"),
        "CANN": cann_version(),
    }
    setting_problems = problems()
    if ENV.DISABLE.problem():
        load_errors = [f"plugin not loaded: {ENV.DISABLE.problem()} (SGLang would fail to register the plugin)"]
    else:
        load_errors = _load_plugins_like_sglang()
    from sglang_ascend_hybrid.ops import catalog

    ops = {d.op: seam.available(d.op) for d in catalog.device_ops()}  # every op a ladder's rung calls
    status = [_patch_state(p, STATUS) for p in patches.PATCHES]
    from sglang_ascend_hybrid.tools import kernel_report

    try:
        kernels = kernel_report.report()
    except Exception as exc:  # never crash doctor
        kernels = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "versions": versions,
        "release": sglang_version_problem(versions["sglang"]) or f"SGLang {versions['sglang']} is a tested release",
        "device_ops": ops,
        "kernels": kernels,
        "patches": status,
        "summary": STATUS.summary(),
        "pairing": collect_pairing(),
        "probes": collect_probes(),
        "settings": effective_settings(),
        "setting_problems": setting_problems,
        "load_errors": load_errors,
    }


# ------------------------------------------------------------ sgl-kernel-npu pairing

def collect_pairing() -> dict:
    """Each sgl_kernel_npu import of the installed SGLang and its state in the installed
    sgl_kernel_npu (:mod:`sglang_ascend_hybrid.tools.pairing`), as data."""
    from sglang_ascend_hybrid.tools import pairing

    try:
        report = pairing.check()
    except Exception as exc:  # never crash doctor
        return {"error": f"{type(exc).__name__}: {exc}"}
    skipped = [{"file": s.file, "reason": s.reason} for s in report.skipped]
    if not report.installed:
        return {"installed": False, "imports": len(report.imports),
                "files": len({i.file for i in report.imports}), "skipped": skipped}
    text = pairing.message_of_each(report.records)
    # "import" is always module-qualified (``module:attr``): sgl-kernel-npu defines one name in two modules
    rows = [{"state": r.state, "import": r.imp.what, "file": r.imp.file, "line": r.imp.line,
             "families": list(pairing.families_needing(r.imp.file)), "lazy": r.imp.lazy,
             "guarded": r.imp.guarded, "detail": r.detail, "path": r.path, "message": text.get(r, "")}
            for r in report.records]
    return {"installed": True, "origin": report.kernel_origin, "rows": rows, "skipped": skipped}


def _render_skipped(data: dict, w) -> None:
    for s in data.get("skipped", []):
        w(f"  {'skipped':14s} {s['file']}: {s['reason']} (its sgl_kernel_npu imports are not checked)\n")


def render_pairing(data: dict, w) -> None:
    from sglang_ascend_hybrid.tools.pairing import NOT_INSTALLED

    w("\nsgl-kernel-npu pairing\n")
    if "error" in data:
        w(f"  could not be checked ({data['error']})\n")
        return
    if not data.get("installed"):
        w(f"  {NOT_INSTALLED} (SGLang imports it {data.get('imports', 0)} times in "
          f"{data.get('files', 0)} files)\n")
        _render_skipped(data, w)
        return
    rows = data["rows"]
    counts = {s: sum(1 for r in rows if r["state"] == s) for s in dict.fromkeys(r["state"] for r in rows)}
    skipped = data.get("skipped", [])
    w(f"  sgl_kernel_npu at {data['origin']}: {len(rows)} imports, "
      + ", ".join(f"{n} {s}" for s, n in counts.items())
      + (f"; {len(skipped)} SGLang files skipped" if skipped else "") + "\n")
    _render_skipped(data, w)
    last = ""
    for r in rows:
        notes = [f"needed by {'/'.join(r['families'])}"] if r["families"] else []
        notes += ["in a function"] if r["lazy"] else []
        notes += ["optional: SGLang catches the ImportError"] if r["guarded"] else []
        note = f"  [{'; '.join(notes)}]" if notes else ""
        w(f"  {r['state']:14s} {r['import']}  <- {r['file']}:{r['line']}{note}\n")
        if r["message"] and r["message"] != last:
            w(f"      {r['message']}\n")
        elif r["state"] == "unverifiable":
            w(f"      {r['path']}: {r['detail']}\n")
        last = r["message"]


# ------------------------------------------------------------ probes

# The signatures doctor probes: the serving dims of every Qwen3.5 / 3.6 / Qwen3-Next (K = V = 128), bf16
# activations, the bf16 pool of --mamba-ssm-dtype bfloat16 and the fp32 pool the configs ask for.
DOCTOR_PROBE_POOLS = ("bfloat16", "float32")


def collect_probes() -> dict:
    """The probe verdicts (ops/probes.py): recorded ones, plus the decode-layout probe of the
    installed Triton GDN decode kernel run now where that kernel is reachable (an NPU)."""
    try:
        import torch

        from sglang_ascend_hybrid.ops import probes, seam
        from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
        from sglang_ascend_hybrid.ops.gdn.decode import probe as decode_probe

        entry = decode_contract.installed_decode_entry()
        note = ""
        if entry is None:
            note = "the installed SGLang imports no known Triton GDN decode entry"
        elif not seam.available(decode_contract.DECODE_ENTRIES[entry]):
            note = f"the {entry} Triton GDN decode kernel is not installed here: not probed"
        else:
            device = "npu" if not seam.is_emulated(decode_contract.DECODE_ENTRIES[entry]) else "cpu"
            for pool in DOCTOR_PROBE_POOLS:
                decode_probe.layout_verdict(entry, torch.bfloat16, getattr(torch, pool), 128, 128, device,
                                            before_serving=True)
        verdicts = [dict(probe=v.probe, signature=v.signature, verdict=v.verdict, usable=v.usable,
                         detail=v.detail, meaning=probes.REGISTRY[v.probe].verdicts.get(v.verdict, ""))
                    for v in probes.all_verdicts()]
        return {"decode_entry": entry, "note": note, "verdicts": verdicts}
    except Exception as exc:  # never crash doctor
        return {"error": f"{type(exc).__name__}: {exc}"}


def render_probes(data: dict, w) -> None:
    w("\nProbes (what the installed kernels were found to do)\n")
    if "error" in data:
        w(f"  could not run: {data['error']}\n")
        return
    if data.get("note"):
        w(f"  {data['note']}\n")
    for v in data.get("verdicts", []):
        w(f"  {v['probe']} {v['signature']}: {v['verdict']} -> {v['meaning']}\n")
        if v["detail"]:
            w(f"      {v['detail']}\n")


def _patch_state(p: patches.Patch, status) -> dict:
    """The recorded state of ``p``, or -- for a runtime this release never loads the
    plugin into -- what the patch is on this release."""
    row = {"name": p.name, "target": p.target, "runtime": p.runtime, "state": "not attempted", "reason": ""}
    if p.name in status.patches:
        row.update(state=status.patches[p.name].state, reason=status.patches[p.name].reason)
    elif installed_version("sglang") is not None:
        on_release = patches.release_state(p)
        if on_release is not None:
            row.update(state=on_release[0], reason=on_release[1])
    return row


def _diffusion_loader_expected() -> bool:
    """Whether this release should have the diffusion runtime's plugin loader: some
    multimodal patch targets it (a release where they are all unavailable has none)."""
    return any(p.runtime == "multimodal" and patches.release_state(p) is None for p in patches.PATCHES)


def _load_plugins_like_sglang() -> list[str]:
    """Run SGLang's own plugin loaders (ours among them) and apply hooks, as a launch would."""
    errors = []
    if installed_version("sglang") is None:
        return ["sglang is not installed: nothing to patch"]
    try:
        from sglang.srt.plugins import load_plugins

        load_plugins()
    except Exception as exc:  # report, never crash doctor
        errors.append(f"SGLang plugin loading failed: {type(exc).__name__}: {exc}")
    if _diffusion_loader_expected():
        try:
            from sglang.multimodal_gen.runtime.platforms import plugins as mm

            mm.load_plugins()
            mm.apply_plugin_hooks()
        except Exception as exc:
            errors.append(f"diffusion plugin loading failed: {type(exc).__name__}: {exc}")
    from sglang_ascend_hybrid.patches import apply

    errors.extend(apply.import_pending())  # the modules patches wait for, as a model run imports them
    return errors


def render(info: dict, out: TextIO | None = None) -> None:
    w = (out or sys.stdout).write
    w(f"sglang-ascend-hybrid {info['versions']['sglang-ascend-hybrid']} doctor\n\nVersions\n")
    for name, ver in info["versions"].items():
        w(f"  {name:22s} {ver or 'not found'}\n")
    w("\nDevice ops (through the plugin's seam)\n")
    for name, ok in info["device_ops"].items():
        w(f"  {qualified_op(name):58s} {'present' if ok else 'absent'}\n")
    from sglang_ascend_hybrid.tools import kernel_report

    kernels = info.get("kernels") or {}
    if "error" in kernels:
        w(f"\nKernels: could not be probed ({kernels['error']})\n")
    elif kernels:
        kernel_report.render(kernels, w)
    w(f"\nRelease: {info['release']}\n")
    w(f"\nPatches: {info['summary']}\n")
    for p in info["patches"]:
        reason = f"  ({p['reason']})" if p["reason"] else ""
        w(f"  {p['state']:13s} {p['name']:28s} {p['target']}{reason}\n")
    render_pairing(info.get("pairing") or {}, w)
    render_probes(info.get("probes") or {}, w)
    w("\nSettings\n")
    for name, value in info["settings"].items():
        w(f"  {name} = {value}\n")
    for err in info["load_errors"]:
        w(f"\nproblem: {err}\n")
    for err in info["setting_problems"]:
        w(f"\nproblem: {err}\n")


def _option_problem(args) -> str | None:
    tp = getattr(args, "tp", 1)
    if tp is not None and tp < 1:
        return f"--tp {tp}: expected a positive integer"
    if not getattr(args, "report", False) and (getattr(args, "model_path", None) or tp not in (None, 1)):
        return "--model-path / --tp: expected --report with them (they choose the plan in the report)"
    return None


def main(args) -> int:
    problem = _option_problem(args)
    if problem:
        print(f"sglang-ascend-hybrid doctor: error: {problem}", file=sys.stderr)
        return 2
    info = collect()
    if getattr(args, "report", False):
        from sglang_ascend_hybrid.tools.doctor_report import render_report

        render_report(info, sys.stdout.write, getattr(args, "model_path", None), getattr(args, "tp", None) or 1)
    else:
        render(info)
    for err in info["setting_problems"]:
        print(f"sglang-ascend-hybrid doctor: error: {err}", file=sys.stderr)
    return 2 if info["setting_problems"] else 0
