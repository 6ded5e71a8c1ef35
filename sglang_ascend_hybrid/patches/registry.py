"""The registry data: every upstream symbol the plugin touches, one :class:`~.model.Patch` each
(rendered into PATCHES.md by :mod:`.render`), and the route helpers the entries share.

Keep each entry's ``releases`` open-ended upwards (a newer, untested release is verified, not
assumed); a helper that exists only on some releases is a :class:`~.model.Target` with its
``releases`` in ``extra_targets``.
"""

from __future__ import annotations

from sglang_ascend_hybrid.patches.model import NOT_NEEDED, UNAVAILABLE, Elsewhere, Patch, Target

RES_STEP = "sglang.srt.arg_groups.resolution_hooks"
CHUNK_GDN = "sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend.AscendGDNAttnBackend.chunk_gdn"


def _on_the_chunk_gdn_route(why: str) -> Elsewhere:
    """What a patch of the older GDN prefill route (forward_extend -> TritonGDNKernel.extend) is on
    releases that prefill through ``AscendGDNAttnBackend.chunk_gdn``: not needed, its target present
    off the route, that route verified instead."""
    return Elsewhere(state=NOT_NEEDED, why=why, route=(CHUNK_GDN,), target_present=True)


PATCHES: tuple[Patch, ...] = (
    Patch(
        name="backend-choices",
        target="sglang.srt.arg_groups.choices.ATTENTION_BACKEND_CHOICES",
        extra_targets=("sglang.srt.arg_groups.choices.DRAFT_ATTENTION_BACKEND_CHOICES",),
        kind="choices",
        hook="sglang_ascend_hybrid.integration.registry:add_backend_choices",
        why="argparse rejects --attention-backend/--prefill-/--decode-attention-backend ascend_hybrid "
            "and draft backends not in DRAFT_ATTENTION_BACKEND_CHOICES fall back to flashinfer on NPU",
        how="append every name of the sglang.attention_backends entry-point group to both lists "
            "(SGLang's own add_attention_backend_choices helper is list.extend on the first)",
        upstream="none: no upstream change proposed; SGLang offers no registration path for a third-party backend "
                 "name, so the plugin appends its own to the choice lists",
        removal="never for third-party backend names; SGLang offers no other registration path",
    ),
    Patch(
        name="backend-factories",
        target="sglang.srt.layers.attention.attention_registry.ATTENTION_BACKENDS",
        kind="backend_registry",
        hook="sglang_ascend_hybrid.integration.registry:add_backend_factories",
        why="a backend name needs a factory in ATTENTION_BACKENDS",
        how="ATTENTION_BACKENDS[name] = factory for every sglang.attention_backends entry point "
            "(existing names are never overwritten)",
        upstream="none: no upstream change proposed (search found none); SGLang does not discover "
                 "sglang.attention_backends entry points, the plugin's own group",
        removal="when SGLang discovers backend entry points itself",
    ),
    Patch(
        name="record-hybrid-request",
        target="handle_npu_backends",
        kind="resolution",
        hook="sglang_ascend_hybrid.integration.ascend_hybrid:record_hybrid_request",
        why="on NPU, set_default_server_args overwrites every attention backend with 'ascend' (and many "
            "places compare == 'ascend' for Ascend KV pools, allocator, the hybrid-GDN assert), which "
            "would erase the user's request for ascend_hybrid",
        how="resolution hook wrapping the step: maps ascend_hybrid to 'ascend' so the whole Ascend stack "
            "is used, records the request in-process and in SGLANG_ASCEND_HYBRID_STRICT (inherited by "
            "scheduler/detokenizer subprocesses), then enforces strict mode (every patch applied)",
        upstream="none: no upstream change proposed; ascend_hybrid is the plugin's own backend name, which "
                 "handle_npu_backends rewrites to ascend",
        removal="when SGLang keeps a plugin backend name through NPU resolution",
    ),
    Patch(
        name="short-conv-launch-defaults",
        target="handle_model_specific_adjustments",
        kind="resolution",
        # Upstream helpers the hook calls, checked at startup with the step.
        extra_targets=(
            "sglang.srt.arg_groups.overrides.declare_resolution",
            "sglang.srt.arg_groups.overrides.resolving_view",
            "sglang.srt.arg_groups.overrides.model_config_of",
            # (view, model_arch) before 0.5.21, (view, hf_config) since: the hook adapts.
            "sglang.srt.arg_groups.overrides.supports_mamba_cache_extra_buffer",
            # The platform half of extra_buffer support: a helper since 0.5.22, inline
            # get_platform() facts in validate_mamba_extra_buffer before.
            Target("sglang.srt.arg_groups.mamba_hook._platform_supports_mamba_cache_extra_buffer", ">=0.5.22"),
            Target("sglang.srt.runtime_context.get_platform", "<0.5.22"),
            "sglang.srt.arg_groups.mamba_hook.validate_mamba_no_buffer",
        ),
        hook="sglang_ascend_hybrid.integration.launch.resolution:launch_defaults_hook",
        why="on NPU SGLang defaults page_size to 128 while short-conv hybrids (LFM2, LFM2-MoE, LFM2-VL, "
            "ZAYA1) get the no_buffer mamba radix cache, which asserts page_size 1 ('no_buffer only supports "
            "page_size=1', or a later scheduler error for LFM2-VL). page_size 1 is not viable on Ascend (the "
            "attention kernel takes the page size as its block size and needs a multiple of 16; 128 is the "
            "tested value) and extra_buffer is not supported for these architectures, so the working "
            "configuration is page_size 128 with the radix cache off (no prefix reuse)",
        how="resolution hook declaring disable_radix_cache=True before the step, only for short-conv "
            "architectures on NPU and only when the user set neither flag; one INFO line says what changed "
            "and why; contradictory explicit flags (--mamba-radix-cache-strategy no_buffer / extra_buffer, a "
            "page size that is not a multiple of 16, --enable-hierarchical-cache) fail with one message "
            "naming the flags and the fix",
        upstream="none: no upstream issue found for the NPU page_size 128 vs no_buffer page_size 1 conflict of "
                 "short-conv hybrids",
        removal="when SGLang supports extra_buffer for LFM2 / ZAYA1 on NPU (the hook already steps aside "
                "when SGLang reports extra_buffer as supported), or its NPU defaults resolve the conflict",
    ),
    Patch(
        name="gdn-state-dtype-report",
        target="handle_model_specific_adjustments",
        kind="resolution",
        extra_targets=(
            "sglang.srt.arg_groups.overrides.resolving_view",
            "sglang.srt.arg_groups.overrides.model_config_of",
        ),
        hook="sglang_ascend_hybrid.integration.gdn_state_dtype:gdn_state_dtype_hook",
        why="GDN models on NPU get the SSM state dtype of --mamba-ssm-dtype, else of the model config (float32 "
            "for Qwen3.5 / 3.6), and which fused kernels can serve depends on it; operators need to see that "
            "before the first request",
        how="resolution hook that changes nothing: one INFO line naming the dtype, where it came from, the "
            "prefill and speculative-verify kernels it means and the flag that changes it",
        upstream="none: the plugin's own feature (a startup report); no upstream change proposed",
        removal="when SGLang reports the kernels per state dtype itself",
    ),
    Patch(
        name="short-conv-extra-buffer",
        target="sglang.srt.arg_groups.overrides.supports_mamba_cache_extra_buffer",
        # read from the source by integration/launch/extra_buffer.py (plan, the launch decision)
        extra_targets=("sglang.srt.arg_groups.overrides._MAMBA_EXTRA_BUFFER_ARCHS",),
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.launch.extra_buffer:supports_extra_buffer_around",
        why="SGLang lets only the architectures of arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS use the "
            "mamba extra_buffer radix-cache strategy; LFM2 / LFM2-MoE are not among them (SGLang's short-conv "
            "sidecar writes no snapshot), and on NPU their other strategy, no_buffer, needs page size 1, which "
            "Ascend paged attention refuses: no prefix caching at all",
        how="AROUND: on NPU (the resolving view's device) Lfm2ForCausalLM / Lfm2MoeForCausalLM answer True "
            "(the family table's radix_snapshots='plugin': the plugin's Ascend short-conv sidecar writes their "
            "conv-state snapshots); every other architecture and device gets SGLang's answer; both signatures "
            "((view, model_arch) before 0.5.21, (view, hf_config) since)",
        upstream="none: needs an Ascend short-conv sidecar that writes snapshots, which upstream lacks "
                 "(short-conv-backend); related open work on the short-conv extra_buffer track: "
                 "sgl-project/sglang#36951",
        removal="when SGLang's short-conv sidecar writes extra_buffer snapshots and lists these architectures",
    ),
    Patch(
        name="short-conv-backend",
        target="sglang.srt.layers.attention.attention_registry.attn_backend_wrapper",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.short_conv:attn_backend_wrapper_around",
        why="on NPU upstream raises NotImplementedError for ZayaConfig / Lfm2Config / Lfm2MoeConfig / "
            "Lfm2VlConfig: the conv-state sidecar (ShortConvAttnBackend.conv_state_metadata) has no Ascend "
            "implementation and the model code assumes the CUDA conv-state layout",
        how="AROUND: on NPU with one of those configs return AscendShortConvHybridAttnBackend wrapping "
            "AscendShortConvAttnBackend (ShortConvAttnBackend plumbing on AscendMambaAttnBackendBase); its "
            "conv_state_metadata hands the model strided CUDA-layout views of the window-major NPU pool (no "
            "copy, writes land in the pool; with speculative decoding on, views of the last W-1 rows of the "
            "draft window); speculative algorithms other than linear EAGLE-family chains (topk 1) are refused "
            "at construction naming the flag; the hybrid wrapper's commit "
            "(update_mamba_state_after_mtp_verify) runs SGLang's and then rolls back every further conv state "
            "(ZAYA1's prev_hs) the same way; every other model and device calls the original. On NPU it "
            "first applies the deferred patches (targets in modules that import sgl_kernel_npu), so plugin "
            "discovery never imports NPU packages",
        upstream="none: no upstream Ascend short-conv sidecar found by search (the removal note's "
                 "sgl-project/sglang#38252 did not come up, and covers LFM2 / LFM2-MoE only, not ZAYA1)",
        removal="when SGLang ships an Ascend short-conv sidecar (sgl-project/sglang#38252 covers LFM2 / "
                "LFM2-MoE only, with the newest sgl-kernel-npu; ZAYA1 is not covered)",
    ),
    Patch(
        name="conv1d-prefill",
        target="sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_fn",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.conv_hooks:causal_conv1d_fn_around",
        why="LFM2's short-conv prefill calls causal_conv1d_fn, which off CUDA runs SGLang's Triton kernel "
            "that assumes a [slots, dim, W-1] contiguous conv state; the NPU pool is window-major",
        how="AROUND (SGLang's HookRegistry also rebinds the copy imported into sglang.srt.models.lfm2): "
            "NPU tensors, window-major state views and installed emulators go to the plugin's op (sgl-kernel-"
            "npu v2 window-major ops -> torch.ops.npu.causal_conv1d -> vectorised torch); before the kernel, "
            "the Ascend short-conv sidecar's radix-cache snapshots of the tracked boundaries (the window "
            "before each boundary into its track slot); everything else calls the original",
        upstream="none: goes with short-conv-backend (no upstream Ascend short-conv sidecar found)",
        removal="with the short-conv-backend patch",
    ),
    Patch(
        name="conv1d-decode",
        target="sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_update",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.conv_hooks:causal_conv1d_update_around",
        why="LFM2's short-conv decode calls causal_conv1d_update with the same layout assumption",
        how="AROUND, same routing as conv1d-prefill; after the update, tracked decode steps copy their "
            "state into their track slot (static shapes, no host sync)",
        upstream="none: goes with short-conv-backend (no upstream Ascend short-conv sidecar found)",
        removal="with the short-conv-backend patch",
    ),
    Patch(
        name="short-conv-verify",
        target="sglang.srt.models.lfm2.shortconv_target_verify",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.short_conv_verify:shortconv_target_verify_around",
        why="LFM2 / LFM2-MoE's TARGET_VERIFY runs SGLang's Triton conv update with the CUDA-layout "
            "intermediate_conv_window tape; SGLang's NPU commit ignores that tape and rolls the window-major "
            "conv pool back with sgl-kernel-npu's conv_state_rollback, which needs the verify to have written "
            "the whole draft window ((W-1) + (draft-1) rows)",
        how="AROUND (SGLang's HookRegistry also rebinds the copy imported into sglang.srt.models.lfm2_moe): "
            "NPU tensors and window-major views go to the plugin's causal_conv1d_verify ladder "
            "(torch.ops.npu.causal_conv1d's speculative mode at width 4 -> causal_conv1d_update_v2's for fp16 "
            "-> vectorised torch) over the slot's whole draft window; everything else calls the original",
        upstream="none: goes with short-conv-backend (no upstream Ascend short-conv sidecar found; "
                 "sgl-project/sglang#38252 has no speculative decoding)",
        removal="with the short-conv-backend patch",
    ),
    Patch(
        name="zaya-cca-extend-snapshots",
        target="sglang.srt.models.zaya.cca_extend",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.short_conv_track:cca_extend_around",
        why="ZAYA1's CCA runs its own conv against the short-conv sidecar's slots (cca_extend / cca_decode), "
            "so no backend call sees its inputs: without a snapshot of its conv window and its one-token "
            "prev_hs lag at tracked boundaries the mamba extra_buffer radix cache has nothing to restore",
        how="AROUND: in a TARGET_VERIFY step published by the Ascend short-conv sidecar, the plugin's CCA "
            "verify instead (graph safe: the conv over [state, block] per request, both draft windows written "
            "for SGLang's rollback; upstream's cca_extend has no verify form); otherwise, "
            "with a step track published by the Ascend short-conv sidecar, the conv window before each "
            "tracked boundary (from qk, or the cached state) and prev_hs (the hidden state before the "
            "boundary) go into the track slots before the original overwrites the requests' slots; without "
            "a published track the original runs alone",
        upstream="none: needs SGLang's own Ascend short-conv sidecar with snapshots (none found); related: "
                 "sgl-project/sglang#36953, the ZAYA1 part of the short-conv extra_buffer series",
        removal="with the short-conv-backend patch (SGLang's own Ascend short-conv sidecar with snapshots)",
    ),
    Patch(
        name="zaya-cca-decode-snapshots",
        target="sglang.srt.models.zaya.cca_decode",
        kind="hook",
        hook_type="around",
        hook="sglang_ascend_hybrid.integration.short_conv_track:cca_decode_around",
        why="the decode half of zaya-cca-extend-snapshots: track-grid decode steps must leave their state in "
            "their track slot",
        how="AROUND: after the original, tracked rows copy the conv window and prev_hs into their track slots "
            "(one index_copy_ each, static shapes, no host sync: capture-safe)",
        upstream="none: goes with zaya-cca-extend-snapshots",
        removal="with zaya-cca-extend-snapshots",
    ),
    Patch(
        name="gdn-prefill-ladder",
        target=CHUNK_GDN,
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:ascend_chunk_gdn",
        why="GDN prefill (Qwen3.5 / Qwen3.6 / Qwen3-Next) crashes the server when the NPU kernel refuses "
            "the per-rank (value heads, key heads) pair, e.g. Qwen3.6-27B at TP=8 -> (6, 2); this method "
            "is the narrowest wrapper of torch.ops.npu.chunk_gated_delta_rule in sglang 0.5.23 and gets a "
            "gathered copy of the states (forward_extend writes the result into the pool)",
        how="AROUND, replacing the body (the original is not called: it passes the pool's state dtype and "
            "3-D beta / g, which the op's host refuses on A2/A3 for fp32 pools): the GDN prefill ladder "
            "torch.ops.npu.chunk_gated_delta_rule called as its contract requires (bf16 state, 2-D beta / g; "
            "refusals predicted from the contract or recognised), then sgl-kernel-npu's mega kernel through "
            "the head planner (native / split / pad), then the Triton chunk path, then the torch chunked "
            "path; no rung lowers the pool's state precision; exact 64-token chunk states when mamba state "
            "tracking needs them, returned in the pool's dtype (radix-cache snapshots of fp32 pools are not "
            "rounded through bf16); GDN_ATTN_BACKEND_TRITON=1 keeps its meaning; memory / device errors "
            "propagate",
        upstream="none: no upstream report found of torch.ops.npu.chunk_gated_delta_rule refusing per-rank head "
                 "pairs; the mega-kernel half is sgl-project/sgl-kernel-npu#522",
        removal="when the fused NPU op and the mega kernel accept every per-rank head pair, or SGLang "
                "ships its own fallback",
        releases=">=0.5.21",
        elsewhere=Elsewhere(
            state=NOT_NEEDED,
            why="GDN prefill takes the older route AscendGDNAttnBackend.forward_extend -> "
                "GDNKernelDispatcher.extend -> TritonGDNKernel.extend -> sgl-kernel-npu "
                "chunk_gated_delta_rule_npu (served by gdn-extend-step / gdn-extend-ladder); "
                "AscendGDNAttnBackend.chunk_gdn does not exist and is never called",
            route=(
                "sglang.srt.layers.attention.linear.gdn_backend.GDNKernelDispatcher.extend",
                "sglang.srt.layers.attention.linear.kernels.gdn_triton.chunk_gated_delta_rule_npu",
            ),
        ),
    ),
    Patch(
        name="gdn-verify-ladder",
        target=("sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend.AscendGDNAttnBackend."
                "fused_recurrent_gated_delta_rule_update"),
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:ascend_verify_update",
        why="speculative decoding (MTP) of GDN models verifies draft tokens with "
            "torch.ops.npu.recurrent_gated_delta_rule, which is bf16-only without a dtype check: with the "
            "fp32 SSM pool the Qwen3.5 / 3.6 configs ask for it reads fp32 bytes as bf16 and the output "
            "silently degrades (sglang issue #40419); this method is the narrowest wrapper of that call",
        how="AROUND, replacing the body (the original is not called): the same arguments (graph-mode and "
            "eager index tensors alike) go through the GDN verify ladder: the NPU op when every tensor is "
            "bf16, S <= 8 and its on-chip memory fits (padding rows sent to a scratch row no request names, "
            "found on the device), else an exact torch implementation of the op's semantics computing in fp32 "
            "and storing in the pool's dtype; the pool is read and written through its value-first view, "
            "decided from strides (SGLang 0.5.20 hands a transpose(-1, -2) view with speculative decoding), "
            "so the bytes move_intermediate_cache copies (raw memory) are value first; capture-safe (no host "
            "sync, static shapes); value checks only with SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1; "
            "move_intermediate_cache then commits the accepted step unchanged",
        upstream="sgl-project/sglang#40419",
        removal="when upstream fixes sglang issue #40419 (the verify path honours the SSM state dtype)",
    ),
    Patch(
        name="gdn-verify-gates",
        target="sgl_kernel_npu.fla.fused_gdn_gating.fused_gdn_gating_kernel_without_sigmoid",
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:ascend_verify_gates",
        extra_targets=("sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend."
                       "fused_gdn_gating_kernel_without_sigmoid",),
        why="speculative decoding (MTP) of GDN models computes every target-verify step's gates with this "
            "kernel over the batch's B * draft tokens; its tiling hands tl.arange a block count that is a power "
            "of two only for some token counts and raises \"arange's range must be a power of 2\" for the "
            "others (6 value heads per rank, Qwen3.6-27B at TP=8, 4 draft tokens: batches of 25-36 and 49-84 "
            "requests), so the server fails at those batch sizes and at graph capture of those buckets",
        how="AROUND (SGLang's HookRegistry rebinds the from-import alias in ascend_gdn_backend): the same "
            "arguments go through the GDN verify-gates ladder: the original where its tiling serves the token "
            "count (a build that still raises the tiling error is marked refused and the next rung serves), "
            "else sgl-kernel-npu's fused_gdn_gating_npu (the same g, tiled in powers of two), else torch; b is "
            "returned as given; decided from metadata only, capture-safe",
        upstream="none: no upstream report found; the fix upstream is a power-of-two batch tile in "
                 "sgl-kernel-npu's fused_gdn_gating_kernel_without_sigmoid, as fused_gdn_gating_npu tiles",
        removal="when sgl-kernel-npu's fused_gdn_gating_kernel_without_sigmoid tiles every batch size in every "
                "build SGLang pairs with, or SGLang's verify step computes its gates otherwise",
    ),
    Patch(
        name="gdn-decode-ladder",
        target="sglang.srt.layers.attention.linear.kernels.gdn_triton.TritonGDNKernel.decode",
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:ascend_gdn_decode",
        why="plain GDN decode on NPU (AscendGDNAttnBackend.forward_decode -> GDNKernelDispatcher.decode -> "
            "this method) calls sgl-kernel-npu's Triton decode kernel on the SSM pool, and that kernel's "
            "readable source (fla/fused_sigmoid_gating_recurrent.py, fla/fused_sigmoid_gating_recurrent_"
            "decode_optimized.py) addresses the pool key first [slots, Hv, K, V] while SGLang's pool and "
            "every other GDN kernel are value first: with K == V nothing raises and every decode step after "
            "a prefill or a verify reads the transposed state (wrong tokens, silently); this method is the "
            "narrowest symbol around that call on every supported release",
        how="AROUND, replacing the body (the original is not called): the GDN decode ladder -- the "
            "installed Triton decode kernel only where the probe gdn-decode-layout found it value-first for "
            "the pool's dtype, then torch.ops.npu.recurrent_gated_delta_rule on a gathered copy of the live "
            "rows (bf16 only; it takes the raw b), then the plugin's torch decode step; requests with slot -1 "
            "or length 0 (graph-replay padding) change no slot and get output 0; the pool through its "
            "value-first view (decided from strides); capture-safe (no host sync, static shapes, the probe "
            "runs at backend construction, where a pool layout the plugin does not recognise is refused)",
        upstream="sgl-project/sgl-kernel-npu#640",
        removal="when sgl-kernel-npu's decode kernels address the pool value first in every build SGLang "
                "pairs with (then the probe says value-first and the hook only adds the probe), or SGLang's "
                "pool and kernels agree on one layout",
    ),
    Patch(
        name="gdn-sgl-kernel-npu-chunk",
        target="sgl_kernel_npu.fla.chunk.chunk_gated_delta_rule_npu",
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:sgl_chunk_gated_delta_rule_npu",
        why="older SGLang releases route GDN prefill through GDNKernelDispatcher.extend -> this entry -> "
            "run_mega_chunk_gdn, whose check_shape raises 'unsupported mega_chunk_gdn (NumValueHeads, "
            "NumKeyHeads) pair' (failure B); inside AscendGDNAttnBackend.forward_extend gdn-extend-ladder "
            "serves that call, so this hook covers every other caller of the entry",
        how="AROUND (SGLang's HookRegistry rebinds the from-import aliases too): call the original; on a "
            "mega / Triton shape refusal run the GDN ladder and return the entry's own layouts (key-first "
            "state, per-chunk h); the indexed-pool keywords of sgl-kernel-npu PR #744 (initial_state_indices, "
            "inplace_final_state) are served on the ladder too (rows gathered, valid slots written back); a "
            "keyword it does not know reaches the entry, and a refusal then names it; passes straight through "
            "when the ladder itself calls it",
        upstream="sgl-project/sgl-kernel-npu#522",
        removal="when sgl-kernel-npu's mega kernel takes any 1 <= H <= 64 with H % Hg == 0 (upstream change) "
                "or no supported SGLang release uses this entry",
    ),
    Patch(
        name="gdn-extend-step",
        target="sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend.AscendGDNAttnBackend.forward_extend",
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:ascend_gdn_forward_extend",
        why="on releases whose GDN prefill goes forward_extend -> GDNKernelDispatcher.extend -> "
            "TritonGDNKernel.extend, the kernel call (gdn-extend-ladder) does not see the step's "
            "radix-cache tracking (forward_metadata.has_mamba_track_mask / track_ssm_h_src), which "
            "decides which per-chunk states must be exact",
        how="AROUND: the original runs unchanged, with the backend's forward_metadata published in a "
            "context variable for its duration (read by gdn-extend-ladder only)",
        upstream="none: upstream already moved Ascend GDN prefill to AscendGDNAttnBackend.chunk_gdn (0.5.21); the "
                 "patch goes when releases before it leave the supported range",
        removal="with gdn-extend-ladder",
        releases="<0.5.21",
        elsewhere=_on_the_chunk_gdn_route(
            "GDN prefill goes through AscendGDNAttnBackend.chunk_gdn, which the prefill hook "
            "(gdn-prefill-ladder) reads the step's tracking from directly"),
    ),
    Patch(
        name="gdn-extend-ladder",
        target="sglang.srt.layers.attention.linear.kernels.gdn_triton.TritonGDNKernel.extend",
        kind="hook",
        hook_type="around",
        requires=("sgl_kernel_npu",),
        hook="sglang_ascend_hybrid.integration.gdn_hooks:triton_gdn_extend",
        why="on NPU this method hands the value-first pool's rows ([N, Hv, V, K]) to sgl-kernel-npu's "
            "Triton entry, which reads and writes states key first ([N, H, K, V], FLA's layout: SKN "
            "f425bdf1 fla/chunk.py), and forward_extend writes its key-first final state and copies its "
            "key-first h into the pool, while the decode ladder and the verify op read the pool value "
            "first: with K == V nothing raises and every decode after a prefill reads transposed "
            "states; the entry also stores h in k's dtype, so an fp32 pool's radix-cache snapshots "
            "are rounded through bf16",
        how="AROUND, replacing the body inside gdn-extend-step (elsewhere the original runs): the "
            "GDN prefill ladder (the same rungs and refusal handling as gdn-prefill-ladder, the entry "
            "itself as the triton rung called in its own layout) on the pool's rows read through its "
            "value-first view; final [N, Hv, V, K] and h [1, NT, Hv, V, K] in the pool's dtype and in the "
            "order of SGLang's view of the pool (transposed for 0.5.20's speculative view), so its "
            "assignments write value-first bytes; exact for the chunks track_ssm_h_src names, None when the "
            "step tracks nothing",
        upstream="none: upstream already moved Ascend GDN prefill to AscendGDNAttnBackend.chunk_gdn (0.5.21); the "
                 "patch goes when releases before it leave the supported range",
        removal="when no supported SGLang release routes Ascend GDN prefill through "
                "GDNKernelDispatcher.extend (0.5.21 moved it to AscendGDNAttnBackend.chunk_gdn)",
        releases="<0.5.21",
        elsewhere=_on_the_chunk_gdn_route(
            "Ascend GDN prefill does not call this method (AscendGDNAttnBackend.chunk_gdn, "
            "gdn-prefill-ladder)"),
    ),
    Patch(
        name="packed-attention-one-sided",
        target="sglang.multimodal_gen.runtime.layers.attention.backends.ascend_fa.fused_infer_attention_varlen",
        kind="hook",
        hook_type="replace",
        runtime="multimodal",
        hook="sglang_ascend_hybrid.integration.packed_attention:fused_infer_attention_varlen",
        why="upstream raises NotImplementedError for a packed batch where a sequence is empty on only the "
            "query or only the key/value side (ring-attention KV-only chunks, empty query segments) and "
            "returns uninitialised tensors for all-empty batches",
        how="REPLACE through the diffusion runtime's HookRegistry (rebinds from-import copies such as "
            "AscendFAImpl's): same signature and argument checks; with no one-sided sequence the NPU op is "
            "called exactly as upstream does; otherwise KV-only sequences are dropped and query-only rows "
            "are filled with output 0 / LSE -inf around one compacted call",
        upstream="none: no upstream issue or pull request found for fused_infer_attention_varlen refusing "
                 "one-sided sequences",
        removal="when upstream's fused_infer_attention_varlen no longer refuses one-sided sequences "
                "(integration.packed_attention.upstream_needs_replacement(ascend_fa) returns False)",
        releases=">=0.5.21",
        elsewhere=Elsewhere(
            state=UNAVAILABLE,
            why="its diffusion runtime has no plugin loader (sglang/multimodal_gen/runtime/platforms/"
                "plugins.py appeared in 0.5.21) and never loads sglang.multimodal_gen.plugins entry points, "
                "so no installed package can replace fused_infer_attention_varlen there: packed batches "
                "with a sequence empty on one side still raise NotImplementedError. Use SGLang >= 0.5.21 "
                "for diffusion on Ascend",
        ),
    ),
)


def by_name(name: str) -> Patch:
    """The patch called ``name`` in the package's :data:`PATCHES` (read at call time, so a process that
    replaces ``sglang_ascend_hybrid.patches.PATCHES`` sees its own list)."""
    from sglang_ascend_hybrid import patches

    for p in patches.PATCHES:
        if p.name == name:
            return p
    raise KeyError(name)
