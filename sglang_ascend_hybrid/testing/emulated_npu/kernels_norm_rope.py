"""Emulators of sgl-kernel-npu's fused norm / rotary ops used by LFM2, Qwen3.5 and Qwen3-Next attention.

Part of the emulated Ascend NPU device: every "npu" tensor is an ordinary CPU tensor there, so each
emulator is plain torch. ``OPS`` maps ``"sgl_kernel_npu.<module>:<attr>"`` (exactly as SGLang imports
it) to the emulator. Each emulator is written from the op's upstream source (cited in its docstring)
and copies what the kernel computes, float32 intermediates and defects included; input the real
kernel would misread (out-of-bounds or unaligned loads, output memory it would leave unwritten)
raises ``ValueError`` / ``TypeError`` instead.

Sources:
- sgl-kernel-npu main, https://github.com/sgl-project/sgl-kernel-npu commit
  f425bdf1e191a7682296d3b2ed0b927d4e37d671 (``python/sgl_kernel_npu/sgl_kernel_npu/norm/...``).
- ``activation/fused_sigmoid_mul.py`` exists only in pull request 740 (head
  a18c0c2f4b1c28c12e71b6dc9e9ea5fce766fc44), ``norm/gemma_rmsnorm.py`` only as the build-time
  provider ``target_providers/Ascend910/norm/gemma_rmsnorm.py`` of pull request 734 (head
  1def0a4f14602e869b113077cc2b84ca16959acd).
- torch_npu ``npu_gemma_rms_norm``: https://github.com/Ascend/op-plugin commit
  517f2e7d0f202f38b76310706cb977ca2388ad21 (``codegen/templates/_op_plugin_docs.py``,
  ``op_plugin/ops/opapi/GemmaRmsNormKernelOpApi.cpp``, ``op_plugin/python/meta/_meta_registrations.py``).
"""

from __future__ import annotations

from typing import Callable

import torch

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------


def _require_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}: dtype {value.dtype} is not one of {_FLOAT_DTYPES}")
    return value


def _require_contiguous(name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_contiguous():
        raise ValueError(
            f"{name}: the kernel reads it as a flat contiguous buffer, got shape {tuple(tensor.shape)} "
            f"with strides {tensor.stride()}"
        )


def _require_ndim(name: str, tensor: torch.Tensor, ndim: int) -> None:
    if tensor.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(tensor.shape)}")


def _require_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


def _require_eps(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {value!r}")
    if not value >= 0:
        raise ValueError(f"{name}: expected a float >= 0, got {value}")
    return float(value)


def _require_rope_dim(rope_dim: int, head_dim: int) -> int:
    _require_int("rope_dim", rope_dim, minimum=2)
    if rope_dim % 2 or rope_dim > head_dim:
        raise ValueError(f"rope_dim: expected an even int <= head size {head_dim}, got {rope_dim}")
    return rope_dim


def _leading_vector(name: str, tensor: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` elements the kernel loads from ``tensor``'s data pointer, as float32."""
    _require_tensor(name, tensor)
    _require_contiguous(name, tensor)
    if tensor.numel() < length:
        raise ValueError(f"{name}: the kernel loads {length} elements, got shape {tuple(tensor.shape)}")
    return tensor.reshape(-1)[:length].float()


def _flat_rows(name: str, tensor: torch.Tensor, rows: int, row_len: int) -> torch.Tensor:
    """``tensor`` read the way the kernel reads it: ``rows`` rows of ``row_len`` from its data pointer."""
    _require_tensor(name, tensor)
    _require_contiguous(name, tensor)
    if tensor.numel() < rows * row_len:
        raise ValueError(
            f"{name}: the kernel reads {rows} rows of {row_len} elements, got shape {tuple(tensor.shape)}"
        )
    return tensor.reshape(-1)[: rows * row_len].view(rows, row_len)


# ---------------------------------------------------------------------------
# shared math (float32, as the kernels compute)
# ---------------------------------------------------------------------------


def _rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(sum(x * x) / n + eps)`` over the last dim, ``x`` float32."""
    variance = (x * x).sum(dim=-1, keepdim=True) / x.shape[-1]
    return x * torch.rsqrt(variance + eps)


def _neox_rope(x: torch.Tensor, cos_full: torch.Tensor, sin_full: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """``cat(-x2, x1) * sin + x * cos`` on the first ``rope_dim`` lanes; the rest pass through."""
    half = rope_dim // 2
    rot = x[..., :rope_dim]
    rotated_half = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
    roped = rotated_half * sin_full + rot * cos_full
    return torch.cat((roped, x[..., rope_dim:]), dim=-1)


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.split_qkv_rmsnorm_mrope:triton_split_qkv_rmsnorm_mrope
# ---------------------------------------------------------------------------


def _mrope_lane_axes(half_rope_dim: int, mrope_section, is_interleaved: bool) -> torch.Tensor:
    """Per rotary lane: 0/1/2 for the t/h/w position row it reads, -1 where every mask is off (cos = sin = 0)."""
    section_t, section_h, section_w = (int(s) for s in mrope_section[:3])
    lanes = torch.arange(half_rope_dim)
    if is_interleaved:
        h_mask = (lanes % 3 == 1) & (lanes <= 3 * section_h)
        w_mask = (lanes % 3 == 2) & (lanes <= 3 * section_w)
        t_mask = ~(h_mask | w_mask)
    else:
        t_mask = lanes < section_t
        h_mask = (section_t - 1 < lanes) & (lanes < section_t + section_h)
        w_mask = (section_t + section_h - 1 < lanes) & (lanes < section_t + section_h + section_w)
    axes = torch.full((half_rope_dim,), -1, dtype=torch.long)
    axes[t_mask] = 0
    axes[h_mask] = 1
    axes[w_mask] = 2
    return axes


def _mrope_cos_sin(cos_sin: torch.Tensor, num_tokens: int, rope_dim: int, mrope_section, is_interleaved: bool):
    """The kernel's masked t/h/w cos and sin halves, each (num_tokens, 1, rope_dim) float32, halves repeated."""
    half = rope_dim // 2
    rows = _flat_rows("cos_sin", cos_sin, 3 * num_tokens, rope_dim).view(3, num_tokens, rope_dim)
    axes = _mrope_lane_axes(half, mrope_section, is_interleaved)
    axis, lane = axes.clamp(min=0), torch.arange(half)
    cos = rows[axis, :, lane].t()  # (num_tokens, half): lane i from row axis[i]
    sin = rows[axis, :, lane + half].t()
    off = axes < 0
    cos = cos.masked_fill(off, 0).float()
    sin = sin.masked_fill(off, 0).float()
    return torch.cat((cos, cos), dim=-1).unsqueeze(1), torch.cat((sin, sin), dim=-1).unsqueeze(1)


def _check_mrope_section(mrope_section) -> None:
    if not isinstance(mrope_section, (list, tuple)) or len(mrope_section) < 3:
        raise ValueError(f"mrope_section: expected three section sizes (t, h, w), got {mrope_section!r}")
    for size in mrope_section[:3]:
        _require_int("mrope_section entry", int(size) if not isinstance(size, int) else size, minimum=0)


def triton_split_qkv_rmsnorm_mrope(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    head_size: int,
    eps: float,
    mrope_section,
    is_interleaved: bool,
    rope_dim: int | None = None,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
    has_gate: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.split_qkv_rmsnorm_mrope.triton_split_qkv_rmsnorm_mrope``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/
    split_qkv_rmsnorm_mrope.py``, commit f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    Per token row of ``qkv`` (``[q | gate]`` interleaved per head when ``has_gate``, then k, then v):
    float32 RMSNorm per head with ``1 / sqrt(var + eps)`` times the weight as given (SGLang passes the
    ``gemma_weight`` buffer, already ``1 + w``), plus the optional bias; neox-style multimodal rope on
    the first ``rope_dim`` lanes with cos/sin from ``cos_sin`` (3, num_tokens, rope_dim) = t/h/w rows of
    ``[cos | sin]`` halves, chosen per lane by the kernel's masks. Lanes no mask covers (non-interleaved
    sections summing to less than rope_dim / 2) get cos = sin = 0, as in the kernel. v and gate are
    copied. Returns ``(q, k, v, gate)``; gate is (num_tokens, 0) when ``has_gate`` is False.
    """
    _require_tensor("qkv", qkv)
    _require_ndim("qkv", qkv, 2)
    _require_contiguous("qkv", qkv)
    _require_int("num_q_heads", num_q_heads)
    _require_int("num_kv_heads", num_kv_heads)
    _require_int("head_size", head_size, minimum=2)
    eps = _require_eps("eps", eps)
    _check_mrope_section(mrope_section)
    rope_dim = _require_rope_dim(head_size if rope_dim is None else rope_dim, head_size)
    q_size, kv_size = num_q_heads * head_size, num_kv_heads * head_size
    gate_size = q_size if has_gate else 0
    num_tokens, row_len = qkv.shape
    if row_len != q_size + gate_size + 2 * kv_size:
        raise ValueError(
            f"qkv: the kernel reads rows of q_size + gate_size + 2 * kv_size = {q_size + gate_size + 2 * kv_size} "
            f"elements, got shape {tuple(qkv.shape)}"
        )
    q_w = _leading_vector("q_weight", q_weight, head_size)
    k_w = _leading_vector("k_weight", k_weight, head_size)
    if q_bias is not None and k_bias is None:
        raise ValueError("k_bias: the kernel loads it whenever q_bias is given, got None")
    q_b = _leading_vector("q_bias", q_bias, head_size) if q_bias is not None else None
    k_b = _leading_vector("k_bias", k_bias, head_size) if q_bias is not None else None

    q_part, k_in, v_in = qkv.split([q_size + gate_size, kv_size, kv_size], dim=-1)
    q_part = q_part.float().view(num_tokens, num_q_heads, -1)
    q_in, gate_in = q_part[..., :head_size], q_part[..., head_size:]
    cos, sin = _mrope_cos_sin(cos_sin, num_tokens, rope_dim, mrope_section, is_interleaved)

    def norm_rope(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        normed = _rms_normalize(x, eps) * weight
        if bias is not None:
            normed = normed + bias
        return _neox_rope(normed, cos, sin, rope_dim)

    q_out = norm_rope(q_in, q_w, q_b).reshape(num_tokens, q_size).to(qkv.dtype)
    k_out = norm_rope(k_in.float().view(num_tokens, num_kv_heads, head_size), k_w, k_b)
    k_out = k_out.reshape(num_tokens, kv_size).to(qkv.dtype)
    gate_out = gate_in.reshape(num_tokens, gate_size).to(qkv.dtype)
    return q_out, k_out, v_in.clone(), gate_out


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkvgate_gemma_rmsnorm_rope
# ---------------------------------------------------------------------------


def _position_sin_cos(name: str, tensor: torch.Tensor, batch: int, rope_dim: int) -> torch.Tensor:
    """Rows ``row * rope_dim`` of ``tensor`` as the kernel loads them, (batch, 1, rope_dim) float32."""
    _require_tensor(name, tensor)
    if tensor.shape[-1] != rope_dim:
        raise ValueError(f"{name}: expected the last dim to be rope_dim={rope_dim}, got shape {tuple(tensor.shape)}")
    return _flat_rows(name, tensor, batch, rope_dim).float().unsqueeze(1)


def _gptj_rope(x: torch.Tensor, cos_rows: torch.Tensor, sin_rows: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """The kernel's non-neox branch (``DO_HALF`` False): lanes ``2i`` / ``2i+1`` rotate as a pair with
    ``sin[i]`` / ``cos[i]`` (the first half of the row, each value spread to both lanes), the
    rotated pair is ``(-x[2i+1], x[2i])``."""
    half = rope_dim // 2
    sin = sin_rows[..., :half].repeat_interleave(2, dim=-1)
    cos = cos_rows[..., :half].repeat_interleave(2, dim=-1)
    rot = x[..., :rope_dim]
    rotated = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((rotated * sin + rot * cos, x[..., rope_dim:]), dim=-1)


def split_qkv_rmsnorm_rope(
    input: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    q_hidden_size: int,
    kv_hidden_size: int,
    head_dim: int,
    eps=None,
    q_weight=None,
    k_weight=None,
    q_bias=None,
    k_bias=None,
    is_neox_style: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.split_qkv_rmsnorm_rope.split_qkv_rmsnorm_rope``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/
    split_qkv_rmsnorm_rope.py`` (``split_qkv_rmsnorm_rope`` and ``split_qkv_rmsnorm_rope_kernel``),
    commit f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    ``input`` rows are ``[q | k | v]``; q and k per head: an fp32 RMSNorm times the weight (plus the
    bias) when ``eps`` is given (``NORMS``), then rope on the first ``rope_dim = sin.shape[-1]``
    lanes with ``sin`` / ``cos`` rows read at ``token * rope_dim`` (neox halves, or GPT-J pairs from
    the row's first half when ``is_neox_style`` is False); v is copied.  Returns ``(q, k, v)`` in
    ``input.dtype``.  The wrapper asserts ``head_dim`` is a power of two and ``kv_hidden_size``
    divides ``q_hidden_size``; SGLang's Llama-family NPU prepare (``models/llama.py``
    ``forward_prepare_npu``) calls it without norms.
    """
    _require_tensor("input", input)
    _require_ndim("input", input, 2)
    _require_contiguous("input", input)
    _require_int("head_dim", head_dim, minimum=2)
    _require_int("q_hidden_size", q_hidden_size)
    _require_int("kv_hidden_size", kv_hidden_size)
    if head_dim & (head_dim - 1):
        raise ValueError(f"head_dim: the wrapper asserts a power of two, got {head_dim}")
    if q_hidden_size % kv_hidden_size:
        raise ValueError(f"q_hidden_size: must be a multiple of kv_hidden_size={kv_hidden_size}, got {q_hidden_size}")
    if kv_hidden_size % head_dim:
        raise ValueError(f"kv_hidden_size: must be a multiple of head_dim={head_dim}, got {kv_hidden_size}")
    batch, row_len = input.shape
    if row_len != q_hidden_size + 2 * kv_hidden_size:
        raise ValueError(f"input: the kernel reads rows of q_hidden_size + 2 * kv_hidden_size = "
                         f"{q_hidden_size + 2 * kv_hidden_size} elements, got shape {tuple(input.shape)}")
    rope_dim = _require_rope_dim(int(sin.shape[-1]), head_dim)
    sin_rows = _position_sin_cos("sin", sin, batch, rope_dim)
    cos_rows = _position_sin_cos("cos", cos, batch, rope_dim)
    rope = _neox_rope if is_neox_style else _gptj_rope
    norms = eps is not None
    if norms:
        eps = _require_eps("eps", eps)
    if (q_bias is None) != (k_bias is None):
        raise ValueError("q_bias / k_bias: the kernel reads both or neither (BIAS = q_bias is not None)")

    def prepare(x: torch.Tensor, weight, bias) -> torch.Tensor:
        x = x.float().view(batch, -1, head_dim)
        if norms:
            x = _rms_normalize(x, eps) * _leading_vector("weight", weight, head_dim)
            if bias is not None:
                x = x + _leading_vector("bias", bias, head_dim)
        return rope(x, cos_rows, sin_rows, rope_dim).reshape(batch, -1).to(input.dtype)

    q_in, k_in, v_in = input.split([q_hidden_size, kv_hidden_size, kv_hidden_size], dim=-1)
    return prepare(q_in, q_weight, q_bias), prepare(k_in, k_weight, k_bias), v_in.clone()


def split_qkvgate_gemma_rmsnorm_rope(
    input: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    q_hidden_size: int,
    kv_hidden_size: int,
    head_dim: int,
    rope_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.split_qkv_rmsnorm_rope.split_qkvgate_gemma_rmsnorm_rope``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/
    split_qkv_rmsnorm_rope.py`` (``split_qkvgate_gemma_rmsnorm_rope`` and its kernel), commit
    f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    ``input`` rows are ``[q | gate]`` interleaved per head (2 * q_hidden_size), then k, then v.
    q and k: float32 Gemma RMSNorm per head (``rsqrt(var + eps) * (w + 1)``, weight read as its first
    head_dim elements), then neox rope on the first ``rope_dim`` lanes with ``sin`` / ``cos`` read as
    rows ``token * rope_dim`` (SGLang's ``rotary_emb.position_sin/cos``, (N, 1, 1, rope_dim), halves
    repeated). gate and v are copied. Returns ``(q, k, v, gate)``, all ``input.dtype``.
    The wrapper asserts head_dim is a power of two and kv_hidden_size divides q_hidden_size; a
    kv_hidden_size that head_dim does not divide leaves output columns unwritten: all raise here.
    """
    _require_tensor("input", input)
    _require_ndim("input", input, 2)
    _require_contiguous("input", input)
    _require_int("head_dim", head_dim, minimum=2)
    _require_int("q_hidden_size", q_hidden_size)
    _require_int("kv_hidden_size", kv_hidden_size)
    eps = _require_eps("eps", eps)
    rope_dim = _require_rope_dim(rope_dim, head_dim)
    if head_dim & (head_dim - 1):
        raise ValueError(f"head_dim: the wrapper asserts a power of two, got {head_dim}")
    if q_hidden_size % kv_hidden_size:
        raise ValueError(f"q_hidden_size: must be a multiple of kv_hidden_size={kv_hidden_size}, got {q_hidden_size}")
    if kv_hidden_size % head_dim:
        raise ValueError(f"kv_hidden_size: must be a multiple of head_dim={head_dim}, got {kv_hidden_size}")
    batch, row_len = input.shape
    if row_len != 2 * q_hidden_size + 2 * kv_hidden_size:
        raise ValueError(
            f"input: the kernel reads rows of 2 * q_hidden_size + 2 * kv_hidden_size = "
            f"{2 * q_hidden_size + 2 * kv_hidden_size} elements, got shape {tuple(input.shape)}"
        )
    sin_rows = _position_sin_cos("sin", sin, batch, rope_dim)
    cos_rows = _position_sin_cos("cos", cos, batch, rope_dim)
    q_w = _leading_vector("q_weight", q_weight, head_dim) + 1.0
    k_w = _leading_vector("k_weight", k_weight, head_dim) + 1.0

    q_gate, k_in, v_in = input.split([2 * q_hidden_size, kv_hidden_size, kv_hidden_size], dim=-1)
    q_gate = q_gate.float().view(batch, q_hidden_size // head_dim, 2 * head_dim)
    q_in, gate_in = q_gate[..., :head_dim], q_gate[..., head_dim:]

    def norm_rope(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return _neox_rope(_rms_normalize(x, eps) * weight, cos_rows, sin_rows, rope_dim)

    q_out = norm_rope(q_in, q_w).reshape(batch, q_hidden_size).to(input.dtype)
    k_out = norm_rope(k_in.float().view(batch, -1, head_dim), k_w).reshape(batch, kv_hidden_size).to(input.dtype)
    gate_out = gate_in.reshape(batch, q_hidden_size).to(input.dtype)
    return q_out, k_out, v_in.clone(), gate_out


# ---------------------------------------------------------------------------
# sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul
# ---------------------------------------------------------------------------


def fused_sigmoid_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Emulates ``sgl_kernel_npu.activation.fused_sigmoid_mul.fused_sigmoid_mul``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/activation/
    fused_sigmoid_mul.py`` at a18c0c2f4b1c28c12e71b6dc9e9ea5fce766fc44 (pull request 740; not on main
    at f425bdf1e191a7682296d3b2ed0b927d4e37d671).

    Same-shape ``x * sigmoid(gate)`` in float32, stored in ``x.dtype`` into a new contiguous tensor
    (not in place). Shape mismatch raises ``ValueError`` as the wrapper does.
    """
    _require_tensor("x", x)
    _require_tensor("gate", gate)
    if x.shape != gate.shape:
        raise ValueError(f"x and gate must have the same shape, got {x.shape} vs {gate.shape}")
    out = torch.empty_like(x.contiguous())
    out.copy_(x.float() * torch.sigmoid(gate.float()))
    return out


def fused_sigmoid_mul_broadcast(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Emulates ``sgl_kernel_npu.activation.fused_sigmoid_mul.fused_sigmoid_mul_broadcast`` (the shared
    expert's gate of SGLang's Qwen2-MoE block, which Qwen3-Next and Qwen3.5-MoE use on NPU:
    ``models/qwen2_moe.py`` ``_forward_shared_experts``).

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/activation/
    fused_sigmoid_mul.py`` at a18c0c2f4b1c28c12e71b6dc9e9ea5fce766fc44 (pull request 740).

    ``x`` [N, D], ``gate`` [N] or [N, 1]: ``out[n, :] = x[n, :] * sigmoid(gate[n])`` in float32, stored
    in ``x.dtype`` into a new tensor.  The wrapper's checks (``ValueError``, its texts): x 2-D; a 2-D gate
    has one column; a 1-D gate has N entries.  It does not check a 2-D gate's row count: the kernel reads
    ``gate[row]`` for every row of x, so fewer rows would be read out of bounds (raised here); extra rows
    are not read.  It allocates ``out = empty_like(x)`` before making x contiguous and writes ``out``
    row-major, so an x whose dense strides are not row-major would get its rows scattered (raised here).
    """
    _require_tensor("x", x)
    _require_tensor("gate", gate)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, got ndim={x.ndim}, shape={x.shape}")
    bs = x.shape[0]
    if gate.ndim == 2:
        if gate.shape[1] != 1:
            raise ValueError(f"2-D gate must have shape ({bs}, 1), got {gate.shape}")
        if gate.shape[0] < bs:
            raise ValueError(f"gate {tuple(gate.shape)} has fewer rows than x ({bs}): the kernel would read "
                             "gate out of bounds (the wrapper does not check a 2-D gate's rows)")
    elif gate.ndim != 1 or gate.shape[0] != bs:
        raise ValueError(f"gate must be ({bs},) or ({bs}, 1), got {gate.shape}")
    out = torch.empty_like(x)
    if not out.is_contiguous():
        raise ValueError(f"x strides {x.stride()}: out = empty_like(x) keeps them, but the kernel writes out "
                         "row-major (rows would land transposed)")
    g = torch.sigmoid(gate.reshape(-1)[:bs].float()).unsqueeze(1)
    out.copy_(x.float() * g)
    return out


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.l1_norm:l1_norm
# ---------------------------------------------------------------------------


def l1_norm(input: torch.Tensor) -> torch.Tensor:
    """Emulates ``sgl_kernel_npu.norm.l1_norm.l1_norm`` (SGLang's NPU top-k renormalisation:
    ``hardware_backend/npu/moe/topk.py``, after ``npu_moe_gating_top_k_softmax``).

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/l1_norm.py`` at
    f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    ``input`` [B, H]: each row divided by its sum (``tl.sum`` of the loaded row, the division in the
    input's dtype), stored into a new float32 [B, H].  The kernel addresses row ``r`` at
    ``input_ptr + r * H`` with ``tl.arange(0, H)`` and no mask: a non-contiguous input (e.g. SGLang's
    ``topk_weights[:, :-1]`` with shared-expert slots) would be read with the wrong rows (raised here),
    and ``tl.arange`` needs a power-of-two H (Triton refuses to compile otherwise; raised here).
    """
    _require_tensor("input", input)
    if input.dim() != 2:
        raise ValueError(f"input: expected [batch, hidden], got shape {tuple(input.shape)}")
    hidden = input.shape[1]
    if hidden <= 0 or hidden & (hidden - 1):
        raise ValueError(f"input: hidden size {hidden} is not a power of two: the kernel's tl.arange(0, {hidden}) "
                         "does not compile")
    if not input.is_contiguous():
        raise ValueError(f"input strides {input.stride()}: the kernel reads row r at r * {hidden} (a contiguous "
                         "[batch, hidden]); this input would be read with the wrong rows")
    total = input.float().sum(dim=-1, keepdim=True).to(input.dtype)
    return (input / total).to(torch.float32)


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.gemma_rmsnorm:npu_gemma_rms_norm  (-> torch_npu.npu_gemma_rms_norm)
# ---------------------------------------------------------------------------


def npu_gemma_rms_norm(
    input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.gemma_rmsnorm.npu_gemma_rms_norm`` (Ascend 910 build).

    That module is the build-time provider ``python/sgl_kernel_npu/target_providers/Ascend910/norm/
    gemma_rmsnorm.py`` of sgl-project/sgl-kernel-npu pull request 734 (head
    1def0a4f14602e869b113077cc2b84ca16959acd); it returns ``torch_npu.npu_gemma_rms_norm(input,
    weight, eps)``, a closed CANN op (aclnnGemmaRmsNorm), so this emulator is STRICT. Contract from
    Ascend/op-plugin 517f2e7d0f202f38b76310706cb977ca2388ad21: ``_op_plugin_docs.py`` (fp32/fp16/bf16,
    gamma dtype equals input dtype, gamma shape = input.shape[n:], no empty tensors, no non-contiguous
    tensors), ``GemmaRmsNormKernelOpApi.cpp`` / ``_meta_registrations.py`` (y in input dtype; rstd
    float32 shaped like input with the normalized dims set to 1) and ``test_npu_gemma_rms_norm.py``
    (y = x * rstd * (gamma + 1) in float32, rstd = 1 / sqrt(mean(x^2) + eps)).
    Returns ``(y, rstd)``.
    """
    _require_tensor("input", input)
    _require_tensor("weight", weight)
    eps = _require_eps("eps", eps)
    _require_contiguous("input", input)
    _require_contiguous("weight", weight)
    if input.numel() == 0:
        raise ValueError(f"input: the op does not support empty tensors, got shape {tuple(input.shape)}")
    if weight.dtype != input.dtype:
        raise TypeError(f"weight: dtype must equal input dtype {input.dtype}, got {weight.dtype}")
    norm_dims = weight.dim()
    if not 1 <= norm_dims < input.dim() + 1 or tuple(input.shape[input.dim() - norm_dims:]) != tuple(weight.shape):
        raise ValueError(
            f"weight: shape must equal the trailing dims of input {tuple(input.shape)}, got {tuple(weight.shape)}"
        )
    reduce_dims = tuple(range(input.dim() - norm_dims, input.dim()))
    x = input.float()
    rstd = torch.rsqrt(x.pow(2).mean(dim=reduce_dims, keepdim=True) + eps)
    y = (x * rstd * (weight.float() + 1.0)).to(input.dtype)
    return y, rstd


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.add_rmsnorm_bias:add_gemma_rms_norm
# ---------------------------------------------------------------------------


def add_gemma_rms_norm(
    hidden_state: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, variance_epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.add_rmsnorm_bias.add_gemma_rms_norm``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/
    add_rmsnorm_bias.py``, commit f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    ``add = hidden_state + residual`` (in the promoted dtype, stored as hidden_state's dtype), then
    float32 ``add * rsqrt(sum(add^2) / dim + eps) * (w + 1)`` cast to the add dtype.
    Returns ``(norm_output, add_output)``. Defect not copied but refused: with ``residual=None`` the
    wrapper returns an ``add_output`` it never writes, so that raises here. Every tensor is read and
    written with hidden_state's row stride, so all must be contiguous and shaped alike.
    """
    _require_tensor("hidden_state", hidden_state)
    _require_ndim("hidden_state", hidden_state, 2)
    _require_contiguous("hidden_state", hidden_state)
    eps = _require_eps("variance_epsilon", variance_epsilon)
    if residual is None:
        raise ValueError("residual: None makes the real op return an add_output it never writes; pass a tensor")
    _require_tensor("residual", residual)
    _require_contiguous("residual", residual)
    if residual.shape != hidden_state.shape:
        raise ValueError(
            f"residual: the kernel reads it with hidden_state's layout {tuple(hidden_state.shape)}, "
            f"got shape {tuple(residual.shape)}"
        )
    dim = hidden_state.shape[1]
    w = _leading_vector("weight", weight, dim)
    add_val = hidden_state + residual
    add_output = add_val.to(hidden_state.dtype)
    x = add_val.float()
    normed = x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) / dim + eps) * (w + 1.0)
    return normed.to(hidden_state.dtype), add_output


# ---------------------------------------------------------------------------
# sgl_kernel_npu.norm.fused_rope_qk_mqa:fused_rope_qk_mqa
# ---------------------------------------------------------------------------


def _check_rope_qk_shapes(query: torch.Tensor, key: torch.Tensor, cos_sin: torch.Tensor, rotary_dim: int) -> None:
    if query.dim() != 3:
        raise ValueError(
            f"query: the wrapper unpacks (T, Hq, D) from query.shape, got shape {tuple(query.shape)}"
        )
    if key.dim() != 3:
        raise ValueError(f"key: the wrapper unpacks (T, Hk, D) from key.shape, got shape {tuple(key.shape)}")
    num_tokens, _, head_dim = query.shape
    if key.shape[0] != num_tokens or key.shape[2] != head_dim:
        raise ValueError(
            f"key: the kernel walks query's {num_tokens} tokens and head size {head_dim} over key too, "
            f"got shape {tuple(key.shape)}"
        )
    if cos_sin.dim() != 2:
        raise ValueError(f"cos_sin: expected (num_tokens, rotary_dim), got shape {tuple(cos_sin.shape)}")
    _require_int("rotary_dim", rotary_dim, minimum=2)
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"rotary_dim: expected an even int <= head size {head_dim}, got {rotary_dim}")
    if cos_sin.shape[0] < num_tokens or cos_sin.shape[1] < rotary_dim:
        raise ValueError(
            f"cos_sin: the kernel reads {num_tokens} rows of {rotary_dim} ([cos | sin]), "
            f"got shape {tuple(cos_sin.shape)}"
        )


def _rope_lane_indices(rotary_dim: int, is_neox_style: bool) -> tuple[torch.Tensor, torch.Tensor]:
    lanes = torch.arange(rotary_dim // 2)
    if is_neox_style:
        return lanes, lanes + rotary_dim // 2
    return lanes * 2, lanes * 2 + 1


def _rope_into(out: torch.Tensor, x: torch.Tensor, cos, sin, idx_even, idx_odd, rotary_dim: int) -> None:
    """Writes rotated lanes and the pass-through lanes of ``x`` into ``out`` (both (T, H, D))."""
    compute_dtype = torch.promote_types(x.dtype, cos.dtype)
    x1 = x[..., idx_even].to(compute_dtype)
    x2 = x[..., idx_odd].to(compute_dtype)
    out[..., idx_even] = (x1 * cos - x2 * sin).to(out.dtype)
    out[..., idx_odd] = (x1 * sin + x2 * cos).to(out.dtype)
    out[..., rotary_dim:] = x[..., rotary_dim:]


def fused_rope_qk_mqa(
    query: torch.Tensor, key: torch.Tensor, cos_sin: torch.Tensor, rotary_dim: int, is_neox_style: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Emulates ``sgl_kernel_npu.norm.fused_rope_qk_mqa.fused_rope_qk_mqa``.

    Source read: sgl-project/sgl-kernel-npu, ``python/sgl_kernel_npu/sgl_kernel_npu/norm/
    fused_rope_qk_mqa.py``, commit f425bdf1e191a7682296d3b2ed0b927d4e37d671.

    query (T, Hq, D), key (T, Hk, D), cos_sin (T, >= rotary_dim) indexed by token (SGLang passes
    ``cos_sin_cache.index_select(0, positions)``, often float32 with bf16 q/k): row t's lanes
    ``[0, rotary_dim / 2)`` are cos, the next ``rotary_dim / 2`` sin. Neox (half) or GPT-J
    (interleaved) rotation computed in the promoted dtype of q/k and cos_sin, stored into
    ``torch.empty_like(query / key)``; lanes past rotary_dim are copied. Returns ``(out_q, out_k)``.
    A 2-D query or key fails the wrapper's shape unpacking; it raises ``ValueError`` here.
    """
    _require_tensor("query", query)
    _require_tensor("key", key)
    _require_tensor("cos_sin", cos_sin)
    _check_rope_qk_shapes(query, key, cos_sin, rotary_dim)
    half = rotary_dim // 2
    cos = cos_sin[: query.shape[0], :half].unsqueeze(1)
    sin = cos_sin[: query.shape[0], half:rotary_dim].unsqueeze(1)
    idx_even, idx_odd = _rope_lane_indices(rotary_dim, bool(is_neox_style))
    out_q = torch.empty_like(query)
    out_k = torch.empty_like(key)
    _rope_into(out_q, query, cos, sin, idx_even, idx_odd, rotary_dim)
    _rope_into(out_k, key, cos, sin, idx_even, idx_odd, rotary_dim)
    return out_q, out_k


OPS: dict[str, Callable] = {
    "sgl_kernel_npu.norm.split_qkv_rmsnorm_mrope:triton_split_qkv_rmsnorm_mrope": triton_split_qkv_rmsnorm_mrope,
    "sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkvgate_gemma_rmsnorm_rope": split_qkvgate_gemma_rmsnorm_rope,
    "sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkv_rmsnorm_rope": split_qkv_rmsnorm_rope,
    "sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul": fused_sigmoid_mul,
    "sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul_broadcast": fused_sigmoid_mul_broadcast,
    "sgl_kernel_npu.norm.l1_norm:l1_norm": l1_norm,
    "sgl_kernel_npu.norm.gemma_rmsnorm:npu_gemma_rms_norm": npu_gemma_rms_norm,
    "sgl_kernel_npu.norm.add_rmsnorm_bias:add_gemma_rms_norm": add_gemma_rms_norm,
    "sgl_kernel_npu.norm.fused_rope_qk_mqa:fused_rope_qk_mqa": fused_rope_qk_mqa,
}
