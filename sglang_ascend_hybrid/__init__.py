"""sglang-ascend-hybrid: serve hybrid linear-attention models with SGLang on Ascend NPUs.

Layers, one folder each:

* :mod:`.plugin` -- SGLang's plugin entry points (thin; hands over to :mod:`.patches`);
* :mod:`.patches` -- every upstream symbol the plugin touches, and putting those patches in place
  (apply, on-import, deferred, strict mode, status, the cross-process definitions cache);
* :mod:`.integration` -- the SGLang-integration layer: every function a patch's ``hook=`` names
  (launch decisions, GDN hooks, the short-conv sidecar, packed attention) and the backend classes;
* :mod:`.ops` -- the plugin's device ops: the device seam, kernel ladders, contracts, references;
* :mod:`.emulators` -- CPU emulators of NPU ops with the real contracts (tests, ``selftest --device cpu``);
* :mod:`.tools` -- operator tools behind :mod:`.cli` (doctor, plan, selftest, pairing, reports);
* :mod:`.testing` -- test and rehearsal tooling, never imported by serving code.

Beside them: :mod:`.model_families` (model knowledge: what a config.json means for the plugin),
:mod:`.installed_source` (the one reader of installed SGLang / sgl-kernel-npu source),
:mod:`.envs` (the environment variables), :mod:`.logutil`.

Importing this package is cheap: it never imports ``torch_npu`` or
``sgl_kernel_npu``; those are probed lazily by :mod:`sglang_ascend_hybrid.ops.seam`.
"""

__version__ = "0.1.0"

# SGLang releases the patches were written and tested against (inclusive lower,
# exclusive upper bound; CI tests every release in it, see scripts/test.sh).
# Checked at plugin registration; pyproject.toml's "sglang" extra says the same.
TESTED_SGLANG_RANGE = (">=0.5.20", "<0.5.24")
