"""The pairing package (sglang_ascend_hybrid.tools.pairing): what it imports and re-exports."""

from __future__ import annotations

import os

from tests.conftest import NPU_STUBS


def test_pairing_module_imports_no_torch_or_npu_package():
    import subprocess
    import sys

    code = ("import sys; from sglang_ascend_hybrid.tools import pairing; pairing.check()\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_npu', 'sgl_kernel_npu')\n"
            "       or m.startswith('sglang.')]\n"
            "print(bad)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(NPU_STUBS), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_package_re_exports_its_public_names():
    from sglang_ascend_hybrid.tools import pairing

    assert [name for name in pairing.__all__ if not hasattr(pairing, name)] == []
    # the test overrides live in their owners only (sources.SGLANG_DIR, kernel_package.KERNEL_PATH):
    # set on the package they would change nothing
    assert not hasattr(pairing, "SGLANG_DIR") and not hasattr(pairing, "KERNEL_PATH")
