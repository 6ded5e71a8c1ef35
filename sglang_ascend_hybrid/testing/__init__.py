"""Test and rehearsal tooling shipped with the package, never imported by the plugin itself (its
discovery, its backends, its CLI): :mod:`.launch_check` runs SGLang's real ``--device npu`` startup
resolution on a machine without an NPU by emulating the platform in-process (it rebinds SGLang's
platform globals and may put an empty ``torch_npu`` module in ``sys.modules`` for its duration).
The test suite drives it, and an operator may run it to rehearse a launch:
``python -m sglang_ascend_hybrid.testing.launch_check --model-path <dir>``."""
