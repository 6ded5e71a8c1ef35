"""``sglang-ascend-hybrid selftest``: the plugin's public ops against the pure-torch references.

Every check runs one public op of the plugin on small inputs and compares it with
the pure-torch reference computed on the CPU in fp32:

* ``causal_conv1d_fn`` (varlen prefill: a pad slot, a sequence shorter than
  ``width - 1``, mixed ``has_initial_state``, conv states as the transposed view of
  a window-major pool) and ``causal_conv1d_update`` (decode); outputs and the
  final pool contents are compared;
* ``chunk_gated_delta_rule`` (GDN prefill) on a head pair the mega kernel takes
  natively and on one the planner pads; the GDN decode ladder once per device rung (SGLang's
  decode step on the Triton decode kernel, emulated value first, and on the recurrent op) and the
  public ``recurrent_gated_delta_rule`` (decode) on it;
* ``fused_infer_attention_varlen`` (packed attention) on a batch with a KV-only and
  a query-only sequence; output and LSE (``-inf`` rows must match exactly).

``--device cpu`` puts the CPU emulators of the device kernels behind the seam
(:func:`sglang_ascend_hybrid.ops.seam.install_emulators`), so the device-kernel
dispatch paths run; a check also fails when the device kernel it targets was not
called.  ``--device npu`` runs the same cases on NPU tensors with the real kernels
(whatever rung each op's ladder picks) and nothing emulated.

The time column is one call's wall time and says what it measured: on ``--device cpu`` it
is the CPU emulators' time (seconds for the GDN cases; not the ops' speed on a device), on
``--device npu`` the real kernels' (first call, compilation included).

Exit code: 0 all checks pass, 1 any failure, 2 ``--device npu`` without a usable NPU (one
line on stderr, ``sglang-ascend-hybrid selftest: error: ...``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.envs import temporary_env
from sglang_ascend_hybrid.ops import seam

# Absolute tolerances (fp16 / bf16 device ops vs an fp32 reference).
TOL_CONV = 2e-2
TOL_GDN = 1e-2
TOL_GDN_BF16 = 2e-2  # bf16 inputs and states (7-bit mantissa)
TOL_GATES = 1e-4  # fp32 gates from the same bf16 inputs (the kernels compute in fp32)
TOL_ATTN = 3e-2


@dataclass
class Result:
    op: str
    case: str
    error: float
    tolerance: float
    ms: float
    ok: bool
    note: str = ""
    skipped: bool = False

    @property
    def verdict(self) -> str:
        return "SKIP" if self.skipped else ("PASS" if self.ok else "FAIL")


@dataclass
class Check:
    op: str
    case: str
    run: Callable[[str, bool], tuple[float, float]]  # (device, quick) -> (max abs error, one call's wall ms)
    tolerance: float
    emulators: Callable[[], dict] = field(default=dict)  # CPU only: seam name -> emulator
    expect: tuple[str, ...] = ()  # seam ops the case targets (CPU: must be called; NPU: must be installed)
    npu_env: dict = field(default_factory=dict)  # NPU only: env forcing the rung of ``expect``
    npu_unproven: Optional[Callable[[], Optional[str]]] = None  # NPU only: why the rung may not serve (a SKIP)


# --------------------------------------------------------------------------- helpers


def _sync(device: str) -> None:
    if device == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


def _timed(device: str, fn: Callable):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, (time.perf_counter() - start) * 1e3


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape:
        raise AssertionError(f"shape {tuple(a.shape)} != reference shape {tuple(b.shape)}")
    if a.numel() == 0:
        return 0.0
    diff = (a - b).abs()
    if not torch.isfinite(diff).all():
        return math.inf
    return float(diff.max())


def npu_status() -> tuple[bool, str]:
    """Whether an NPU is usable here, and why not."""
    if not seam.package_available("torch_npu"):
        return False, "torch_npu is not importable"
    try:
        ok = bool(torch.npu.is_available())  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001
        return False, f"torch.npu.is_available() failed: {exc}"
    return (True, "") if ok else (False, "torch.npu.is_available() is False (no NPU device)")


# --------------------------------------------------------------------------- short conv


def _conv_emulators(which: str) -> Callable[[], dict]:
    def build() -> dict:
        from sglang_ascend_hybrid.emulators import causal_conv1d as emu

        ops = emu.emulators()
        names = {"v2": (emu.OP_FN_V2, emu.OP_UPDATE_V2), "aclnn": (emu.OP_ACLNN,),
                 "update_v2": (emu.OP_UPDATE_V2_MAIN,)}[which]
        return {n: ops[n] for n in names}

    return build


def _conv_fn_case(device: str, quick: bool) -> tuple[float, float]:
    from sglang_ascend_hybrid.ops.conv import api as conv
    from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_fn_torch

    gen = torch.Generator().manual_seed(1)
    dim, width, dtype = (32 if quick else 64), 4, torch.float16
    s = width - 1
    # seq 1 is shorter than width - 1; seq 3 is padding; slot 0 is the reserved pad slot.
    lens = [5, 2, 9, 4] if quick else [17, 2, 33, 6]
    slots = [3, 1, 2, -1]
    has_init = [True, False, True, True]
    total = sum(lens)
    x = torch.randn(dim, total, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    pool = torch.randn(6, s, dim, generator=gen).to(dtype)  # window-major [slots, W-1, dim]
    qsl = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    idx = torch.tensor(slots, dtype=torch.int32)
    his = torch.tensor(has_init, dtype=torch.bool)

    ref_pool = pool.float().clone()
    ref = causal_conv1d_fn_torch(x.float(), weight.float(), bias.float(), qsl, idx, his,
                                 ref_pool.transpose(1, 2), "silu", -1)
    dev_pool = pool.to(device).clone()
    out, ms = _timed(device, lambda: conv.causal_conv1d_fn(
        x.to(device), weight.to(device), bias.to(device), qsl.to(device), idx.to(device),
        his.to(device), dev_pool.transpose(1, 2), activation="silu", pad_slot_id=-1))
    real = slice(0, total - lens[-1])  # the pad sequence's rows are unspecified
    err = max(_err(out[:, real], ref[:, real]),
              _err(dev_pool[1:], ref_pool[1:]))  # slot 0: pad rows may write it
    return err, ms


def _conv_update_case(device: str, quick: bool) -> tuple[float, float]:
    from sglang_ascend_hybrid.ops.conv import api as conv
    from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_update_torch

    gen = torch.Generator().manual_seed(2)
    dim, width, dtype = (32 if quick else 64), 4, torch.float16
    s = width - 1
    slots = [2, -1, 1, 4]
    x = torch.randn(len(slots), dim, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    pool = torch.randn(5, s, dim, generator=gen).to(dtype)
    idx = torch.tensor(slots, dtype=torch.int32)

    ref_pool = pool.float().clone()
    ref = causal_conv1d_update_torch(x.float(), ref_pool.transpose(1, 2), weight.float(), bias.float(),
                                     "silu", idx, -1)
    dev_pool = pool.to(device).clone()
    out, ms = _timed(device, lambda: conv.causal_conv1d_update(
        x.to(device), dev_pool.transpose(1, 2), weight.to(device), bias.to(device), activation="silu",
        conv_state_indices=idx.to(device), pad_slot_id=-1))
    live = torch.tensor([i for i, sl in enumerate(slots) if sl != -1])
    err = max(_err(out.cpu().index_select(0, live), ref.index_select(0, live)),
              _err(dev_pool[1:], ref_pool[1:]))
    return err, ms


def _conv_verify_case(width: int):
    """Speculative verify (TARGET_VERIFY, 4 draft tokens) on a window-major draft pool, a pad row."""
    def case(device: str, quick: bool) -> tuple[float, float]:
        from sglang_ascend_hybrid.ops.conv import api as conv

        gen = torch.Generator().manual_seed(3)
        dim, draft, dtype = (32 if quick else 64), 4, torch.float16
        rows = (width - 1) + (draft - 1)
        slots = [2, -1, 4]
        x = torch.randn(len(slots) * draft, dim, generator=gen).to(dtype)
        weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
        bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
        pool = torch.randn(5, rows, dim, generator=gen).to(dtype)
        idx = torch.tensor(slots, dtype=torch.int32)

        ref_pool = pool.float().clone()
        ref = conv.causal_conv1d_verify(x.float(), ref_pool, weight.float(), bias.float(), "silu", idx, draft)
        dev_pool = pool.to(device).clone()
        out, ms = _timed(device, lambda: conv.causal_conv1d_verify(
            x.to(device), dev_pool, weight.to(device), bias.to(device), "silu", idx.to(device), draft))
        live = torch.tensor([i for i, sl in enumerate(slots) if sl != -1 for i in range(i * draft, (i + 1) * draft)])
        err = max(_err(out.cpu().index_select(0, live), ref.index_select(0, live)), _err(dev_pool.cpu(), ref_pool))
        return err, ms

    return case


# --------------------------------------------------------------------------- GDN


def _gdn_inputs(lens, hk, hv, dim, seed, dtype, state_dtype=None):
    """Inputs in ``dtype``, initial states in ``state_dtype`` (default: ``dtype``: a 16-bit pool that
    the 16-bit kernels serve; an fp32 pool never reaches them)."""
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = torch.randn(1, T, hk, dim, generator=gen).to(dtype)
    k = torch.randn(1, T, hk, dim, generator=gen).to(dtype)
    v = torch.randn(1, T, hv, dim, generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).to(dtype)
    cu = torch.tensor([0] + list(lens)).cumsum(0).to(torch.int32)
    h0 = torch.randn(len(lens), hv, dim, dim, generator=gen) * 0.1
    h0[1::2] = 0  # mixed: every other sequence starts from zeros
    return q, k, v, g, beta, cu, h0.to(state_dtype or dtype)


def _gdn_prefill_case(hk: int, hv: int, dtype: torch.dtype = torch.float16
                      ) -> Callable[[str, bool], tuple[float, float]]:
    def run(device: str, quick: bool) -> tuple[float, float]:
        from sglang_ascend_hybrid.ops import gdn

        lens = [21, 11] if quick else [50, 13, 65]
        q, k, v, g, beta, cu, h0 = _gdn_inputs(lens, hk, hv, 128, 10 + hv, dtype)
        ref_o, ref_final = gdn.chunk_gated_delta_rule(
            q.float(), k.float(), v.float(), g, beta.float(), cu_seqlens=cu.long(), initial_state=h0,
            use_qk_l2norm=True, backend="torch")
        d = device
        (o, final), ms = _timed(device, lambda: gdn.chunk_gated_delta_rule(
            q.to(d), k.to(d), v.to(d), g.to(d), beta.to(d), cu_seqlens=cu.to(d), initial_state=h0.to(d),
            use_qk_l2norm=True))
        return max(_err(o, ref_o), _err(final, ref_final)), ms

    return run


def _gdn_decode_case(device: str, quick: bool) -> tuple[float, float]:
    """The public decode op (precomputed gates) on the GDN decode ladder, a padding slot."""
    from sglang_ascend_hybrid.ops import gdn

    hk, hv, dim = (2, 4, 128) if quick else (4, 8, 128)
    slots = [2, -1, 0, 3]
    # The recurrent op is bf16-only (inputs and state pool).
    q, k, v, g, beta, _, _ = _gdn_inputs([len(slots)], hk, hv, dim, 7, torch.bfloat16)
    pool = (torch.randn(5, hv, dim, dim, generator=torch.Generator().manual_seed(8)) * 0.1).bfloat16()
    idx = torch.tensor(slots, dtype=torch.int32)
    ref_pool = pool.clone()
    ref = gdn.recurrent_gated_delta_rule(q.float(), k.float(), v.float(), g, beta.float(),
                                         state_pool=ref_pool, state_indices=idx.long(),
                                         use_qk_l2norm=True, backend="torch")
    d = device
    dev_pool = pool.to(d)
    out, ms = _timed(device, lambda: gdn.recurrent_gated_delta_rule(
        q.to(d), k.to(d), v.to(d), g.to(d), beta.to(d), state_pool=dev_pool, state_indices=idx.to(d),
        use_qk_l2norm=True))
    return max(_err(out, ref), _err(dev_pool, ref_pool)), ms


def _decode_entry() -> str:
    """The Triton decode entry the installed SGLang imports (the newer one where SGLang says none)."""
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    return decode_contract.installed_decode_entry() or "optimized"


def _gdn_serving_decode_case(device: str, quick: bool) -> tuple[float, float]:
    """SGLang's plain GDN decode step on the GDN decode ladder (raw q / k, gating inputs, the
    value-first pool), a padded request as SGLang's graph replay pads (slot 0, length 0)."""
    from sglang_ascend_hybrid.envs import ENV
    from sglang_ascend_hybrid.ops.gdn import decode

    hk, hv, dim = (2, 4, 128) if quick else (4, 8, 128)
    gen = torch.Generator().manual_seed(9)
    slots = [2, 4, 0, 0]
    B = len(slots)
    q, k = (torch.randn(1, B, hk, dim, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(1, B, hv, dim, generator=gen).bfloat16()
    a, b = (torch.randn(B, hv, generator=gen).bfloat16() for _ in range(2))
    A_log, dt_bias = torch.randn(hv, generator=gen) * 0.5, torch.randn(hv, generator=gen) * 0.5
    pool = (torch.randn(5, hv, dim, dim, generator=gen) * 0.1).bfloat16()
    idx = torch.tensor(slots, dtype=torch.int32)
    qsl = torch.tensor([0, 1, 2, 3, 3], dtype=torch.int32)       # the last request is padding

    def call(dev, p, dtype=torch.bfloat16):
        return decode.DecodeCall(q.to(dev, dtype), k.to(dev, dtype), v.to(dev, dtype), a.to(dev, dtype),
                                 b.to(dev, dtype), A_log.to(dev), dt_bias.to(dev), p, idx.to(dev), qsl.to(dev),
                                 entry=_decode_entry())

    ref_pool = pool.float()
    ref = decode.run_decode(call("cpu", ref_pool, torch.float32), backend="torch")
    dev_pool = pool.to(device)
    forced = ENV.GDN_BACKEND.get()       # the serving hook's rung choice: the environment or the ladder
    backend = forced if forced in decode.decode_rungs() else "auto"
    out, ms = _timed(device, lambda: decode.run_decode(call(device, dev_pool), backend=backend))
    return max(_err(out, ref), _err(dev_pool, ref_pool)), ms


def _triton_decode_emulators() -> dict:
    """A Triton decode kernel that addresses the pool value first (the readable source's key-first
    build never serves: its probe verdict keeps the rung off)."""
    from sglang_ascend_hybrid.emulators import gdn_decode as emu

    return emu.emulators(_decode_entry(), layout="value_first")


def _triton_decode_unproven() -> Optional[str]:
    """On a device: why the installed Triton decode kernel is not the ladder's to run (its probe
    verdict at the check's signature is not value-first), or None."""
    from sglang_ascend_hybrid.ops.gdn import decode

    verdict = decode.probe_before_serving(_decode_entry(), torch.bfloat16, torch.bfloat16, 128, 128, "npu")
    if verdict is not None and verdict.usable:
        return None
    return ("the decode ladder does not run it here: its layout probe found it "
            f"{'unreachable' if verdict is None else verdict.verdict}")


def _gdn_verify_case(device: str, quick: bool) -> tuple[float, float]:
    from sglang_ascend_hybrid.ops.gdn import verify as gv

    B, S, nk, nv, dim = (2, 3, 2, 4, 128) if quick else (4, 4, 4, 8, 128)
    gen = torch.Generator().manual_seed(12)
    mix = torch.randn(B, S, 2 * nk * dim + nv * dim, generator=gen).bfloat16()
    pool = (torch.randn(B + 2, nv, dim, dim, generator=gen) * 0.1).bfloat16()
    inter = torch.zeros((B + 1) * S, nv, dim, dim, dtype=torch.bfloat16)
    beta = torch.randn(B, S, nv, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(B, S, nv, generator=gen) + 2.0)
    cache = torch.arange(1, B + 1, dtype=torch.int32)
    lens = torch.tensor([S] + [max(1, S - 1)] * (B - 1), dtype=torch.int32)
    idx = torch.arange(B * S, dtype=torch.int32).view(B, S)
    nat = torch.ones(B, dtype=torch.int32)

    def make(d, p, i):
        return gv.VerifyCall(mix.to(d), p, beta.to(d), g.to(d), dim ** -0.5, lens.to(d), idx.to(d), nk, nv,
                             intermediate_state=i, cache_indices=cache.to(d), num_accepted_tokens=nat.to(d))

    ref_inter = inter.float()
    ref = gv.recurrent_verify(make("cpu", pool.float(), ref_inter), backend="torch")
    dev_inter = inter.to(device)
    out, ms = _timed(device, lambda: gv.recurrent_verify(make(device, pool.to(device), dev_inter)))
    return max(_err(out, ref), _err(dev_inter, ref_inter)), ms


def _gdn_verify_gates_case(device: str, quick: bool) -> tuple[float, float]:
    """A verify step's gates at a token count sgl-kernel-npu's without-sigmoid kernel cannot tile (100 tokens x 6
    heads: blocks of 3), as the gdn-verify-gates hook serves them, against the fp64 formula."""
    from sglang_ascend_hybrid.ops.gdn import verify_gates

    T, H = 100, 6
    gen = torch.Generator().manual_seed(13)
    A_log, dt_bias = torch.randn(H, generator=gen) * 0.5, torch.randn(H, generator=gen)
    a, b = (torch.randn(T, H, generator=gen) * 2).bfloat16(), torch.randn(T, H, generator=gen).bfloat16()
    want = -A_log.double().exp() * F.softplus(a.double() + dt_bias.double())
    (g, beta), ms = _timed(device, lambda: verify_gates.verify_gates(A_log.to(device), a.to(device), b.to(device),
                                                                     dt_bias.to(device)))
    return max(_err(g, want[None]), _err(beta, b)), ms


def _gdn_emulators(*names: str) -> Callable[[], dict]:
    def build() -> dict:
        from sglang_ascend_hybrid.emulators import gdn_sets

        ops = gdn_sets.emulators()
        return {n: ops[n] for n in names}

    return build


# --------------------------------------------------------------------------- packed attention


def _attention_case(dtype: torch.dtype) -> Callable[[str, bool], tuple[float, float]]:
    def run(device: str, quick: bool) -> tuple[float, float]:
        from sglang_ascend_hybrid.ops.attention import api as pa
        from sglang_ascend_hybrid.ops.attention.cases import packed_case
        from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch

        # two-sided, KV-only, query-only, two-sided, empty on both sides
        q_lens, k_lens = ([3, 0, 4, 5, 0], [4, 6, 0, 7, 0]) if quick else ([9, 0, 11, 16, 0], [12, 20, 0, 24, 0])
        case = packed_case(q_lens, k_lens, num_heads=4, num_kv_heads=2, head_dim=128,
                           dtype=dtype, seed=3)
        ref_out, ref_lse = packed_attention_torch(case.q.float(), case.k.float(), case.v.float(),
                                                      case.q_bounds, case.k_bounds, case.scale)
        args = [t.to(device) for t in case.args()]
        (out, lse), ms = _timed(device, lambda: pa.fused_infer_attention_varlen(*args, **case.kwargs()))
        lse, ref_lse = lse.float().cpu(), ref_lse.float().cpu()
        ninf, ref_ninf = torch.isneginf(lse), torch.isneginf(ref_lse)
        if not torch.equal(ninf, ref_ninf):
            raise AssertionError(f"-inf LSE entries differ from the reference "
                                 f"({int((ninf != ref_ninf).sum())} mismatching)")
        fin = ~ref_ninf
        return max(_err(out, ref_out), _err(lse[fin], ref_lse[fin])), ms

    return run


def _attention_emulators() -> dict:
    from sglang_ascend_hybrid.emulators import fused_infer_attention as emu

    return emu.emulators()


# --------------------------------------------------------------------------- the checks


_GDN_MEGA = {"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "mega"}


def checks() -> list[Check]:
    """Each check names the rung it exercises; the ops it expects to see served are that rung's
    (:attr:`Rung.ops`), so a rung that calls another op changes the expectation with it."""
    from sglang_ascend_hybrid.ops import catalog
    from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING, OP_MEGA, OP_NPU_CHUNK, OP_NPU_RECURRENT
    from sglang_ascend_hybrid.ops.gdn.decode import DECODE
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
    from sglang_ascend_hybrid.ops.gdn.decode.gates import GATES

    DECODE_LADDER = DECODE.op

    def served(ladder: str, rung: str) -> tuple[str, ...]:
        return catalog.rung(ladder, rung).ops

    return [
        Check("causal_conv1d_fn", "varlen fp16 W=4 pad/short/init (v2)", _conv_fn_case, TOL_CONV,
              _conv_emulators("v2"), served("causal_conv1d_fn", "npu_v2"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_v2"}),
        Check("causal_conv1d_fn", "varlen fp16 W=4 pad/short/init (aclnn)", _conv_fn_case, TOL_CONV,
              _conv_emulators("aclnn"), served("causal_conv1d_fn", "npu_aclnn"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_aclnn"}),
        Check("causal_conv1d_update", "decode fp16 W=4 pad slot (v2)", _conv_update_case, TOL_CONV,
              _conv_emulators("v2"), served("causal_conv1d_update", "npu_v2"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_v2"}),
        Check("causal_conv1d_update", "decode fp16 W=4 pad slot (aclnn)", _conv_update_case, TOL_CONV,
              _conv_emulators("aclnn"), served("causal_conv1d_update", "npu_aclnn"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_aclnn"}),
        Check("causal_conv1d_verify", "verify fp16 W=4 4 drafts pad slot (aclnn spec mode)", _conv_verify_case(4),
              TOL_CONV, _conv_emulators("aclnn"), served("causal_conv1d_verify", "npu_aclnn"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_aclnn"}),
        Check("causal_conv1d_verify", "verify fp16 W=3 4 drafts pad slot (update_v2 spec mode)",
              _conv_verify_case(3), TOL_CONV, _conv_emulators("update_v2"),
              served("causal_conv1d_verify", "npu_update_v2"),
              npu_env={"SGLANG_ASCEND_HYBRID_CONV_BACKEND": "npu_update_v2"}),
        Check("chunk_gated_delta_rule", "heads (6,2) D=128 bf16, bf16 state (npu op)",
              _gdn_prefill_case(2, 6, torch.bfloat16), TOL_GDN_BF16,
              _gdn_emulators(OP_NPU_CHUNK), served("gdn_prefill", "npu_chunk"),
              npu_env={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "npu_chunk"}),
        Check("chunk_gated_delta_rule", "heads (16,8) D=128 fp16 native (mega)", _gdn_prefill_case(8, 16), TOL_GDN,
              _gdn_emulators(OP_MEGA), served("gdn_prefill", "mega"), npu_env=_GDN_MEGA),
        Check("chunk_gated_delta_rule", "heads (6,2) D=128 fp16 planned (mega)", _gdn_prefill_case(2, 6), TOL_GDN,
              _gdn_emulators(OP_MEGA), served("gdn_prefill", "mega"), npu_env=_GDN_MEGA),
        # the GDN decode ladder (gdn_serving_decode), one check per device rung, and the public op on it
        Check("gdn decode", "SGLang's decode step D=128 bf16 pool, padded row (triton decode)",
              _gdn_serving_decode_case, TOL_GDN_BF16, _triton_decode_emulators,
              (decode_contract.DECODE_ENTRIES[_decode_entry()],),
              npu_env={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "triton_decode"}, npu_unproven=_triton_decode_unproven),
        Check("gdn decode", "SGLang's decode step D=128 bf16 pool, padded row (npu recurrent)",
              _gdn_serving_decode_case, TOL_GDN_BF16, _gdn_emulators(OP_NPU_RECURRENT),
              served(DECODE_LADDER, "npu_recurrent"), npu_env={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "npu_recurrent"}),
        Check("gdn decode", "SGLang's decode step D=128 bf16 pool, padded row (npu recurrent, fused gating)",
              _gdn_serving_decode_case, TOL_GDN_BF16, _gdn_emulators(OP_NPU_RECURRENT, OP_GATING),
              served(DECODE_LADDER, "npu_recurrent") + served(GATES.op, "npu_gating"),
              npu_env={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "npu_recurrent"}),
        Check("recurrent_gated_delta_rule", "decode D=128 bf16 pad slot (npu recurrent)", _gdn_decode_case,
              TOL_GDN_BF16, _gdn_emulators(OP_NPU_RECURRENT), served(DECODE_LADDER, "npu_recurrent"),
              npu_env={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "npu_recurrent"}),
        Check("recurrent_gated_delta_rule", "verify S<=4 D=128 bf16 (MTP)", _gdn_verify_case, TOL_GDN_BF16,
              _gdn_emulators(OP_NPU_RECURRENT), served("gdn_verify", "npu_recurrent")),
        Check("gdn verify gates", "100 tokens x 6 heads, past the without-sigmoid kernel's tiling (fused gating)",
              _gdn_verify_gates_case, TOL_GATES, _gdn_emulators(OP_GATING), served("gdn_verify_gates", "npu_gating")),
        # The real op takes head dim 128 (or 192 / 128): no other head dim on a device.
        Check("fused_infer_attention_varlen", "bf16 D=128 KV-only + query-only", _attention_case(torch.bfloat16),
              TOL_ATTN, _attention_emulators, served("packed_attention", "npu_fia")),
        Check("fused_infer_attention_varlen", "fp16 D=128 KV-only + query-only", _attention_case(torch.float16),
              TOL_ATTN, _attention_emulators, served("packed_attention", "npu_fia")),
    ]


def _counting(ops: dict, calls: dict) -> dict:
    def wrap(name, fn):
        def counted(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)

        return counted

    return {name: wrap(name, fn) for name, fn in ops.items()}




def run_check(check: Check, device: str, quick: bool) -> Result:
    calls: dict[str, int] = {}
    if device == "npu":
        absent = [n.rsplit(":", 1)[-1] for n in check.expect if not seam.available(n)]
        if absent:
            return Result(check.op, check.case, math.nan, check.tolerance, math.nan, True,
                          f"kernel not installed: {', '.join(absent)}", skipped=True)
        unproven = check.npu_unproven() if check.npu_unproven is not None else None
        if unproven:
            return Result(check.op, check.case, math.nan, check.tolerance, math.nan, True, unproven, skipped=True)
    try:
        if device == "cpu":
            with seam.install_emulators(_counting(check.emulators(), calls)):
                err, ms = check.run(device, quick)
        else:
            with temporary_env(check.npu_env):
                err, ms = check.run(device, quick)
    except Exception as exc:  # noqa: BLE001  (a crash is a failed check, not a crashed selftest)
        return Result(check.op, check.case, math.nan, check.tolerance, math.nan, False,
                      f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
    ok = err <= check.tolerance
    note = ""
    if device == "cpu":
        missing = [n.rsplit(":", 1)[-1] for n in check.expect if not calls.get(n)]
        if missing:
            ok = False
            note = f"device kernel not called: {', '.join(missing)}"
    return Result(check.op, check.case, err, check.tolerance, ms, ok, note)


def run_all(device: str = "cpu", quick: bool = False) -> list[Result]:
    return [run_check(c, device, quick) for c in checks()]


def time_column(device: str) -> str:
    """What the time column measures: one call's wall time, of the CPU emulators standing in for
    the device kernels on ``cpu`` (not the ops' speed on a device), of the real kernels on ``npu``."""
    return "emulator wall (ms)" if device == "cpu" else "npu wall (ms)"


TIME_NOTES = {
    "cpu": "times: one call each, wall clock, of the pure-torch CPU emulators standing in for the device "
           "kernels -- they say nothing about the ops' speed on an NPU",
    "npu": "times: one call each (the first: compilation and caching included), wall clock with the "
           "device synchronised before and after",
}


def format_table(results: list[Result], device: str = "cpu") -> str:
    head = ("op", "case", "max abs error", "tolerance", time_column(device), "verdict")
    rows = [(r.op, r.case, f"{r.error:.3e}", f"{r.tolerance:.1e}", f"{r.ms:.1f}",
             r.verdict) for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r, row in zip(results, rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if r.note:
            lines.append(f"    ^ {r.note}")
    lines.append(TIME_NOTES[device])
    return "\n".join(lines)


def main(args) -> int:
    from sglang_ascend_hybrid.tools.console import error

    device = getattr(args, "device", "cpu") or "cpu"
    quick = bool(getattr(args, "quick", False))
    if device not in ("cpu", "npu"):
        error("selftest", f"--device {device!r}: expected 'cpu' or 'npu'")
        return 2
    if device == "npu":
        ok, why = npu_status()
        if not ok:
            error("selftest", f"--device npu: no NPU is usable here ({why}); "
                  "run with --device cpu to test the plugin with the CPU emulators")
            return 2
    mode = "CPU emulators behind the device seam" if device == "cpu" else "real NPU kernels"
    print(f"sglang-ascend-hybrid selftest: device={device} ({mode}){' quick' if quick else ''}; "
          "references: pure torch, fp32 on CPU")
    results = run_all(device, quick)
    print(format_table(results, device))
    failed = [r for r in results if not r.ok]
    skipped = sum(r.skipped for r in results)
    print(f"{len(results) - len(failed) - skipped}/{len(results)} checks passed"
          + (f", {skipped} skipped" if skipped else "")
          + (f"; FAILED: {', '.join(f'{r.op} [{r.case}]' for r in failed)}" if failed else ""))
    return 1 if failed else 0
