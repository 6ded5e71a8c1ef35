"""The contract of the sgl-kernel-npu Triton GDN decode kernels SGLang calls for plain decode.

SGLang's Ascend GDN backend (``AscendGDNAttnBackend.forward_decode`` -> ``GDNKernelDispatcher.decode``
-> ``TritonGDNKernel.decode`` in ``sglang/srt/layers/attention/linear/kernels/gdn_triton.py``) calls,
on NPU, the entry that module imports from sgl-kernel-npu as ``fused_sigmoid_gating_delta_rule_update``:

``generic``    ``sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update_npu``
               (sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/
               fused_sigmoid_gating_recurrent.py`` at 001e1888; imported by SGLang 0.5.20)
``optimized``  ``sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized.
               fused_sigmoid_gating_delta_rule_update_decode_npu`` (same repository,
               ``.../fla/fused_sigmoid_gating_recurrent_decode_optimized.py`` at 5300df95, PR #740 head;
               imported by SGLang 0.5.21 and later; in no sgl-kernel-npu tag up to 2026.08.21)

Both, as read at those commits (the rules the emulator in ``emulators/gdn_decode.py`` implements):

- Call: ``(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
  initial_state_indices, scale=None, use_qk_l2norm_in_kernel=False, cu_seqlens=None)``;
  q, k ``[1, B, H, K]``, v ``[1, B, HV, V]``, a, b ``[B, HV]`` read flat per token, cu_seqlens
  ``[N + 1]`` (SGLang passes ``query_start_loc``); sequence n covers tokens ``cu[n] .. cu[n+1]``.
- Gating in fp32: ``g = -exp(A_log) * softplus(a + dt_bias)`` with ``softplus(x) = log(1 + exp(beta x))
  / beta`` where ``beta x <= threshold``, else ``x``; ``beta = sigmoid(b)``.
- ``q / (sqrt(sum q^2) + 1e-6)`` and the same for k when ``use_qk_l2norm_in_kernel`` (not
  ``x * rsqrt(sum x^2 + eps)``); then ``q *= scale`` (default ``K ** -0.5``; ``assert scale > 0``).
- The state of sequence n is read at ``h0 + idx*HV*K*V + i_hv*K*V + o_k*V + o_v``: **key first**
  ``[N, HV, K, V]`` as the source addresses it, while SGLang's pool is value first
  ``[slots, HV, V, K]``.  ``h *= exp(g); v' = beta (v - h^T k); h += k v'^T; o = h^T q``; fp32
  inside, stored in the pool's dtype (so fp32 and bf16 pools keep their precision).
- ``idx < 0``: zero initial state, output written, state not stored.  A sequence of length 0
  writes nothing (SGLang's graph replay gives padded requests length 0 and slot 0).
- The pool is made contiguous first (``_maybe_contiguous`` / ``input_guard``): a non-contiguous pool
  is copied and the state writes land in the copy, lost.
- ``generic`` runs value heads in pairs (``BHV = 2``, grid ``HV // 2``): with an odd HV the last
  head is never computed.  ``optimized`` reads token i of a sequence's state at ``p_h0 + i*HV*K*V``
  (another slot's memory for i > 0): one token per sequence only.
- Output: ``generic`` ``[1, B, HV, V]`` (``new_empty(NK, *v.shape).squeeze(0)``), ``optimized``
  ``[N, HV, V]``, both in q's dtype.

Whether a later build of either kernel addresses the pool value first cannot be read here: the
plugin probes the installed kernel before serving (:mod:`.probe`) and uses it only on the
"value-first" verdict.
"""

from __future__ import annotations

import ast
import functools
from typing import Optional

from sglang_ascend_hybrid import installed_source
from sglang_ascend_hybrid.ops import probes

OP_DECODE_GENERIC = ("sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent:"
                     "fused_sigmoid_gating_delta_rule_update_npu")
OP_DECODE_OPTIMIZED = ("sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized:"
                       "fused_sigmoid_gating_delta_rule_update_decode_npu")
DECODE_ENTRIES = {"generic": OP_DECODE_GENERIC, "optimized": OP_DECODE_OPTIMIZED}
KERNEL_NOTES = {
    OP_DECODE_GENERIC: ("sgl_kernel_npu fused_sigmoid_gating_delta_rule_update_npu (Triton decode)",
                        "served only on a value-first layout verdict of its probe"),
    OP_DECODE_OPTIMIZED: ("sgl_kernel_npu fused_sigmoid_gating_delta_rule_update_decode_npu (Triton decode)",
                          "served only on a value-first layout verdict of its probe"),
}

# The kernels' own assertion texts (both wrappers).
DECODE_ASSERT_TEXTS = ("NK > 1 is not supported", "scale must be positive")
L2NORM_EPS = 1e-6  # q / (sqrt(sum q^2) + 1e-6)
GENERIC_HEADS_PER_PROGRAM = 2  # BHV in the generic wrapper

# Probe verdicts of the state layout.
VALUE_FIRST = "value-first"
KEY_FIRST = "key-first"
NEITHER = probes.NEITHER
REFUSED = probes.REFUSED
LAYOUT_VERDICTS = {
    VALUE_FIRST: "reads and writes the pool as SGLang lays it out ([slots, Hv, V, K]): decode uses it",
    KEY_FIRST: "addresses the pool key-first ([slots, Hv, K, V], as its readable source does): it would "
               "read every state transposed, so decode uses the next rung",
    NEITHER: "its result matches neither layout (WARNING with the errors): treated as refusing",
    REFUSED: "it raised on the probe's inputs: treated as refusing",
}


def is_decode_refusal(exc: BaseException) -> bool:
    return isinstance(exc, (AssertionError, RuntimeError)) and any(t in str(exc) for t in DECODE_ASSERT_TEXTS)


def decode_refusal_reason(entry: str, value_heads: int, pool_contiguous: bool) -> Optional[str]:
    """Why the decode kernel ``entry`` (``"generic"`` / ``"optimized"``) cannot serve correctly
    (None: it can, layout aside)."""
    if not pool_contiguous:
        return "the kernel copies a non-contiguous pool and its state writes would be lost"
    if entry == "generic" and value_heads % GENERIC_HEADS_PER_PROGRAM:
        return f"the generic kernel computes value heads in pairs and skips the last of {value_heads}"
    return None


# SGLang's module that imports the decode entry on NPU, inside the sglang package.
GDN_TRITON_SOURCE = ("srt", "layers", "attention", "linear", "kernels", "gdn_triton.py")


@functools.lru_cache(maxsize=None)
def installed_decode_entry() -> Optional[str]:
    """Which decode entry the installed SGLang's ``gdn_triton.py`` imports on NPU (read once per process
    from its source, not imported; the decode hook asks at every step): ``"generic"``, ``"optimized"``,
    or None (not found)."""
    path = installed_source.source_file("sglang", *GDN_TRITON_SOURCE)
    if path is None:
        return None
    tree = ast.parse(installed_source.read_text(path), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                for entry, op in DECODE_ENTRIES.items():
                    module, attr = op.split(":")
                    if node.module == module and alias.name == attr:
                        return entry
    return None
