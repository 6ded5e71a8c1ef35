"""``sglang-ascend-hybrid doctor --report``: one Markdown block to paste into an issue.

It holds what a maintainer asks first: versions, the chip, every patch's state, every
kernel's availability and the probe verdicts, the settings in force, and (with
``--model-path``) the plan of that model at ``--tp``.  Nothing secret: of the environment
only the project's own variables and a fixed list of the ones that change which kernels run
(:data:`KERNEL_ENV`); no paths beyond a model directory's last component.
"""

from __future__ import annotations

import io
import os
from typing import Optional

# Variables outside the project's registry that change which kernel serves a call (their
# values are flags, never secrets): sgl-kernel-npu's GDN mode, SGLang's SSM dtype and Ascend
# attention kernel choices, and the plugin list SGLang loads.
KERNEL_ENV = (
    "GDN_USE_MEGA_GDN",
    "GDN_ATTN_BACKEND_TRITON",
    "SGLANG_MAMBA_SSM_DTYPE",
    "ASCEND_USE_FA",
    "ASCEND_USE_FIA",
    "SGLANG_NPU_USE_FIAS_V2_BSND",
    "SGLANG_PLUGINS",
)

FENCE = "```"


def _cell(value) -> str:
    return str(value if value not in (None, "") else "-").replace("|", "\\|").replace("\n", " ")


def _table(w, header: tuple, rows) -> None:
    w("| " + " | ".join(header) + " |\n")
    w("|" + "---|" * len(header) + "\n")
    for row in rows:
        w("| " + " | ".join(_cell(v) for v in row) + " |\n")


def model_name(model_path: str) -> str:
    """What the report shows of ``model_path``: its last component (of the absolute path, so
    ``.`` reads as the directory's name)."""
    return os.path.basename(os.path.normpath(os.path.abspath(model_path))) or os.path.normpath(model_path)


def _hide_model_path(text: str, model_path: str) -> str:
    """``text`` with every spelling of ``model_path`` (as given, normalised, absolute, resolved)
    replaced by :func:`model_name`: an error about a missing or unreadable config names the
    directory by its last component, as the rest of the report does."""
    name = model_name(model_path)
    given = model_path.rstrip("/" + os.sep) or model_path  # "dir/" + "config.json" reads "dir/config.json"
    forms = {given, os.path.normpath(model_path), os.path.abspath(model_path), os.path.realpath(model_path)}
    for form in sorted(forms, key=len, reverse=True):  # the longest first: one may contain another
        if len(form) > len(name):
            text = text.replace(form, name)
    return text


def plan_text(model_path: str, tp: int) -> str:
    """The ``plan`` rows of the model at ``model_path`` for one TP size, or its one-line error
    (naming the model directory by its last component only)."""
    from sglang_ascend_hybrid import model_families as mf
    from sglang_ascend_hybrid.tools import plan

    try:
        cfg = mf.load_config(model_path)
        mf.family(cfg)
        rows = plan.plan(cfg, (tp,))
    except (mf.ConfigError, ValueError) as exc:
        return _hide_model_path(f"plan: error: {exc}", model_path).replace("\n", " ") + "\n"
    out = io.StringIO()
    plan.render(rows, out)
    return out.getvalue()


def render_report(info: dict, write, model_path: Optional[str] = None, tp: int = 1) -> None:
    """Markdown of doctor's data ``info`` (:func:`sglang_ascend_hybrid.tools.doctor.collect`); the home
    directory in any text (an error's path) reads ``~``."""
    home = os.path.expanduser("~")

    def w(text: str) -> None:
        write(text.replace(home, "~") if len(home) > 1 else text)

    v = info["versions"]
    kernels = info.get("kernels") or {}
    w(f"### sglang-ascend-hybrid {v['sglang-ascend-hybrid']} report\n\n")
    _table(w, ("component", "version"), [
        *[(name, ver or "not found") for name, ver in v.items()],
        ("sgl-kernel-npu variant", _variant(kernels)),
        ("chip", kernels.get("chip") or "no NPU / unknown"),
    ])
    w(f"\nRelease: {info['release']}\n\n**Patches** ({info['summary']})\n\n")
    _table(w, ("state", "patch", "target", "reason"),
           [(p["state"], p["name"], f"`{p['target']}`", p["reason"]) for p in info["patches"]])
    w("\n**Kernels**\n\n")
    if "error" in kernels:
        w(f"could not be probed: {kernels['error']}\n")
    else:
        _table(w, ("kernel", "present", "variant", "rungs"),
               [(k["kernel"], "yes" if k["present"] else "no", k["variant"], ", ".join(k["used_by"]))
                for k in kernels.get("kernels", [])])
    from sglang_ascend_hybrid.tools.doctor import qualified_op

    # module-qualified: sgl-kernel-npu has a chunk_gated_delta_rule_npu in two modules
    w("\n**Device ops through the seam**: " + ", ".join(
        f"`{qualified_op(name)}` {'present' if ok else 'absent'}" for name, ok in info["device_ops"].items())
      + "\n")
    probes = info.get("probes") or {}
    w("\n**Probe verdicts**\n\n")
    if "error" in probes:
        w(f"could not run: {probes['error']}\n")
    else:
        if probes.get("note"):
            w(f"{probes['note']}\n\n")
        verdicts = probes.get("verdicts", [])
        if verdicts:
            _table(w, ("probe", "signature", "verdict", "meaning"),
                   [(p["probe"], p["signature"], p["verdict"], p["meaning"]) for p in verdicts])
        else:
            w("none recorded\n")
    pairing = info.get("pairing") or {}
    w("\n**sgl-kernel-npu pairing**: " + _pairing_line(pairing) + "\n")
    w("\n**Settings in force**\n\n")
    _table(w, ("variable", "value"), [
        *info["settings"].items(),
        *[(name, os.environ[name] if name in os.environ else "unset") for name in KERNEL_ENV],
    ])
    problems = [*info["load_errors"], *info["setting_problems"]]
    if problems:
        w("\n**Problems**\n\n" + "".join(f"- {p}\n" for p in problems))
    if model_path is not None:
        w(f"\n**Plan** of `{model_name(model_path)}` at TP={tp}\n\n{FENCE}\n{plan_text(model_path, tp)}{FENCE}\n")


def _variant(kernels: dict) -> str:
    for k in kernels.get("kernels", []):
        if "mega" in k["kernel"] and k["present"]:
            return k["variant"]
    return "no mega GDN kernel" if kernels.get("sgl_kernel_npu_version") else "not installed"


def _pairing_line(data: dict) -> str:
    if "error" in data:
        return f"could not be checked ({data['error']})"
    # SGLang files (relative to site-packages) that could not be read; their reasons may hold paths
    skipped = [s["file"] for s in data.get("skipped", [])]
    unread = f"; {len(skipped)} SGLang files skipped (unreadable): {', '.join(skipped[:8])}" if skipped else ""
    if not data.get("installed"):
        return f"sgl_kernel_npu not installed (SGLang imports it {data.get('imports', 0)} times){unread}"
    rows = data.get("rows", [])
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    missing = [r["import"] for r in rows if r["state"].startswith("missing")][:8]  # module:attr each
    return (f"{len(rows)} imports: " + ", ".join(f"{n} {s}" for s, n in counts.items())
            + (f"; not found: {', '.join(missing)}" if missing else "") + unread)
