"""Negative controls of the runtime tier: one plugin function deliberately broken inside every
process SGLang starts, chosen by ``SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK``.

A broken run must fail the comparison with transformers: that shows the runtime tier catches what
the plugin exists to prevent.  Each breakage is applied right after its plugin module is imported
(a post-import hook on ``sys.meta_path``), in the scheduler and TP processes as in the main one.

Test tooling only: nothing here runs unless the variable names a breakage.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Callable


def _ignore_saved_conv_state(module) -> None:
    """The short-conv sidecar tells the model no request has a prefix: a chunked-prefill continuation
    or a radix hit restarts its conv from zeros."""
    classes = module.backend_classes  # built on first use: SGLang is still importing here

    def broken_classes(*args, **kwargs):
        found = classes(*args, **kwargs)
        sidecar = found[0]
        if not getattr(sidecar, "_broken_by_negative_control", False):
            real = sidecar.conv_state_metadata

            def metadata(self, layer_id, forward_batch):
                meta = real(self, layer_id, forward_batch)
                if meta.has_initial_state is None:  # decode: nothing to break
                    return meta
                import torch

                return meta._replace(has_initial_state=torch.zeros_like(meta.has_initial_state),
                                     has_prefix_cpu=[False] * len(meta.has_prefix_cpu))

            sidecar.conv_state_metadata = metadata
            sidecar._broken_by_negative_control = True
        return found

    module.backend_classes = broken_classes


def _ignore_saved_ssm_state(module) -> None:
    """The GDN prefill ladder drops the gathered SSM states: a continuation starts from zeros."""
    real = module.chunk_with_states

    def no_state(*args, initial_state=None, **kwargs):
        return real(*args, initial_state=None, **kwargs)

    module.chunk_with_states = no_state


def _invert_decode_layout(module) -> None:
    """The GDN decode layout probe reports the opposite layout: a key-first Triton decode kernel is
    taken for value-first (SGLang's layout) and serves, reading every state transposed."""
    from sglang_ascend_hybrid.ops import probes
    from sglang_ascend_hybrid.ops.gdn.decode import contract as dc

    real = module.measure
    swap = {dc.VALUE_FIRST: dc.KEY_FIRST, dc.KEY_FIRST: dc.VALUE_FIRST}

    def inverted(*args, **kwargs):
        found = real(*args, **kwargs)
        layout = swap.get(found.verdict, found.verdict)
        return probes.Verdict(found.probe, found.signature, layout, layout == dc.VALUE_FIRST,
                              f"{found.detail} (inverted by a negative control)")

    module.measure = inverted


# name -> (plugin module it patches, the patch)
BREAKAGES: dict[str, tuple[str, Callable]] = {
    "ignore-saved-conv-state": ("sglang_ascend_hybrid.integration.short_conv", _ignore_saved_conv_state),
    "ignore-saved-ssm-state": ("sglang_ascend_hybrid.integration.gdn_hooks", _ignore_saved_ssm_state),
    "invert-decode-layout": ("sglang_ascend_hybrid.ops.gdn.decode.probe", _invert_decode_layout),
}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``patch(module)`` once ``target`` has been imported."""

    def __init__(self, target: str, patch: Callable) -> None:
        self.target, self.patch, self.spec = target, patch, None

    def find_spec(self, name, path=None, target=None):
        if name != self.target or self.spec is not None:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        self.spec, self.inner = spec, spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        self.patch(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def apply(name: str) -> None:
    """Arrange breakage ``name`` in this process (patched at once if its module is already imported)."""
    if name not in BREAKAGES:  # envs.EMULATED_NPU_BREAKAGES lists the same names
        raise ValueError(f"SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK={name!r}: expected one of {sorted(BREAKAGES)}")
    target, patch = BREAKAGES[name]
    if target in sys.modules:
        patch(sys.modules[target])
    else:
        sys.meta_path.insert(0, _AfterImport(target, patch))
