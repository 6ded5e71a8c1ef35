"""SGLang's real runtime on the emulated Ascend device, against transformers: the machinery of the
runtime tests (``tests/runtime``), the demo and ``sglang-ascend-hybrid rehearse``.

- :mod:`.engine_worker` -- runs in a process on the emulated device: one ``sglang.Engine`` (or the
  HTTP server) with the plugin, rounds of greedy requests, what SGLang answered;
- :mod:`.reference_worker` -- runs in a plain process (no emulated device: transformers imports
  ``torch_npu`` helpers once it is importable): transformers' log-probabilities, teacher-forced
  on SGLang's tokens;
- :mod:`.session` -- starts both, reads the device records, compares.

Test and rehearsal tooling: the serving plugin never imports it.
"""
