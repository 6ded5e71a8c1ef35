"""Mutation testing of the modules that decide results; run by scripts/mutation.sh.

Tool: mutmut 3 (pinned in requirements/mutation.txt).  mutmut imports torch once, forks a
child per mutant and runs only the tests that reached the mutated function in its stats
run, fastest first, stopping at the first failure; so a killed mutant costs about one test.

Each group runs in its own scratch copy of the repository, ``.mutation/<group>/`` (git-ignored),
with a generated ``setup.cfg`` naming the modules it mutates and the test files that exercise
them.  Statements that only log (``log_once(...)``, ``logger.*(...)`` and the GDN ladder's
``_logged`` / ``_skipped`` / ``_log_refusal``) are not mutated: their text decides no result.

    scripts/mutation.sh                     every group, every mutant
    scripts/mutation.sh gdn conv            only these groups
    scripts/mutation.sh --sample 300 conv   a deterministic sample of 300 mutants per group
    scripts/mutation.sh --resume gdn        keep the group's copy and results, copy the current
                                            tests in, rerun every mutant not killed

Results: ``.mutation/<group>/results.json`` (status of every mutant run) and
``.mutation/summary.txt``.  Show a mutant's diff with
``(cd .mutation/<group> && ../../.venv/bin/python -m mutmut show <name>)``.
Triage of the survivors: docs/testing.md ("Mutation testing"; history in docs/history/mutation-runs.md).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".venv" / "bin" / "python"
WORK = Path(os.environ.get("MUTATION_WORK", ROOT / ".mutation"))

# Tests that cannot run on mutmut's copy of the package: they walk the source of the modules under
# test for every input check and assert that their table reaches each one, and mutmut's copy holds
# every function once per mutant (its trampolines), so they would fail before any mutant runs.  They
# check the tables' completeness, not the product; every case of those tables still runs.
NOT_UNDER_MUTMUT = (
    "tests/ops/conv/test_conv_input_errors.py::test_the_table_reaches_every_conv_input_check",
    "tests/ops/attention/test_attention_input_errors.py::test_the_table_reaches_every_attention_input_check",
)

# group -> (modules mutated, test files that exercise them)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "mode": (["sglang_ascend_hybrid/patches/mode.py"],
             ["tests/test_plugin_unit.py", "tests/test_plugin_registration.py"]),
    "plugin": (["sglang_ascend_hybrid/plugin.py", "sglang_ascend_hybrid/patches/apply.py",
                "sglang_ascend_hybrid/patches/status.py", "sglang_ascend_hybrid/patches/import_watch.py"],
               ["tests/test_plugin_unit.py", "tests/test_plugin_registration.py",
                "tests/patches/test_plugin_on_import.py", "tests/patches/test_patches_edges.py"]),
    "patches": (["sglang_ascend_hybrid/patches/__init__.py", "sglang_ascend_hybrid/patches/locate.py",
                 "sglang_ascend_hybrid/patches/model.py", "sglang_ascend_hybrid/patches/registry.py",
                 "sglang_ascend_hybrid/patches/releases.py", "sglang_ascend_hybrid/patches/render.py",
                 "sglang_ascend_hybrid/patches/verification.py",
                 "sglang_ascend_hybrid/patches/definitions_cache.py"],
                ["tests/patches/test_patches_registry.py", "tests/patches/test_patches_find_target.py",
                 "tests/test_plugin_unit.py",
                 "tests/test_plugin_registration.py", "tests/patches/test_definitions_cache.py",
                 "tests/patches/test_patches_edges.py"]),
    "gdn": (["sglang_ascend_hybrid/ops/gdn/*"],
            ["tests/ops/gdn/test_gdn_reference.py", "tests/ops/gdn/prefill/test_gdn_prefill_ladder.py",
             "tests/ops/gdn/decode/test_gdn_decode_public_op.py",
             "tests/ops/gdn/test_gdn_ladder_variants.py", "tests/ops/gdn/prefill/test_gdn_planner.py",
             "tests/ops/gdn/verify/test_gdn_verify.py",
             "tests/ops/gdn/test_gdn_reference_branches.py", "tests/ops/gdn/test_gdn_edges.py",
             "tests/ops/gdn/test_gdn_contract.py", "tests/emulators/test_gdn_mega.py",
             "tests/emulators/test_gdn_npu_chunk.py", "tests/emulators/test_gdn_npu_recurrent.py",
             "tests/emulators/test_gdn_sets.py",
             "tests/integration/test_gdn_hooks.py", "tests/integration/test_gdn_hooks_edges.py",
             "tests/ops/gdn/test_gdn_fuzz.py", "tests/ops/gdn/decode/test_gdn_pool_step.py",
             "tests/ops/gdn/verify/test_gdn_verify_cases.py", "tests/ops/gdn/test_gdn_op_count.py",
             "tests/ops/gdn/test_gdn_workspace.py",
             "tests/ops/gdn/test_gdn_builds.py", "tests/ops/gdn/prefill/test_gdn_triton_mega.py",
             "tests/ops/gdn/prefill/test_gdn_fp16_range.py",
             "tests/emulators/test_gdn_triton_chunk.py",
             "tests/ops/gdn/decode/test_gdn_decode_ladder.py", "tests/ops/gdn/prefill/test_gdn_chunk_stride_probe.py",
             "tests/ops/test_index_dtypes.py", "tests/ops/gdn/prefill/test_gdn_empty_sequences.py",
             "tests/ops/gdn/verify/test_gdn_verify_padding.py", "tests/ops/gdn/decode/test_gdn_decode_inputs.py",
             "tests/integration/test_gdn_pool_layout.py", "tests/ops/gdn/test_gdn_verb_edges.py",
             "tests/ops/test_signature.py", "tests/ops/gdn/prefill/test_gdn_qk_l2norm.py",
             "tests/ops/gdn/prefill/test_gdn_prefill_kept.py", "tests/emulators/test_gdn_gating.py",
             "tests/ops/gdn/verify/test_gdn_verify_gates.py"]),
    # the verify step's gates (the gdn-verify-gates hook's ladder) alone
    "gdn-verify-gates": (["sglang_ascend_hybrid/ops/gdn/verify_gates.py", "sglang_ascend_hybrid/ops/gdn/gating.py"],
                         ["tests/ops/gdn/verify/test_gdn_verify_gates.py",
                          "tests/integration/test_verify_gates_hook.py", "tests/tools/test_plan_verify_gates.py",
                          "tests/ops/gdn/decode/test_gdn_decode_ladder.py"]),
    # the pure-torch GDN paths alone (a quick run after changing the chunked path)
    "gdn-chunk": (["sglang_ascend_hybrid/ops/gdn/torch_impl.py", "sglang_ascend_hybrid/ops/gdn/naive.py"],
                  ["tests/ops/gdn/test_gdn_reference.py", "tests/ops/gdn/test_gdn_reference_branches.py",
                   "tests/ops/gdn/test_gdn_edges.py",
                   "tests/ops/gdn/test_gdn_fuzz.py", "tests/ops/gdn/test_gdn_op_count.py",
                   "tests/ops/gdn/test_gdn_workspace.py",
                   "tests/ops/gdn/prefill/test_gdn_prefill_ladder.py", "tests/ops/gdn/decode/test_gdn_pool_step.py"]),
    # the decode / verify state paths alone (a quick run after changing them)
    "gdn-state": (["sglang_ascend_hybrid/ops/gdn/pool_step.py", "sglang_ascend_hybrid/ops/gdn/scatter.py",
                   "sglang_ascend_hybrid/ops/gdn/verify.py"],
                  ["tests/ops/gdn/decode/test_gdn_pool_step.py", "tests/ops/gdn/verify/test_gdn_verify.py",
                   "tests/ops/gdn/verify/test_gdn_verify_padding.py",
                   "tests/ops/gdn/decode/test_gdn_decode_public_op.py",
                   "tests/ops/gdn/test_gdn_fuzz.py",
                   "tests/ops/gdn/verify/test_gdn_verify_cases.py",
                   "tests/ops/test_row_copy.py", "tests/ops/gdn/test_gdn_verb_edges.py",
                   "tests/ops/test_decisions.py"]),
    # the GDN decode ladder (its call, its probe and its contract)
    "gdn-decode": (["sglang_ascend_hybrid/ops/gdn/decode/*", "sglang_ascend_hybrid/ops/gdn/recurrent_rows.py",
                    "sglang_ascend_hybrid/ops/gdn/prefill/chunk_stride_probe.py", "sglang_ascend_hybrid/ops/probes.py"],
                   ["tests/ops/gdn/decode/test_gdn_decode_ladder.py", "tests/tools/test_doctor_probes.py",
                    "tests/ops/gdn/test_gdn_verb_edges.py",
                    "tests/ops/gdn/decode/test_gdn_decode_inputs.py",
                    "tests/ops/gdn/decode/test_gdn_decode_public_op.py",
                    "tests/ops/gdn/prefill/test_gdn_chunk_stride_probe.py",
                    "tests/ops/gdn/prefill/test_gdn_triton_mega.py", "tests/ops/test_decisions.py",
                    "tests/emulators/test_gdn_gating.py"]),
    "conv": (["sglang_ascend_hybrid/ops/conv/api.py", "sglang_ascend_hybrid/ops/conv/naive.py",
              "sglang_ascend_hybrid/ops/conv/dispatch.py", "sglang_ascend_hybrid/ops/conv/signature.py",
              "sglang_ascend_hybrid/ops/conv/contract.py", "sglang_ascend_hybrid/ops/conv/inputs.py",
              "sglang_ascend_hybrid/ops/conv/torch_impl.py", "sglang_ascend_hybrid/ops/row_copy.py",
              "sglang_ascend_hybrid/ops/conv/weights.py"],
             ["tests/ops/conv/test_causal_conv1d.py", "tests/ops/test_row_copy.py",
              "tests/ops/conv/test_conv_weights.py",
              "tests/ops/conv/test_causal_conv1d_dispatch.py",
              "tests/ops/conv/test_causal_conv1d_torch_rungs.py",
              "tests/ops/conv/test_causal_conv1d_fuzz.py", "tests/ops/conv/test_causal_conv1d_ladder.py",
              "tests/integration/test_conv_hooks.py", "tests/emulators/test_causal_conv1d.py",
              "tests/integration/test_short_conv_backend.py", "tests/ops/test_index_dtypes.py",
              "tests/ops/conv/test_causal_conv1d_verify.py", "tests/ops/conv/test_conv_edges.py",
              "tests/ops/test_signature.py", "tests/ops/conv/test_conv_input_errors.py",
              "tests/ops/test_decisions.py"]),
    "packed": (["sglang_ascend_hybrid/ops/attention/api.py", "sglang_ascend_hybrid/ops/attention/dispatch.py",
                "sglang_ascend_hybrid/ops/attention/inputs.py", "sglang_ascend_hybrid/ops/attention/torch_impl.py",
                "sglang_ascend_hybrid/ops/attention/contract.py", "sglang_ascend_hybrid/ops/attention/naive.py",
                "sglang_ascend_hybrid/ops/attention/cases.py", "sglang_ascend_hybrid/ops/attention/signature.py"],
               ["tests/ops/attention/test_packed_attention.py", "tests/ops/attention/test_packed_attention_dispatch.py",
                "tests/integration/test_packed_attention_hook.py",
                "tests/ops/attention/test_packed_attention_property.py",
                "tests/ops/attention/test_packed_attention_malformed.py",
                "tests/ops/attention/test_packed_attention_fp32.py", "tests/ops/test_index_dtypes.py",
                "tests/emulators/test_fused_infer_attention.py", "tests/ops/attention/test_packed_attention_edges.py",
                "tests/ops/test_signature.py", "tests/ops/attention/test_attention_input_errors.py"]),
    "ops_core": (["sglang_ascend_hybrid/ops/seam.py", "sglang_ascend_hybrid/ops/ladder.py",
                  "sglang_ascend_hybrid/ops/catalog.py", "sglang_ascend_hybrid/ops/cpu_workspace.py",
                  "sglang_ascend_hybrid/logutil.py",
                  "sglang_ascend_hybrid/ops/host.py", "sglang_ascend_hybrid/ops/__init__.py",
                  "sglang_ascend_hybrid/ops/index_dtype.py", "sglang_ascend_hybrid/ops/errors.py",
                  "sglang_ascend_hybrid/ops/step_cache.py", "sglang_ascend_hybrid/ops/signature.py",
                  "sglang_ascend_hybrid/ops/decisions.py", "sglang_ascend_hybrid/ops/kept.py",
                  "sglang_ascend_hybrid/ops/tensors.py"],
                 ["tests/ops/test_ladder_and_seam.py", "tests/ops/conv/test_causal_conv1d_ladder.py",
                  "tests/ops/gdn/prefill/test_gdn_prefill_ladder.py",
                  "tests/ops/gdn/decode/test_gdn_decode_public_op.py", "tests/ops/gdn/test_gdn_ladder_variants.py",
                  "tests/ops/attention/test_packed_attention_dispatch.py",
                  "tests/ops/test_seam_owners.py", "tests/ops/gdn/test_gdn_builds.py",
                  "tests/ops/test_ladder_declined.py",
                  "tests/test_plugin_unit.py", "tests/tools/test_doctor_cli.py", "tests/ops/test_index_dtypes.py",
                  "tests/ops/test_env_forced_rung.py", "tests/ops/test_cpu_workspace.py",
                  "tests/ops/gdn/test_gdn_workspace.py", "tests/tools/test_kernel_report.py",
                  "tests/ops/test_bad_input.py", "tests/ops/test_ops_core_edges.py", "tests/ops/test_step_cache.py",
                  "tests/ops/gdn/verify/test_gdn_verify_padding.py", "tests/ops/test_signature.py",
                  "tests/ops/test_decisions.py", "tests/ops/conv/test_conv_weights.py",
                  "tests/ops/gdn/decode/test_gdn_decode_ladder.py", "tests/ops/conv/test_causal_conv1d_dispatch.py",
                  "tests/ops/gdn/prefill/test_gdn_prefill_kept.py", "tests/ops/test_ladder_runner.py"]),
    # the GDN pool's physical layout: the hooks' view handling, the layout module, the commit emulator
    "gdn-layout": (["sglang_ascend_hybrid/ops/gdn/pool_layout.py", "sglang_ascend_hybrid/integration/gdn_hooks.py",
                    "sglang_ascend_hybrid/emulators/mamba_state_update.py"],
                   ["tests/integration/test_gdn_pool_layout.py", "tests/emulators/test_mamba_state_update.py",
                    "tests/integration/test_gdn_entry_pool_kwargs.py", "tests/integration/test_gdn_hooks.py",
                    "tests/integration/test_gdn_hooks_edges.py", "tests/integration/test_gdn_extend_route.py",
                    "tests/integration/test_gdn_hooks_more_edges.py", "tests/integration/test_integration_edges.py",
                    "tests/integration/test_verify_gates_hook.py"]),
    # short-conv speculative decoding: the verify integration, the draft-window views, the sidecar
    "short-conv-verify": (["sglang_ascend_hybrid/integration/short_conv_verify.py",
                           "sglang_ascend_hybrid/integration/conv_state_layout.py",
                           "sglang_ascend_hybrid/integration/short_conv.py"],
                          ["tests/integration/test_short_conv_verify.py",
                           "tests/integration/test_short_conv_backend.py",
                           "tests/integration/test_short_conv_models.py",
                           "tests/ops/conv/test_causal_conv1d_verify.py", "tests/ops/conv/test_conv_edges.py",
                           "tests/integration/test_gdn_hooks_more_edges.py"]),
    "prefix-cache": (["sglang_ascend_hybrid/integration/short_conv_track.py",
                      "sglang_ascend_hybrid/integration/conv_hooks.py"],
                     ["tests/integration/test_short_conv_track.py", "tests/integration/test_conv_hooks.py",
                      "tests/integration/test_conv_hooks_edges.py", "tests/ops/conv/test_causal_conv1d_dispatch.py"]),
    # the launch defaults: the decision, its plan from a config, extra_buffer support, the resolution hook
    "launch": (["sglang_ascend_hybrid/integration/launch/*"],
               ["tests/integration/test_hooks_in_process.py", "tests/integration/test_gdn_hooks_edges.py",
                "tests/tools/test_plan_startup.py", "tests/tools/test_plan_cli.py",
                "tests/tools/test_plan_prefill_kernels.py",
                "tests/integration/test_launch_resolution.py"]),
    # the CPU emulators of the NPU ops: their own tests, and the ladder tests that run on them
    "emulators": (["sglang_ascend_hybrid/emulators/*"],
                  ["tests/emulators", "tests/ops/gdn", "tests/ops/conv", "tests/ops/attention",
                   "tests/integration/test_gdn_pool_layout.py"]),
    # the sgl-kernel-npu pairing check (doctor's section and the startup check included)
    "pairing": (["sglang_ascend_hybrid/tools/pairing/*"], ["tests/tools/pairing", "tests/tools/test_doctor_cli.py"]),
    "integration": (["sglang_ascend_hybrid/integration/*"],
                    ["tests/integration", "tests/ops/gdn/verify/test_gdn_verify.py",
                     "tests/ops/attention/test_packed_attention_dispatch.py", "tests/test_plugin_unit.py"]),
    # what the operator tools report: doctor, plan, selftest, the kernel report, the CLI
    "tools": (["sglang_ascend_hybrid/tools/doctor.py", "sglang_ascend_hybrid/tools/doctor_report.py",
               "sglang_ascend_hybrid/tools/kernel_report.py", "sglang_ascend_hybrid/tools/plan.py",
               "sglang_ascend_hybrid/tools/selftest.py", "sglang_ascend_hybrid/tools/console.py",
               "sglang_ascend_hybrid/cli.py"],
              ["tests/tools/test_doctor_cli.py", "tests/tools/test_doctor_probes.py",
               "tests/tools/test_doctor_report.py",
               "tests/tools/test_kernel_report.py", "tests/tools/test_plan_cli.py",
               "tests/tools/test_plan_decode_kernels.py",
               "tests/tools/test_plan_json_schema.py", "tests/tools/test_plan_layer_kinds.py",
               "tests/tools/test_plan_prefill_kernels.py", "tests/tools/test_plan_short_conv_verify.py",
               "tests/tools/test_plan_startup.py", "tests/tools/test_selftest.py", "tests/tools/test_cli_malformed.py",
               "tests/tools/test_cli_startup.py", "tests/tools/test_doctor_in_process.py",
               "tests/tools/test_plan_render.py", "tests/tools/test_plan_verify_gates.py"]),
    # model knowledge, the environment registry, the reader of installed source
    "families": (["sglang_ascend_hybrid/model_families.py", "sglang_ascend_hybrid/envs.py",
                  "sglang_ascend_hybrid/installed_source.py"],
                 ["tests/test_model_families.py", "tests/test_model_families_fields.py", "tests/test_envs.py",
                  "tests/test_installed_source.py", "tests/patches/test_definitions_cache.py",
                  "tests/tools/test_plan_layer_kinds.py", "tests/tools/test_plan_prefill_kernels.py",
                  "tests/integration/test_launch_resolution.py", "tests/test_plugin_registration.py"]),
}

DO_NOT_MUTATE = [r"^\s*(log_once|logger\.\w+|_logged|_skipped|_log_refusal)\("]
ALSO_COPY = ["README.md", "PATCHES.md", "CONTRIBUTING.md", "docs", "pyproject.toml", "constraints.txt", "constraints",
             "requirements",
             "scripts",
             "examples", "benchmarks"]
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
ENV = dict(TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1", TRITON_INTERPRET="1", OMP_NUM_THREADS="1")


def _env():
    env = dict(os.environ)
    env.update(ENV)
    return env


def _copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns(".venv*", ".git", ".mutation*", "__pycache__", ".hypothesis", "*.egg-info")
    for entry in ROOT.iterdir():
        if entry.name == ".git" or entry.name.startswith((".venv", ".mutation")) or entry.resolve() == WORK:
            continue
        target = dst / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, ignore=ignore, dirs_exist_ok=True)
        elif entry.is_file():
            shutil.copy2(entry, target)


def _write_config(work: Path, modules: list[str], tests: list[str]) -> None:
    existing = [t for t in tests if (ROOT / t).exists()]
    lines = ["[mutmut]", "source_paths = sglang_ascend_hybrid", "only_mutate ="]
    lines += [f"    {m}" for m in modules]
    lines += ["do_not_mutate_patterns ="] + [f"    {p}" for p in DO_NOT_MUTATE]
    lines += ["also_copy ="] + [f"    {f}" for f in ALSO_COPY if (ROOT / f).exists()]
    lines += ["pytest_add_cli_args =", "    -p", "    no:cacheprovider", "    -p", "    no:xdist", "    -q"]
    lines += [f"    --deselect={t}" for t in NOT_UNDER_MUTMUT if t.split("::")[0] in existing]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in existing]
    lines += ["timeout_multiplier = 5.0", "timeout_constant = 20.0", ""]
    (work / "setup.cfg").write_text("\n".join(lines))


_GENERATE = """
import os
from pathlib import Path
from mutmut.__main__ import (copy_src_dir, copy_also_copy_files, setup_source_paths,
                             store_lines_covered_by_tests, create_mutants)
from mutmut.mutation.trampoline import set_mutant_under_test
set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
copy_src_dir(); copy_also_copy_files(); setup_source_paths(); store_lines_covered_by_tests()
create_mutants(2)
"""


def _results(work: Path) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in glob.glob(str(work / "mutants" / "**" / "*.py.meta"), recursive=True):
        with open(meta) as f:
            out.update(json.load(f)["exit_code_by_key"])
    return out


def _status(code) -> str:
    from mutmut.stats import status_by_exit_code
    return status_by_exit_code[code]


def _sample(names: list[str], n: int) -> list[str]:
    return sorted(sorted(names, key=lambda s: hashlib.sha1(s.encode()).hexdigest())[:n])


def run_group(group: str, *, sample: int | None, resume: bool, children: int) -> dict:
    modules, tests = GROUPS[group]
    # MUTATION_TESTS narrows the selection (a --resume that re-checks survivors against new test files
    # only: a kill with fewer tests is still a kill)
    tests = os.environ.get("MUTATION_TESTS", "").split() or tests
    work = WORK / group
    start = time.time()
    if not resume or not (work / "mutants").exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        _copy_tree(work)
        _write_config(work, modules, tests)
        subprocess.run([str(PY), "-c", _GENERATE], cwd=work, env=_env(), check=True,
                       stdout=subprocess.DEVNULL)
        names = sorted(_results(work))
        if sample is not None:
            names = _sample(names, sample)
    else:  # the current tests, the same mutants: rerun every one not killed
        for t in ["tests"]:
            shutil.copytree(ROOT / t, work / t, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copytree(ROOT / t, work / "mutants" / t, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        _write_config(work, modules, tests)
        previous = json.loads((work / "results.json").read_text())["status"]
        names = sorted(n for n, s in previous.items() if s not in KILLED)
    with open(work / "run.log", "a") as log:
        if names:
            # mutmut takes the names as arguments; chunks keep the command line short
            for i in range(0, len(names), 400):
                subprocess.run([str(PY), "-m", "mutmut", "run", "--max-children", str(children), *names[i:i + 400]],
                               cwd=work, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    codes = _results(work)
    status = {n: _status(codes.get(n)) for n in names}
    total_secs = time.time() - start
    if resume:  # mutants killed before keep their verdict (a changed config may reset mutmut's)
        previous = json.loads((work / "results.json").read_text())
        merged = dict(previous["status"])
        for n, st in status.items():  # a narrower selection may know no test for a mutant: keep the old verdict
            if st in KILLED or (merged.get(n) not in KILLED and st != "no tests"):
                merged[n] = st
        status = merged
        total_secs += previous.get("seconds", 0)
    status = dict(sorted(status.items()))
    counts: dict[str, int] = {}
    for s in status.values():
        counts[s] = counts.get(s, 0) + 1
    result = dict(group=group, modules=modules, generated=len(codes), run=len(status), sample=sample,
                  seconds=round(total_secs), counts=counts, status=status)
    (work / "results.json").write_text(json.dumps(result, indent=1))
    return result


def _diff(work: Path, name: str) -> str:
    out = subprocess.run([str(PY), "-m", "mutmut", "show", name], cwd=work, env=_env(), capture_output=True,
                         text=True).stdout
    lines = [ln for ln in out.splitlines() if ln[:2] in ("- ", "+ ") or (ln[:1] in "-+" and ln[:3] not in
                                                                        ("---", "+++"))]
    return " / ".join(" ".join(ln.split()) for ln in lines)


def report(groups) -> None:
    """Markdown: counts per group, then every mutant not killed with its diff (for the triage)."""
    print("| group | generated | run | killed | not killed |")
    print("| --- | ---: | ---: | ---: | --- |")
    rows = []
    for group in groups:
        path = WORK / group / "results.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        killed = sum(1 for s in r["status"].values() if s in KILLED)
        rest = {k: v for k, v in r["counts"].items() if k not in KILLED}
        rest = {}
        for s in r["status"].values():
            if s not in KILLED:
                rest[s] = rest.get(s, 0) + 1
        print(f"| {group} | {r['generated']} | {len(r['status'])} | {killed} | {rest or '-'} |")
        rows.append(r)
    for r in rows:
        print(f"\n### {r['group']}\n")
        for name, s in r["status"].items():
            if s not in KILLED:
                print(f"- `{name.split('.', 1)[1]}` [{s}]: `{_diff(WORK / r['group'], name)}`")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("groups", nargs="*", help=f"groups (default: all): {', '.join(GROUPS)}")
    ap.add_argument("--sample", type=int, default=None, help="mutants per group (deterministic sample)")
    ap.add_argument("--resume", action="store_true", help="rerun the mutants not killed, with the current tests")
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="print the survivors of the last runs (markdown)")
    args = ap.parse_args(argv)
    if args.report:
        report(args.groups or list(GROUPS))
        return 0
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group(s) {unknown}; expected some of {list(GROUPS)}")
    WORK.mkdir(exist_ok=True)
    rows = []
    for group in args.groups or list(GROUPS):
        r = run_group(group, sample=args.sample, resume=args.resume, children=args.max_children)
        c = r["counts"]
        killed = sum(v for k, v in c.items() if k in KILLED)
        not_killed = {k: v for k, v in c.items() if k not in KILLED}
        row = (f"{group}: {r['run']} of {r['generated']} mutants run, {killed} killed, "
               f"not killed {not_killed}, {r['seconds']} s")
        print(row, flush=True)
        rows.append(row)
    with open(WORK / "summary.txt", "a") as f:
        f.write(time.strftime("%Y-%m-%d %H:%M ") + " ".join(sys.argv[1:]) + "\n" +
                "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
