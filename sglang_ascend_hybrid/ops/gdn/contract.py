"""The contracts of the GDN device kernels: what each accepts, and the texts it refuses with.

This module is the one place that states them (read from upstream source; the
emulators in :mod:`sglang_ascend_hybrid.emulators` (``gdn_*``) mirror it, and the
ladders in :mod:`.prefill.ladder`, :mod:`.decode.ladder` and :mod:`.verify` predict refusals from it).  Sources:

SKN      sgl-project/sgl-kernel-npu ``main`` f425bdf1 (tag ``2026.08.21``, wheel version ``2026.6.1``)
SKN-462  sgl-kernel-npu ff984786 (PR #462, 2026-05-20, first tag ``2026.05.01.post3``)
SKN-517  sgl-kernel-npu 12f136d3 (PR #517, 2026-05-28, in no tag alone)
SKN-533  sgl-kernel-npu 3558cea0 (PR #533, 2026-06-03, tags ``2026.6.0`` .. ``2026.08.21``)
SKN-747  sgl-kernel-npu PR #747 ("add chunk gdn kernel ...", merged after 2026-08-24).  Its merge
         commit is in no stored version (the mirror's ``main`` ends at f425bdf1, 2026-08-21), so the
         op is read at the PR's last readable heads, which have what the merged head is described
         to have (no host copy of ``actual_seq_lengths``, no chunk_state size check, registration
         outside ``SGL_KERNEL_ENABLE_A3_ONLY_OPS``):
         host ``csrc/chunk_gated_delta_rule/op_host/chunk_gated_delta_rule.cpp`` at sgl-project/
         sgl-kernel-npu b878a61a and at zhaozx-cn/sgl-kernel-npu 0a96db2f (branch ``add_chunkgdn_0820``,
         "remove to cpu", 2026-08-21; the same checks, b878a61a only reformatted); schema and
         registration ``csrc/pytorch_extensions.cpp`` ~155-158 and ~205 (outside the A3-only
         blocks), build ``csrc/CMakeLists.txt`` ~43 (host in the common list) and ~128-138 (arch22
         kernel, or arch35 for ``ascend950*``), all at 0a96db2f; kernel ``op_kernel/arch22/
         chunk_gated_delta_rule.h`` (``Process`` ~212-243, chunk_state view ~163-166), ``_stage1.h``
         (``gCumSum``: the kernel sums g itself) and ``_stage2.h`` (``CalGCumExp`` ~145-177) at
         0a96db2f; wrapper ``python/.../fla/chunk_gated_delta_rule_npu.py`` at e26fe891.
         Not modelled: the older PR heads c811ba3f / feedb89 (host copies ``actual_seq_lengths``
         to the CPU, checks every length > 0 and their sum, chunk_state >= ceil(T/64) + B) and
         dccae703 (the same, chunk_state >= sum ceil(len/64)): no sgl-kernel-npu tag up to
         2026.08.21 / 20260821 has ``csrc/chunk_gated_delta_rule`` at all, so no released wheel
         can contain a pre-merge head.
OPP      Ascend/op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/*.md``

``torch.ops.npu.chunk_gated_delta_rule`` (SKN-747 merged head, as read)
    Schema ``chunk_gated_delta_rule(Tensor query, Tensor key, Tensor value, *, Tensor? beta=None,
    Tensor? initial_state=None, Tensor? actual_seq_lengths=None, float? scale=None, Tensor? g=None,
    Tensor(c!)? chunk_state=None) -> (Tensor, Tensor)``, registered in every build (A2, A3 and
    Ascend 950).  q, k, v bf16 only; beta bf16 ``(T, Nv)`` post-sigmoid; g fp32 ``(T, Nv)``
    per-token log decay; initial_state ``[B, Nv, Dv, Dk]`` bf16 on A2/A3, fp32 only on Ascend
    950 (OPP and the host); chunk_state of the initial state's dtype, ``[rows, Nv, Dv, Dk]``;
    ``0 < Nk, Nv <= 64``, ``Nv % Nk == 0``, ``0 < Dk, Dv <= 128``, ``T > 0``, ``B > 0``.  Plain
    ``TORCH_CHECK`` texts in the host's order (:data:`NPU_CHUNK_TEXTS`).  The host reads no
    tensor value (no device-to-host sync): ``actual_seq_lengths`` is read by the kernel, which
    walks the sequences with it (arch22 ``Process``) and checks nothing -- an empty sequence
    leaves its final state unwritten (``at::empty``), lengths summing past T read and write past
    the tokens -- and chunk_state's size is not checked: the kernel writes the entering state of
    every 64-token chunk, ``sum(ceil(len / 64))`` rows sequence-major (its view of the buffer is
    ``ceil(T/64) + B`` rows, :func:`npu_chunk_min_chunk_states`).  The plugin hands over no empty
    sequence (:func:`npu_chunk_refusal_reason` with the lengths) and a chunk_state of
    ``max(chunks, ceil(T/64) + B)`` rows.
    Unknown (no device, merge commit unreadable): whether the merged head's host is exactly the
    heads read (there, 3-D beta / g -- SGLang's ``[1, T, Nv]`` -- are refused: "beta must be 2D
    (T, Nv)", "g must be 2D (T, Nv)"; the emulator is strict); whether the arch35 (Ascend 950)
    kernel treats lengths and chunk states as the arch22 one does; what a released wheel's version
    string is for the first release with the op (no readable tag has it).  The wrapper's docstring
    says scale defaults to ``1/sqrt(Dk)`` while the host's default is 1.0 (the plugin always
    passes scale), and calls g "cumulative" while the kernel sums it itself (stage 1).
``torch.ops.npu.recurrent_gated_delta_rule`` (SKN ``csrc/recurrent_gated_delta_rule/op_host/
recurrent_gated_delta_rule.cpp``, ``op_kernel/recurrent_gated_delta_rule_kernel.cpp``)
    bf16 only with no dtype check (the kernel is instantiated ``RGDR<bfloat16_t,
    bfloat16_t>`` only: other dtypes are reinterpreted silently); S <= 8 tokens per request
    (``MAX_MTP``: the kernel's buffers, not checked by the host, :data:`RECURRENT_MAX_TOKENS`;
    a deeper speculative window -- ``speculative_num_draft_tokens`` > 8 -- is refused by the
    predicate and verified on the torch rung); the host refuses with ``vStep should be bigger
    than 8, shape is too big`` when the Unified Buffer cannot hold the head dims
    (:func:`recurrent_vstep`).
``sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn`` (SKN ``csrc/mega_chunk_gdn/op_host/
mega_chunk_gdn.cpp`` ``check_shape``), :data:`MEGA_VARIANTS`
    head dim 128, packed B == 1, the wrapper casts q/k/v/beta/state to fp16 (so
    the initial state loses precision below fp16's, and any magnitude beyond 65504 -- in
    the inputs, the state or the fp16 output buffer -- becomes inf: :func:`fits_mega_range`);
    the op it wraps, ``torch.ops.npu.mega_chunk_gdn``, is A3-only (not in Ascend 950
    builds: SKN csrc/CMakeLists.txt ~61 and ~171-175); accepted head pairs depend
    on the installed release (post3 set without the ``GDN_ATTN_BACKEND_TRITON``
    hint; later sets with it); a version the contracts do not know (:data:`KNOWN_WHEEL_VERSIONS`)
    gets the pairs every known variant accepts (:data:`MEGA_STRICT`), never the newest set.
``sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu`` (Triton; SKN ``fla/chunk.py``)
    asserts q is not fp32 and beta is 3-D; h per 64 tokens.  Depending on the release and the
    environment (``GDN_USE_MEGA_GDN=1`` from #542; by default before it) it runs the mega kernel
    instead, with the mega kernel's contract (:func:`triton_mega_mode`, :func:`triton_runs_mega`);
    a version the contracts do not know is taken to run it always (mode ``"unknown"``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from packaging.version import InvalidVersion, Version

from sglang_ascend_hybrid.logutil import log_once

logger = logging.getLogger(__name__)

# The device ops' seam names (sgl-kernel-npu registers the torch.ops.npu ones on import).
OP_NPU_CHUNK = "chunk_gated_delta_rule"                                 # torch.ops.npu
OP_NPU_RECURRENT = "recurrent_gated_delta_rule"                         # torch.ops.npu
OP_MEGA = "sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn"        # Python entry
OP_TRITON = "sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu"       # Python entry (Triton)
OP_L2NORM = "sgl_kernel_npu.fla.l2norm:l2norm_fwd"                      # Python entry (Triton)
OP_GATING = "sgl_kernel_npu.fla.fused_gdn_gating:fused_gdn_gating_npu"  # Python entry (Triton)
# Python entry (Triton) SGLang's target-verify step calls; the verify-gates ladder's first rung runs the one
# its hook is handed (the original: once the hook is applied, this name resolves to the hook itself)
OP_GATING_WITHOUT_SIGMOID = "sgl_kernel_npu.fla.fused_gdn_gating:fused_gdn_gating_kernel_without_sigmoid"
# What an operator sees for each op (kernel reports): its name, and a note on its builds.
KERNEL_NOTES = {
    OP_NPU_CHUNK: ("torch.ops.npu.chunk_gated_delta_rule",
                   "sgl-kernel-npu (PR #747), every build; fp32 states only on Ascend 950"),
    OP_NPU_RECURRENT: ("torch.ops.npu.recurrent_gated_delta_rule",
                       "sgl-kernel-npu, bf16 only (not built for Ascend 950)"),
    OP_MEGA: ("sgl_kernel_npu run_mega_chunk_gdn", "absent before sgl-kernel-npu 2026.05.01.post3"),
    OP_TRITON: ("sgl_kernel_npu chunk_gated_delta_rule_npu (Triton)", ""),
    OP_L2NORM: ("sgl_kernel_npu l2norm_fwd (Triton)", "what SGLang's chunk_gdn runs on q and k first"),
    OP_GATING: ("sgl_kernel_npu fused_gdn_gating_npu (Triton)",
                "what SGLang's Ascend GDN backend runs for a step's gates; absent before sgl-kernel-npu 2026.01.09"),
    OP_GATING_WITHOUT_SIGMOID: ("sgl_kernel_npu fused_gdn_gating_kernel_without_sigmoid (Triton)",
                                "SGLang's target-verify gates; its tiling raises for most token counts that are "
                                "not a power-of-two multiple of its per-program share"),
}

PairPredicate = Callable[[int, int], bool]

# ----------------------------------------------------------------------------- mega kernel

MEGA_HEAD_DIM = 128  # SKN mega_chunk_gdn.cpp kHeadDim
# run_mega_chunk_gdn casts q/k/v/beta to fp16 itself (SKN fla/mega_chunk_gdn.py: ``t.half()``).
MEGA_INPUT_DTYPES = (torch.float16, torch.bfloat16)
# The state the mega kernel keeps (initial_state.half() in the wrapper): a pool of higher
# precision would be rounded silently, so the mega rung never serves fp32 states.
MEGA_STATE_DTYPE = torch.float16
MEGA_HINT = "Try running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1."
MEGA_PAIR_TEXT = "unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair"
# Every check_shape text (SKN mega_chunk_gdn.cpp; SKN-462 has the same texts, without the hint).
MEGA_CHECK_TEXTS = (
    "q must have shape [B, T, Hg, D]", "k must have shape [B, T, Hg, D]", "v must have shape [B, T, H, D]",
    "g must have shape [B, T, H]", "beta must have shape [B, T, H]",
    "mega_chunk_gdn currently supports packed B=1 input", "q and k must have the same shape",
    "q/k and v sequence lengths must match", MEGA_PAIR_TEXT, "mega_chunk_gdn supports head dimension 128",
    "g and beta must use packed B=1 layout", "g/beta sequence lengths must match q",
    "g/beta must use the same NumValueHeads as v", "q must be float16", "k must be float16",
    "v must be float16", "beta must be float16", "g must be float32", "cu_seqlens must be int32",
    "q, k, and v must be contiguous", "g, beta, and cu_seqlens must be contiguous",
    "initial_state must have shape [N, H, D, D]", "initial_state.size(0) must match cu_seqlens sequences",
    "initial_state.size(1) must match NumValueHeads", "initial_state must use head dimensions 128 x 128",
    "initial_state must be float16", "initial_state must be contiguous",
)


@dataclass(frozen=True)
class MegaVariant:
    """One released behaviour of the mega kernel's host check."""

    name: str
    first_tag: str
    source: str
    hint: bool                                  # refusal texts end with MEGA_HINT
    value_heads: frozenset = frozenset()        # Hv set with Hv % Hk == 0 (SKN-517, SKN-533)
    pairs: frozenset = frozenset()              # explicit compiled pairs (SKN-462)

    def supports(self, value_heads: int, key_heads: int) -> bool:
        if key_heads <= 0 or value_heads <= 0:
            return False
        if self.pairs:
            return (value_heads, key_heads) in self.pairs
        return value_heads % key_heads == 0 and value_heads in self.value_heads

    @property
    def max_value_heads(self) -> int:
        """The most value heads one launch can have (bounds the head planner's search)."""
        return max([hv for hv, _ in self.pairs] or list(self.value_heads) or [1])

    def refusal_text(self, message: str) -> str:
        return f"{message} {MEGA_HINT}" if self.hint else message


# SKN-462: host is_supported_head_pair (global Hk 16, TP in {1,2,4,8}, global Hv in {16,32,48,64}),
# then the kernel dispatch instantiates only these pairs (MACRO list) and refuses the rest with the
# same text.  No hint in any text.
MEGA_POST3 = MegaVariant("post3", "2026.05.01.post3", "sgl-kernel-npu ff984786 (#462)", hint=False,
                         pairs=frozenset({(16, 16), (32, 16), (48, 16), (64, 16), (16, 8), (32, 8), (16, 4)}))
MEGA_PR517 = MegaVariant("pr517", "(no tag)", "sgl-kernel-npu 12f136d3 (#517)", hint=True,
                         value_heads=frozenset({16, 24, 32, 48, 64}))
MEGA_CURRENT = MegaVariant("current", "2026.6.0", "sgl-kernel-npu 3558cea0 (#533)", hint=True,
                           value_heads=frozenset({8, 12, 16, 24, 32, 48, 64}))
MEGA_VARIANTS = (MEGA_CURRENT, MEGA_PR517, MEGA_POST3)
# What an sgl-kernel-npu version the contracts do not know is taken to accept: only the pairs every known
# variant accepts (today exactly post3's compiled list), with the current texts.  Not a release.
MEGA_STRICT = MegaVariant(
    "strictest known", "(none)", "the pairs every known variant accepts", hint=True,
    pairs=frozenset((hv, hk) for hv in range(1, 65) for hk in range(1, hv + 1)
                    if all(v.supports(hv, hk) for v in MEGA_VARIANTS)))


def version_key(text: str) -> tuple:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


# The wheel versions the contracts know: ``config.ini`` ``[global] version`` (setup.py's version, what
# the installed metadata reports, PEP 440-normalised: ``2026.05.01`` -> ``2026.5.1``) at every readable
# sgl-kernel-npu tag (``git show <tag>:config.ini``, tags 20250802 .. 2026.08.21 / 20260821, main
# f425bdf1), with the tags that report it.  Before config.ini (c8d3516f, #253) setup.py's default was
# ``os.getenv("VERSION", "0.1.0")``.  Any other version -- newer (SGLang's CI pairs 0.5.23 with
# 2026.9.0.post4 / post5, in no readable tag), in between, with a pre / post / dev / local label, or
# unparseable -- is unknown: the version tables below then take the strictest known contract,
# never their newest row, and say so once.
KNOWN_WHEEL_VERSIONS = {
    "0.1.0": "tags 20250908 .. 20251206 built without VERSION (no mega kernel)",
    "2025.12.14": "tags 20251214, 2025.12.22 (no mega kernel)",
    "2025.12.24": "tag 2025.12.24 (no mega kernel)",
    "2025.12.25": "tags 2025.12.25 .. 2026.01.09 (no mega kernel)",
    "2026.01.12": "tags 2026.01.12 .. 2026.01.28 (no mega kernel)",
    "2026.02.01": "tags 2026.02.01 .. 2026.02.01.post2 (no mega kernel)",
    "2026.03.01": "tags 2026.03.01 .. 2026.04.15.rc4 (no mega kernel)",
    "2026.05.01": "tags 2026.05.01 .. 2026.05.01.post3 (the mega kernel in post3 only: ff984786, #462)",
    "2026.6.0": "tag 2026.6.0 (3558cea0, #533; the Triton entry runs the mega kernel by default)",
    "2026.6.1": "tags 2026.6.1 .. 2026.08.21, 20260821, 2026.06.15.post1 / .post2 (ac3a564f, #542: mega opt-in)",
}


def _release(version: Version) -> tuple:
    rel = tuple(version.release)
    while len(rel) > 1 and rel[-1] == 0:
        rel = rel[:-1]
    return rel


_KNOWN_RELEASES = frozenset(_release(Version(v)) for v in KNOWN_WHEEL_VERSIONS)


def known_release(version: str) -> Optional[tuple]:
    """The release tuple (trailing zeros dropped) of ``version`` when it is one of
    :data:`KNOWN_WHEEL_VERSIONS`, else None (unknown: newer, in between, labelled, unparseable)."""
    try:
        parsed = Version(version)
    except (InvalidVersion, TypeError):
        return None
    if parsed.pre or parsed.post is not None or parsed.dev is not None or parsed.local:
        return None
    rel = _release(parsed)
    return rel if rel in _KNOWN_RELEASES else None


def _assumed(table: str, version: str, assumption: str) -> None:
    """Say once per table and version which contract an unknown ``version`` was given."""
    if known_release(version) is None:
        what = f"is not a version the GDN contracts know (known: {', '.join(KNOWN_WHEEL_VERSIONS)})"
    else:
        what = "is a release without the mega kernel, so it does not describe an installed one"
    log_once(logger, ("sgl-kernel-npu-unknown-version", table, version),
             "sglang-ascend-hybrid: sgl-kernel-npu %r %s; %s: %s", version, what, table, assumption,
             level=logging.WARNING)


def mega_variant(version: Optional[str] = None) -> MegaVariant:
    """The mega-kernel variant of an installed sgl-kernel-npu ``version`` (default: the seam's).
    The wheel's version comes from ``config.ini`` (:data:`KNOWN_WHEEL_VERSIONS`): tags
    ``2026.05.01`` .. ``.post3`` all report ``2026.05.01`` and only post3 has the kernel, so that
    version with the kernel (the caller probes the symbol) is post3; ``2026.6.0`` and ``2026.6.1``
    (tags up to 2026.08.21, f425bdf1: the same host) have the current set.  Any other version --
    unknown, or a release without the kernel while one is installed -- gets :data:`MEGA_STRICT`
    (logged once).  No version (no sgl-kernel-npu metadata: nothing to call; emulated machines):
    the current set."""
    if version is None:
        from sglang_ascend_hybrid.ops import seam

        version = seam.kernel_package_version()
    if version is None:
        return MEGA_CURRENT
    rel = known_release(version)
    if rel is not None and rel >= (2026, 6):
        return MEGA_CURRENT
    if rel == (2026, 5, 1):
        return MEGA_POST3
    _assumed("mega_chunk_gdn head pairs", version,
             f"assuming the strictest known set, the pairs every known variant accepts {sorted(MEGA_STRICT.pairs)}")
    return MEGA_STRICT


def mega_entry(version: Optional[str] = None) -> MegaVariant:
    return mega_variant(version)


def mega_pair_predicate(version: Optional[str] = None) -> PairPredicate:
    """``(value_heads, key_heads) -> bool`` for the mega kernel of ``version``."""
    return mega_variant(version).supports


def mega_supports_layout(head_dim_k: int, head_dim_v: int, dtype: torch.dtype) -> bool:
    return head_dim_k == MEGA_HEAD_DIM and head_dim_v == MEGA_HEAD_DIM and dtype in MEGA_INPUT_DTYPES


# Largest magnitude the wrapper's fp16 casts keep finite (torch.finfo(torch.float16).max): a bf16 or
# fp32 value beyond it becomes inf in ``t.half()``, while the torch rung (fp32) stays finite.
MEGA_MAX_ABS = 65504.0


def fits_mega_range(max_abs: float) -> bool:
    """Whether inputs / an initial state of largest magnitude ``max_abs`` survive the wrapper's fp16
    casts (finite and at most :data:`MEGA_MAX_ABS`; NaN never fits)."""
    return max_abs <= MEGA_MAX_ABS  # False for NaN and inf


def is_mega_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and (MEGA_HINT in text or any(t in text for t in MEGA_CHECK_TEXTS))


# ----------------------------------------------------------------------------- npu chunk op

NPU_CHUNK_MAX_HEADS = 64
NPU_CHUNK_MAX_HEAD_DIM = 128
NPU_CHUNK_INPUT_DTYPE = torch.bfloat16
NPU_CHUNK_CHUNK = 64
# SKN-747 host TORCH_CHECK texts, in the order the host checks them (b878a61a, 0a96db2f: no length and
# no chunk_state size check; those of the pre-merge heads are in no release).
NPU_CHUNK_TEXTS = {
    # presence
    "qkv_defined": "query/key/value must be defined",
    "beta_provided": "beta must be provided",
    "state_provided": "initial_state must be provided",
    "lengths_provided": "actual_seq_lengths must be provided",
    # ranks
    "qkv_3d": "query/key/value must be 3D",
    "beta_2d": "beta must be 2D (T, Nv)",
    "state_4d": "initial_state must be 4D (B, Nv, Dv, Dk)",
    "lengths_1d": "actual_seq_lengths must be 1D (B,)",
    # dtypes (g's rank is checked with its dtype, when g is given)
    "qkv_dtype": "query/key/value must be bfloat16",
    "beta_dtype": "beta must be bfloat16",
    "state_dtype": "initial_state must be bfloat16 or float32",
    "lengths_dtype": "actual_seq_lengths must be int32",
    "g_dtype": "g must be float32",
    "g_2d": "g must be 2D (T, Nv)",
    # shapes
    "key_shape": "key shape must match query",
    "value_shape": "value shape must match (T, Nv, Dv)",
    "beta_shape": "beta shape must be (T, Nv)",
    "state_shape": "initial_state shape must be (B, Nv, Dv, Dk)",
    "lengths_size": "actual_seq_lengths size must equal initial_state dim 0",
    "positive": "dims must be positive",
    # limits
    "heads": "nk and nv must be <= 64",
    "dims": "dk and dv must be <= 128",
    "ratio": "nv must be an integer multiple of nk",
    "g_shape": "g shape must be (T, Nv)",
    # chip
    "fp32_state": "FP32 initial_state is only supported on Ascend950 (arch35)",
    # chunk_state (when given)
    "chunk_state_4d": "chunk_state must be 4D (totalChunks, Nv, Dv, Dk)",
    "chunk_state_shape": "chunk_state shape must match (totalChunks, Nv, Dv, Dk)",
    "chunk_state_dtype": "chunk_state dtype must match initial_state",
    "chunk_state_device": "chunk_state must be on the same device as query",
}
# Accepted initial_state dtypes of the host's dtype check (the chip decides fp32 later).
NPU_CHUNK_STATE_DTYPES = (torch.bfloat16, torch.float32)


def npu_chunk_state_dtypes(chip: Optional[str]) -> tuple:
    """State dtypes the chunk op takes on ``chip`` (fp32 only on Ascend 950, OPP and the host's
    ``isAscend950`` check).  An unknown chip is treated as A2/A3 (the strict answer)."""
    return NPU_CHUNK_STATE_DTYPES if chip == "950" else (torch.bfloat16,)


# Why the plugin never hands the chunk op an empty sequence (not a host text: the host does not check).
NPU_CHUNK_EMPTY_SEQUENCE = ("an empty sequence: the op does not check lengths (sgl-kernel-npu PR #747) and its "
                            "kernel leaves that sequence's final state unwritten")


def npu_chunk_min_chunk_states(total_tokens: int, num_sequences: int) -> int:
    """``ceil(T/64) + B``: the kernel's view of chunk_state (SKN-747 0a96db2f arch22
    ``chunk_gated_delta_rule.h`` ~163-166), at least the rows it writes (:func:`npu_chunk_rows_written`)
    for any lengths summing to T.  The host no longer checks the size."""
    return math.ceil(total_tokens / NPU_CHUNK_CHUNK) + num_sequences


def npu_chunk_rows_written(lengths: Sequence[int]) -> int:
    """The chunk_state rows the kernel writes: ``sum(ceil(len / 64))`` (one per 64-token chunk of each
    sequence, sequence-major; SKN-747 0a96db2f ``Process``: ``globalChunkOffset``)."""
    return sum(math.ceil(int(n) / NPU_CHUNK_CHUNK) for n in lengths if int(n) > 0)


def npu_op_supports(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int,
                    dtype: torch.dtype) -> bool:
    """Shape and input-dtype limits of ``torch.ops.npu.chunk_gated_delta_rule`` (SKN-747)."""
    return (0 < key_heads <= NPU_CHUNK_MAX_HEADS and 0 < value_heads <= NPU_CHUNK_MAX_HEADS
            and value_heads % key_heads == 0
            and 0 < head_dim_k <= NPU_CHUNK_MAX_HEAD_DIM and 0 < head_dim_v <= NPU_CHUNK_MAX_HEAD_DIM
            and dtype == NPU_CHUNK_INPUT_DTYPE)


def npu_chunk_refusal_reason(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int,
                             dtype: torch.dtype, state_dtype: Optional[torch.dtype], chip: Optional[str],
                             lengths: Optional[Sequence[int]] = None) -> Optional[str]:
    """Which host check the chunk op would fail first (its text), or None when it accepts a call
    the plugin builds (ranks, beta / g / chunk_state dtypes and shapes as the npu_chunk rung makes
    them) with q/k/v of ``dtype``, a state of ``state_dtype`` (None: the rung picks one) and
    per-sequence ``lengths`` (None: not known yet).  Same order as the host (SKN-747 b878a61a):
    dtypes, ``dims must be positive`` (T and B too), heads / dims / ratio, the fp32-state rule.
    After those, :data:`NPU_CHUNK_EMPTY_SEQUENCE` for a length <= 0: the op takes it (no host
    check) and computes it wrongly, so the plugin must not hand it over."""
    if dtype != NPU_CHUNK_INPUT_DTYPE:
        return NPU_CHUNK_TEXTS["qkv_dtype"]
    if state_dtype is not None and state_dtype not in NPU_CHUNK_STATE_DTYPES:
        return NPU_CHUNK_TEXTS["state_dtype"]
    total = None if lengths is None else sum(int(x) for x in lengths)
    if (min(key_heads, value_heads, head_dim_k, head_dim_v) <= 0
            or (lengths is not None and (total <= 0 or len(lengths) == 0))):
        return NPU_CHUNK_TEXTS["positive"]
    if key_heads > NPU_CHUNK_MAX_HEADS or value_heads > NPU_CHUNK_MAX_HEADS:
        return NPU_CHUNK_TEXTS["heads"]
    if head_dim_k > NPU_CHUNK_MAX_HEAD_DIM or head_dim_v > NPU_CHUNK_MAX_HEAD_DIM:
        return NPU_CHUNK_TEXTS["dims"]
    if value_heads % key_heads:
        return NPU_CHUNK_TEXTS["ratio"]
    if state_dtype is not None and state_dtype not in npu_chunk_state_dtypes(chip):
        return NPU_CHUNK_TEXTS["fp32_state"]
    if lengths is not None and any(int(x) <= 0 for x in lengths):
        return NPU_CHUNK_EMPTY_SEQUENCE
    return None


def is_npu_chunk_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(t in text for t in NPU_CHUNK_TEXTS.values())


# ----------------------------------------------------------------------------- npu recurrent op

RECURRENT_DTYPE = torch.bfloat16        # RGDR<bfloat16_t, bfloat16_t> only
# MAX_MTP: the tokens per request the op's on-chip buffers hold.  sgl-kernel-npu f425bdf1
# csrc/recurrent_gated_delta_rule/op_kernel/recurrent_gated_delta_rule_kernel.cpp line 23
# (``constexpr uint64_t MAX_MTP = 8``): the q / k / v / gamma / beta Unified-Buffer tiles are
# ``MAX_MTP * align`` elements (lines 116-175) and ``kL2Norm`` / ``qL2Norm`` keep
# ``float normFactors[MAX_MTP]`` (lines 339, 370), while ``Compute`` copies ``actual_seq_lengths[b]``
# tokens (up to S) into them.  The host (op_host/recurrent_gated_delta_rule.cpp line 81,
# ``const int64_t MAX_MTP = 8``) only sizes its vStep with it and never checks S: a longer window is
# launched and overflows the buffers (no error).  The plugin's predicate refuses S > 8 instead.
RECURRENT_MAX_TOKENS = 8
RECURRENT_DEPTH_SOURCE = ("sgl-kernel-npu f425bdf1 csrc/recurrent_gated_delta_rule: MAX_MTP = 8 in the kernel's "
                          "buffers, not checked by the host")
RECURRENT_VSTEP_TEXT = "vStep should be bigger than 8, shape is too big"
# Unified Buffer of Ascend 910B (A2) / 910_93 (A3) AI cores: 192 KiB (CANN platform data; the host
# reads it with GetCoreMemSize(UB) at run time, so the number is not in the sgl-kernel-npu source).
UB_BYTES = 192 * 1024
RECURRENT_HOST_TEXTS = (
    "MixQKV tensor must be defined", "State tensor must be defined", "MixQKV must be 3-dimensional (B, S, D)",
    "State must be 4-dimensional (N, nv, dv, dk)", "mix_qkv width mismatch", "State third dimension must match nv",
    "Beta must be 3-dimensional (B, S, nv)", "Beta batch size must match MixQKV",
    "Beta sequence length must match MixQKV", "Beta last dimension must equal nv",
    "ssm_state_indices must be 2-dimensional (B, S)", "ssm_state_indices batch size must match MixQKV",
    "ssm_state_indices sequence length must match MixQKV", RECURRENT_VSTEP_TEXT,
)


def recurrent_vstep(nv: int, dk: int, dv: int, ub_bytes: int = UB_BYTES) -> int:
    """The host's vStep (SKN recurrent_gated_delta_rule.cpp, "Calculate the size of UB"); the op
    refuses when it is below 8."""
    def align(x: int, a: int = 16) -> int:
        return (x + a - 1) & ~(a - 1)

    a_nv, a_dv, a_dk = align(nv), align(dv), align(dk)
    max_mtp = RECURRENT_MAX_TOKENS
    used = max_mtp * (4 * a_dk + 2 * a_dv) + 128 + max_mtp * (4 * a_nv + 2 * a_nv)
    used += max_mtp * (8 * a_dk + 4 * a_dv + 4 * a_nv)
    coeff = (2 + 2) * a_dk + 4 + (4 + 4) * a_dk + 4 + 4
    return (ub_bytes - used) // coeff // 8 * 8


def recurrent_refusal_reason(nv: int, nk: int, dk: int, dv: int, tokens: int, dtypes: Sequence[torch.dtype],
                             ub_bytes: int = UB_BYTES) -> Optional[str]:
    """Why the recurrent op cannot serve the call correctly (None: it can).  Only the vStep text
    is a real refusal; the others are calls the op would take and compute wrongly."""
    if any(d != RECURRENT_DTYPE for d in dtypes):
        return "the op is bf16-only and reinterprets other dtypes silently"
    if tokens < 1:
        return f"S={tokens} tokens per request: the op takes 1 to {RECURRENT_MAX_TOKENS}"
    if tokens > RECURRENT_MAX_TOKENS:
        return (f"S={tokens} tokens per request (speculative_num_draft_tokens) is more than the "
                f"{RECURRENT_MAX_TOKENS} its on-chip buffers hold ({RECURRENT_DEPTH_SOURCE}): they would overflow")
    if nk <= 0 or nv <= 0 or nv % nk:
        return "value heads must be a multiple of key heads"
    if recurrent_vstep(nv, dk, dv, ub_bytes) < 8:
        return RECURRENT_VSTEP_TEXT
    return None


def is_recurrent_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(t in text for t in RECURRENT_HOST_TEXTS)


# ----------------------------------------------------------------------------- l2norm_fwd
# sgl-project/sgl-kernel-npu python/sgl_kernel_npu/sgl_kernel_npu/fla/l2norm.py (read at f425bdf1 and
# 0c31ccf7, the same text): ``l2norm_fwd(x, eps=1e-6, output_dtype=None)`` views x as ``[-1, D]``
# (``x.view``: an input whose rows cannot be merged raises) and addresses row t at ``t * D`` whatever
# x's strides (``make_block_ptr(x, (T, D), (D, 1), ...)`` / ``x += i_t * D``): rows of a strided input
# are read from the wrong places, so only a contiguous x is handed over.  Math in fp32
# (``x * rsqrt(sum x^2 + eps)`` for D <= 512, ``1 / sqrt`` above), stored in ``output_dtype`` (default
# x's dtype, via ``empty_like``).  Its one refusal: a row of more than 64 KB.

L2NORM_MAX_ROW_BYTES = 65536
L2NORM_TEXT = "This layer doesn't support feature dim >= 64KB."


def l2norm_refusal_reason(dim: int, itemsize: int) -> Optional[str]:
    """Why ``l2norm_fwd`` refuses rows of ``dim`` elements of ``itemsize`` bytes (None: it serves them):
    its ``BD = min(65536 // itemsize, next_power_of_2(D))``, ``D > BD`` raising."""
    if dim > L2NORM_MAX_ROW_BYTES // itemsize:
        return f"rows of {dim} x {itemsize} bytes; it takes rows of at most {L2NORM_MAX_ROW_BYTES} bytes"
    return None


def is_l2norm_refusal(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and L2NORM_TEXT in str(exc)


# ----------------------------------------------------------------------------- fused_gdn_gating_npu
# sgl-project/sgl-kernel-npu python/sgl_kernel_npu/sgl_kernel_npu/fla/fused_gdn_gating.py, read at f425bdf1
# (the signature is the same in every version of the file, from its first commit ea4949d7, first tagged
# 2026.01.09): ``fused_gdn_gating_npu(A_log, a, b, dt_bias, beta=1.0, threshold=20.0) -> (g, beta_output)``.
# Host: ``batch, num_heads = a.shape`` (its only check: a must be 2-D), g ``torch.empty(1, batch, H)``
# float32, beta_output ``torch.empty(1, batch, H)`` in b's dtype.  Kernel ``fused_gdn_gating_kernel``:
# ``g = -exp(A_log) * softplus(a + dt_bias)`` in fp32 with its own softplus ``(1/beta) * log(1 + exp(beta*x))``
# where ``beta*x <= threshold``, else x; ``beta_output = sigmoid(b)``.  It addresses a[t, h] and b[t, h] at
# ``t * H + h`` and A_log / dt_bias at ``h`` whatever their strides (a strided a is read from the wrong
# places: run under Triton's CPU interpreter, a column slice of a wider tensor gave g != the reference);
# its loads and stores are masked by ``t < batch`` and ``h < H``.  Its batch tiling (``BLK_BATCHES`` a
# power of two, at most 64) serves every batch size.  SKN PR #810 (open) reports that after PR #747 it
# returns g / beta_output 2-D ``[batch, H]``: that source was not readable here, so the plugin reads g
# by its element count (``reshape(B, H)``), which either form satisfies.
# Its sibling ``fused_gdn_gating_kernel_without_sigmoid(A_log, a, b, dt_bias, beta=1.0, threshold=20.0) ->
# (g, b)`` (same file, same commit), which SGLang 0.5.20 .. 0.5.23's Ascend GDN backend runs for every
# target-verify step (``forward_extend``: ``g, beta = fused_gdn_gating_kernel_without_sigmoid(layer.A_log,
# a, b, layer.dt_bias)`` over the batch's ``B * draft`` tokens), computes the same g and returns b as given.
# Its host sets ``num_cores = 48`` and ``BLK_HEADS = 8`` and tiles ``BLK_BATCHES = cdiv(batch, cdiv(48,
# cdiv(H, 8)))`` into ``tl.arange(0, BLK_BATCHES)``, which takes powers of two only: it raises ``arange's
# range must be a power of 2`` for every other token count (e.g. H = 6: 97..144 and 193..336 tokens, i.e.
# 25..36 and 49..84 requests of 4 draft tokens), and an empty batch an empty range.  The plugin's
# gdn-verify-gates hook hands those calls to ``fused_gdn_gating_npu`` (same g, tiled in powers of two).

GATING_ARANGE_TEXT = "arange's range must be a power of 2"
WITHOUT_SIGMOID_CORES = 48   # the host's ``num_cores = 48  # num_vectorcore of NPU``
WITHOUT_SIGMOID_BLK_HEADS = 8


def without_sigmoid_tiling_reason(tokens: int, heads: int) -> Optional[str]:
    """Why ``fused_gdn_gating_kernel_without_sigmoid`` cannot tile ``tokens`` x ``heads`` gates (None: it
    can): its ``BLK_BATCHES = cdiv(tokens, cdiv(48, cdiv(heads, 8)))`` must be a power of two."""
    if tokens <= 0 or heads <= 0:
        return f"{tokens} tokens x {heads} heads: its tl.arange gets an empty range"
    per_program = -(-WITHOUT_SIGMOID_CORES // -(-heads // WITHOUT_SIGMOID_BLK_HEADS))
    block = -(-tokens // per_program)
    if block & (block - 1):
        return (f"it tiles {tokens} tokens x {heads} heads into blocks of {block} tokens and tl.arange takes "
                f"powers of two only ({GATING_ARANGE_TEXT})")
    return None


def is_gating_tiling_refusal(exc: BaseException) -> bool:
    """The without-sigmoid kernel's tiling error (Triton raises it while compiling; any wrapper type)."""
    return GATING_ARANGE_TEXT in str(exc)


def gating_refusal_reason(value_heads: int, A_log: torch.Tensor, dt_bias: torch.Tensor) -> Optional[str]:
    """Why ``fused_gdn_gating_npu`` cannot compute the gates of a layer with ``value_heads`` heads from these
    per-head weights (None: it can): the kernel reads ``A_log[h]`` / ``dt_bias[h]`` at ``h``, so each must be
    one contiguous element per head."""
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if t.numel() != value_heads or not t.is_contiguous():
            return (f"it reads {name} as {value_heads} contiguous elements (one per value head), got shape "
                    f"{tuple(t.shape)} strides {tuple(t.stride())}")
        if not t.dtype.is_floating_point:
            return f"it loads {name} as a float, got {str(t.dtype).replace('torch.', '')}"
    return None


# ----------------------------------------------------------------------------- triton chunk entry

# chunk_gated_delta_rule_npu (Triton) asserts q.dtype != float32.
TRITON_DTYPES = (torch.float16, torch.bfloat16)
TRITON_REFUSAL_TEXTS = ("does not support", "must be of shape", "is expected to be")
TRITON_CHUNK = 64  # chunk_local_cumsum(g, chunk_size=64): h per 64 tokens on the Triton path

# When the Triton entry runs the mega kernel instead (SKN fla/chunk.py, ``chunk_gated_delta_rule_fwd``;
# every condition is read with ``os.getenv`` at each call, not at import):
#   "opt_in"     ac3a564f (#542, tags 2026.6.1 ..  2026.08.21 = f425bdf1 lines 26-27, 216-222):
#                only when GDN_USE_MEGA_GDN=1;
#   "default"    12f136d3 / 3558cea0 (tag 2026.6.0): unless GDN_ATTN_BACKEND_TRITON=1;
#   "supported"  ff984786 (#462, tag 2026.05.01.post3): unless GDN_ATTN_BACKEND_TRITON=1, and only for
#                the calls ``mega_gdn_supported`` accepts (its head pairs, head dim 128, packed B == 1);
#   "never"      releases without the mega kernel;
#   "unknown"    a version the contracts do not know (:data:`KNOWN_WHEEL_VERSIONS`): taken to run the mega
#                kernel for every call, whatever the environment (the stricter contract: right either way).
# In mega mode the entry returns the mega kernel's results: a state kept in fp16 and ``h`` per
# 128-token chunk (``[1, NT128, H, K, V]``), and refuses with the mega texts.
TRITON_MEGA_ENV = "GDN_USE_MEGA_GDN"
TRITON_BACKEND_ENV = "GDN_ATTN_BACKEND_TRITON"


def triton_mega_mode(version: Optional[str] = None, *, mega_present: bool = True) -> str:
    """How the Triton entry of sgl-kernel-npu ``version`` (default: the seam's) chooses the mega
    kernel: ``"opt_in"``, ``"default"``, ``"supported"``, ``"never"`` (see above) or ``"unknown"``.
    The wheel of tags 2026.05.01 .. .post3 reports ``2026.05.01`` for all: with the mega wrapper
    present it is post3 (``mega_present``), else an earlier one; releases before it have no mega
    wrapper ("never").  ``"unknown"``: a version not in :data:`KNOWN_WHEEL_VERSIONS` (or an old one
    with a mega wrapper), logged once: the entry may run either path, so the plugin takes the
    stricter contract, the mega kernel's, for every call (:func:`triton_runs_mega`), which is right
    whichever path runs.  No version (no sgl-kernel-npu metadata): the current behaviour."""
    if version is None:
        from sglang_ascend_hybrid.ops import seam

        version = seam.kernel_package_version()
    if version is None:
        return "opt_in"
    rel = known_release(version)
    if rel is not None and rel >= (2026, 6, 1):
        return "opt_in"
    if rel is not None and rel >= (2026, 6):
        return "default"
    if rel == (2026, 5, 1):
        return "supported" if mega_present else "never"
    if rel is not None and not mega_present:
        return "never"
    _assumed("Triton entry mega mode", version,
             "assuming it may run the mega kernel for any call (mode 'unknown': the mega kernel's contract)")
    return "unknown"


def post3_python_pair_supported(value_heads: int, key_heads: int) -> bool:
    """``_head_pair_supported`` of SKN-462's ``fla/mega_chunk_gdn.py`` (what ``mega_gdn_supported``
    asks): global 16 key heads split over TP in {1, 2, 4, 8}, global value heads in {16, 32, 48, 64}.
    Wider than the pairs its kernel was compiled for (:data:`MEGA_POST3`): e.g. (6, 2) is routed to
    the kernel, which then refuses it."""
    if key_heads <= 0 or 16 % key_heads:
        return False
    tp = 16 // key_heads
    return tp in (1, 2, 4, 8) and value_heads * tp in (16, 32, 48, 64)


def triton_runs_mega(mode: str, environ, value_heads: int, key_heads: int, head_dim_k: int,
                     head_dim_v: int) -> bool:
    """Whether the Triton entry in ``mode`` runs the mega kernel for a call of these heads (packed,
    B == 1, as the plugin calls it), with the environment ``environ`` (a mapping, read as the entry
    reads ``os.getenv``)."""
    if mode == "unknown":  # a release the contracts do not know: the stricter contract, whatever the settings
        return True
    if mode == "opt_in":
        return environ.get(TRITON_MEGA_ENV, "0") == "1"
    if mode == "never" or environ.get(TRITON_BACKEND_ENV, "0") == "1":
        return False
    if mode == "default":
        return True
    return (post3_python_pair_supported(value_heads, key_heads)  # "supported": mega_gdn_supported
            and head_dim_k == MEGA_HEAD_DIM and head_dim_v == MEGA_HEAD_DIM)


# chunk_gated_delta_rule_fwd_h (SKN f425bdf1 fla/chunk_delta_h.py ~73-81) holds the state of one head in
# a fixed [128, 64] x 2 tile with masked loads: K and V above 128 are silently cut off.
TRITON_MAX_HEAD_DIM = 128


def triton_supports(value_heads: int, key_heads: int, dtype: torch.dtype, head_dim_k: int = 0,
                    head_dim_v: int = 0) -> bool:
    return (key_heads > 0 and value_heads % key_heads == 0 and dtype in TRITON_DTYPES
            and head_dim_k <= TRITON_MAX_HEAD_DIM and head_dim_v <= TRITON_MAX_HEAD_DIM)


def is_triton_refusal(exc: BaseException) -> bool:
    """A refusal of the Triton entry: its own asserts / ValueErrors, or, in mega mode, the mega
    kernel's host texts."""
    if isinstance(exc, (AssertionError, ValueError)) and any(s in str(exc) for s in TRITON_REFUSAL_TEXTS):
        return True
    return is_mega_refusal(exc)
