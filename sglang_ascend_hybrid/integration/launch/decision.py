"""The launch decision: what every supported family needs to get through SGLang's startup
resolution on NPU with default flags, as a pure function of the launch's facts.

The conflict
------------
On NPU, ``set_default_server_args`` (resolution step ``handle_npu_backends``)
sets ``page_size=128``.  Models that keep a recurrent / conv state next to the
attention KV cache need, for the radix (prefix) cache, either

* the mamba ``extra_buffer`` strategy (state snapshots at page boundaries), or
* ``page_size=1`` (``no_buffer``: only the sequence-end state exists).

SGLang 0.5.23 supports ``extra_buffer`` for the GDN families (Qwen3.5 / 3.6 /
Qwen3-Next, with the default ``--linear-attn-backend triton``) but not for the
short-conv hybrids (LFM2, LFM2-MoE, LFM2-VL, ZAYA1).  For those the mamba
radix-cache resolution picks ``no_buffer`` and stops with
``AssertionError: no_buffer only supports page_size=1.`` (LFM2 / LFM2-MoE /
ZAYA1), or -- for LFM2-VL, which the resolution does not route through the
mamba radix cache -- resolution passes and the scheduler's ``MambaComponent``
fails later with "requires page_size=1 when mamba_extra_buffer is disabled".

The choice
----------
* ``page_size=1`` is not an option on Ascend: the ``ascend`` attention backend
  passes ``page_size`` as the paged-attention block size, which FIA rejects
  unless it is a multiple of 16 (sgl-project/sglang#25169:
  "block_size should aligned to 16, but got 1"); 128 is the value upstream
  defaults to and validates (sgl-project/sglang#38196 reports 16 corrupting
  output).
* ``extra_buffer`` is rejected upstream for these architectures
  ("extra_buffer is not supported for ...; use no_buffer"): SGLang's short-conv
  sidecar writes no snapshot.  The plugin's Ascend sidecar writes them for LFM2 /
  LFM2-MoE / ZAYA1 (:mod:`..short_conv_track`), and
  :func:`~.extra_buffer.supports_extra_buffer_around` (patch ``short-conv-extra-buffer``)
  lets SGLang's resolution pick ``extra_buffer`` for them on NPU: prefix caching with
  page size 128, one INFO line naming the strategy (as for the GDN families, whose snapshots SGLang writes).
* For LFM2-VL (nobody writes its snapshots yet) the radix
  cache is disabled (``disable_radix_cache=True``, declared at the start of
  ``handle_model_specific_adjustments`` -- the step where SGLang itself declares it
  for checkpoints that cannot prefix-cache) and ``page_size`` stays 128.  Cost: no
  prefix reuse for these models.

Explicit user values are never changed.  "Explicit" is SGLang's own notion: the
record's ``_raw_input`` snapshot (what the caller asked for) differs from the
field default.  Explicit flags that cannot work together fail at resolution
with one ``ValueError`` naming the flags and the fix.

The decision is a pure function (:func:`decide`) shared by the resolution hook
(:func:`.resolution.launch_defaults_hook`) and by :func:`.planned.planned_decision`, which the
``plan`` CLI calls on a bare config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from sglang_ascend_hybrid.model_families import GDN_ARCHS, RADIX_SNAPSHOTS_BY_ARCH, SHORT_CONV_ARCHS

# Architectures this plugin serves (hf_config.architectures[0]): the family table's.
SUPPORTED_ARCHS = SHORT_CONV_ARCHS | GDN_ARCHS

# Paged attention on Ascend (FIA block_size) needs a multiple of this.
ASCEND_PAGE_ALIGN = 16

INFO_TEMPLATE = (
    "sglang-ascend-hybrid: disabled the radix cache for {arch} on NPU "
    "(page_size={page_size} kept): its {state} cache needs --page-size 1 without a mamba extra "
    "buffer, the Ascend attention backend needs a page size that is a multiple of 16, and "
    "extra_buffer is not supported for {arch}{why_no_extra}. Prefix caching is off; pass "
    "--disable-radix-cache to make this explicit."
)

PREFIX_CACHE_INFO = (
    "sglang-ascend-hybrid: prefix caching on for {arch} on NPU: radix cache with the mamba "
    "{strategy} strategy, page_size={page_size} (state snapshots at tracked boundaries written by {writer})"
)
SNAPSHOT_WRITERS = {"sglang": "SGLang's GDN backend from the plugin's prefill states",
                     "plugin": "the plugin's Ascend short-conv sidecar"}


def snapshot_writer(arch: str) -> str:
    """Who writes the prefix-cache snapshots of ``arch`` on NPU (the family table's word)."""
    return RADIX_SNAPSHOTS_BY_ARCH.get(arch, "")


class LaunchConfigError(ValueError):
    """Explicit flags that cannot work together on NPU for this model."""


@dataclass(frozen=True)
class LaunchFacts:
    """Everything :func:`decide` looks at, already resolved."""

    arch: str
    device: str = "npu"
    page_size: Optional[int] = 128  # value in effect at the hook (NPU default 128)
    page_size_explicit: bool = False
    disable_radix_cache: bool = False
    strategy: str = "auto"
    strategy_explicit: bool = False
    hierarchical_cache_explicit: bool = False
    extra_buffer_supported: bool = False
    extra_buffer_reason: str = ""  # why not, when known (e.g. linear_attn_backend)


@dataclass
class Decision:
    declare: dict[str, Any] = field(default_factory=dict)
    adjustments: list[str] = field(default_factory=list)
    info: Optional[str] = None
    error: Optional[str] = None


def _state_kind(arch: str) -> str:
    return "conv-state" if arch in SHORT_CONV_ARCHS else "recurrent-state"


def decide(f: LaunchFacts) -> Decision:
    """What to declare (or which error to raise) for one resolution."""
    d = Decision()
    if f.device != "npu" or f.arch not in SUPPORTED_ARCHS:
        return d
    if f.disable_radix_cache:
        return d  # no prefix cache: no strategy, no page-size constraint

    strategy_flag = f"--mamba-radix-cache-strategy {f.strategy}"
    page_txt = (
        f"--page-size {f.page_size}" if f.page_size_explicit else f"the NPU default page size {f.page_size}"
    )
    page = f.page_size if f.page_size is not None else 1

    if f.page_size_explicit and page % ASCEND_PAGE_ALIGN != 0:
        d.error = (
            f"sglang-ascend-hybrid: --page-size {page} cannot work for {f.arch} on NPU: the Ascend "
            f"attention backend passes the page size to paged attention as its block size, which must "
            f"be a multiple of {ASCEND_PAGE_ALIGN} (128 is the tested value). Fix: drop --page-size "
            f"(NPU default 128)"
            + ("" if f.extra_buffer_supported else "; the plugin then disables the radix cache for this model, "
               "or pass --disable-radix-cache")
            + "."
        )
        return d

    if f.extra_buffer_supported and f.strategy in ("auto", "extra_buffer", "extra_buffer_lazy"):
        # upstream resolves to extra_buffer with paged KV: works as is
        d.info = PREFIX_CACHE_INFO.format(
            arch=f.arch, strategy="extra_buffer" if f.strategy == "auto" else f.strategy, page_size=page,
            writer=SNAPSHOT_WRITERS.get(snapshot_writer(f.arch), "SGLang"))
        return d

    if f.strategy == "no_buffer" and f.strategy_explicit:
        d.error = (
            f"sglang-ascend-hybrid: {strategy_flag} conflicts with {page_txt} for {f.arch} on NPU: "
            f"no_buffer needs --page-size 1, and the Ascend attention backend needs a page size that is "
            f"a multiple of {ASCEND_PAGE_ALIGN}. Fix: "
            + (
                "drop --mamba-radix-cache-strategy (extra_buffer keeps prefix caching with page size 128)"
                if f.extra_buffer_supported
                else "drop --mamba-radix-cache-strategy (the plugin then disables the radix cache) or "
                "replace it with --disable-radix-cache"
            )
            + "."
        )
        return d

    if f.strategy in ("extra_buffer", "extra_buffer_lazy") and f.strategy_explicit:
        d.error = (
            f"sglang-ascend-hybrid: {strategy_flag} is not supported for {f.arch}"
            f"{f.extra_buffer_reason}, and no_buffer cannot work with {page_txt} on NPU (it needs "
            f"--page-size 1; Ascend paged attention needs a multiple of {ASCEND_PAGE_ALIGN}). Fix: drop "
            f"--mamba-radix-cache-strategy and pass --disable-radix-cache."
        )
        return d

    if page == 1:
        return d  # no_buffer with page 1 resolves (page 1 only reachable non-explicitly off-NPU)

    # strategy auto (or a non-explicit value): no_buffer would be picked -> conflict.
    if f.hierarchical_cache_explicit:
        d.error = (
            f"sglang-ascend-hybrid: --enable-hierarchical-cache needs the radix cache, which {f.arch} "
            f"cannot use on NPU: its {_state_kind(f.arch)} cache needs --page-size 1 without a mamba extra "
            f"buffer (extra_buffer is not supported for {f.arch}{f.extra_buffer_reason}), and the Ascend "
            f"attention backend needs a page size that is a multiple of {ASCEND_PAGE_ALIGN}. Fix: drop "
            f"--enable-hierarchical-cache."
        )
        return d

    d.declare["disable_radix_cache"] = True
    d.adjustments.append(
        f"disable_radix_cache=True (page_size={page} kept): {f.arch} needs page_size=1 for the "
        f"no_buffer mamba radix cache, Ascend paged attention needs a multiple of {ASCEND_PAGE_ALIGN}, "
        f"extra_buffer unsupported{f.extra_buffer_reason}"
    )
    d.info = INFO_TEMPLATE.format(
        arch=f.arch, page_size=page, state=_state_kind(f.arch), why_no_extra=f.extra_buffer_reason
    )
    return d
