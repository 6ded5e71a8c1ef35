
from sgl_kernel_npu._stub import stub as _stub

# Only the names upstream SGLang imports at module level on NPU (kda_backend,
# gdn_backend, mamba.py).  The window-major v2 ops are deliberately absent: the
# plugin reaches them through the seam, where tests install emulators.
causal_conv1d_fn_npu = _stub("causal_conv1d_fn_npu")
causal_conv1d_update_npu = _stub("causal_conv1d_update_npu")
