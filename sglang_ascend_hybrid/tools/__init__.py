"""Operator tools behind the ``sglang-ascend-hybrid`` command (:mod:`sglang_ascend_hybrid.cli`).

:mod:`.doctor` (what this machine has and what the plugin did; :mod:`.doctor_report`, the issue
report; :mod:`.kernel_report`, the kernel each ladder serves), :mod:`.plan` (what the plugin will
run for a model config), :mod:`.selftest` (the plugin's ops against the pure-torch references),
:mod:`.pairing` (the sgl-kernel-npu imports of the installed SGLang against the installed
sgl-kernel-npu; also checked at NPU startup), :mod:`.console` (one error line for every command).
Importing this package imports none of them.
"""
