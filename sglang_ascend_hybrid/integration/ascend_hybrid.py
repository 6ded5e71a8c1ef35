"""The ``ascend_hybrid`` attention-backend name.

On NPU the name resolves to SGLang's own ``"ascend"`` stack during argument
resolution (:func:`record_hybrid_request`), so every ``== "ascend"`` check
upstream (Ascend KV pools, allocator, the hybrid-GDN assert) sees Ascend, while
the plugin remembers the request (strict mode, :mod:`sglang_ascend_hybrid.patches.mode`).
The plugin's fixes themselves are hooks on upstream symbols (PATCHES.md) and
are active whenever the plugin is installed.
"""

from __future__ import annotations

import logging

from sglang_ascend_hybrid.patches.mode import BACKEND_NAME, record_request

logger = logging.getLogger(__name__)

BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
DRAFT_FIELD = "speculative_draft_attention_backend"


def record_hybrid_request(server_args, previous) -> None:
    """Resolution hook wrapping SGLang's ``handle_npu_backends`` step.

    Records a request for ``ascend_hybrid`` before SGLang's NPU defaults overwrite it
    with ``"ascend"``, then checks the plugin's patches: under strict mode (the
    request, or ``SGLANG_ASCEND_HYBRID_STRICT=1``) an unapplied patch stops startup,
    otherwise it is logged as a warning.
    """
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    on_npu = cfg.device == "npu"
    fields = [f for f in (*BACKEND_FIELDS, DRAFT_FIELD) if getattr(cfg, f, None) == BACKEND_NAME]
    if fields and on_npu:
        record_request()
        if DRAFT_FIELD in fields:
            # SGLang's NPU step does not touch the draft backend: resolve it here.
            declare_resolution(server_args, "sglang_ascend_hybrid", **{DRAFT_FIELD: "ascend"})
        logger.info("sglang-ascend-hybrid: --%s ascend_hybrid runs on SGLang's Ascend stack "
                    "with the plugin's fixes in strict mode", fields[0].replace("_", "-"))
    previous(server_args)
    if on_npu:
        from sglang_ascend_hybrid.patches.apply import enforce_strict

        enforce_strict()


def create_ascend_hybrid_backend(runner):
    """Factory of the ``sglang.attention_backends`` entry ``ascend_hybrid``.

    Reached only where resolution kept the name (not on NPU, where it becomes
    ``"ascend"``): build the Ascend backend on NPU, otherwise fail clearly.
    """
    from sglang.srt.utils import is_npu

    if not is_npu():
        raise RuntimeError(
            "attention backend 'ascend_hybrid' runs only on Ascend NPUs (--device npu); "
            "this process has no NPU. Choose a backend for this device instead."
        )
    record_request()
    from sglang_ascend_hybrid.patches.apply import enforce_strict

    enforce_strict()
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    return ATTENTION_BACKENDS["ascend"](runner)
