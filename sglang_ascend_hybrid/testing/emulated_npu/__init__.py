"""An emulated Ascend NPU on the CPU, for SGLang's real runtime: test and rehearsal tooling.

The serving plugin never imports this package.  It is put in place only in processes started with
:func:`runtime_env.environment` (its ``site`` folder and a generated ``sgl_kernel_npu`` tree on
``PYTHONPATH``, ``SGLANG_ASCEND_HYBRID_EMULATED_NPU=1``); a plain ``import torch`` never sees it.

Layers, bottom up:

- :mod:`.device` -- torch's PrivateUse1 backend renamed ``"npu"``, backed by CPU memory;
  :mod:`.npu_module` is ``torch.npu`` (device, streams, events, memory figures, graphs);
- ``site/`` -- the ``torch.backends`` autoload entry point and the ``torch_npu`` / ``torchair``
  surfaces SGLang imports; :mod:`.kernel_tree` writes ``sgl_kernel_npu`` from what the installed
  SGLang imports;
- :mod:`.surface` -- binds every device op to its CPU emulator (``kernels_*`` modules, each written
  from the op's upstream source; the plugin's own emulators behind the seam) and records what ran;
- :mod:`.runtime_env` -- the environment of an emulated process.

What it shows: SGLang's own scheduler, pools, radix cache, chunked prefill, speculative worker,
graph runner and TP processes running the plugin.  What it cannot show: real NPU numerics and
rounding, internal memory formats (NZ), HCCL, graph capture of device work (a replay re-runs the
Python forward), pinned-memory transfers, device memory pressure.
"""
