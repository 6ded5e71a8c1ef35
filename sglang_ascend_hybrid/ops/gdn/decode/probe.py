"""The probe of the Triton GDN decode kernel's state layout (``gdn-decode-layout``).

It runs the installed decode entry once on a private pool of four slots: three requests (slots
2 and 0, and one padding row with index -1) of one token, two value heads sharing one key head,
head dims of the serving signature (K == V in every Qwen3.5 / 3.6 / Qwen3-Next: the random state
is not symmetric, so its transpose gives another output).  The output and the pool after the call
are compared with the fp64 reference (:func:`.reference.naive_gated_decode`) under each
hypothesis: the pool read value first (SGLang's layout) or key first (the readable source's
addressing).  Slots 1 and 3 must come back bit-identical, and the padding row must leave every slot
alone; the error is the largest difference relative to the reference's largest magnitude.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.ops.gdn.decode.naive import naive_gated_decode
from sglang_ascend_hybrid.ops.signature import dtype_name

PROBE = probes.register(probes.Probe(
    "gdn-decode-layout", "the SSM state layout the installed Triton GDN decode kernel reads and writes",
    {dc.VALUE_FIRST: dc.LAYOUT_VERDICTS[dc.VALUE_FIRST], dc.KEY_FIRST: dc.LAYOUT_VERDICTS[dc.KEY_FIRST],
     dc.NEITHER: dc.LAYOUT_VERDICTS[dc.NEITHER], dc.REFUSED: dc.LAYOUT_VERDICTS[dc.REFUSED]}))

SLOTS = (2, -1, 0)   # request -> slot (-1: padding)
NUM_SLOTS = 4        # slots 1 and 3 are never named: they must not change
_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 4e-2}


def signature(entry: str, q_dtype: torch.dtype, pool_dtype: torch.dtype, head_dim_k: int, head_dim_v: int) -> str:
    return f"{entry} q={dtype_name(q_dtype)} pool={dtype_name(pool_dtype)} K={head_dim_k} V={head_dim_v}"


def _inputs(K, V):
    gen = torch.Generator().manual_seed(20261201)
    B, H, HV = len(SLOTS), 1, 2
    r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    return dict(
        A_log=(0.3 * r(HV)).float(), a=r(B, HV), dt_bias=0.5 * r(HV), b=r(B, HV),
        q=r(1, B, H, K), k=r(1, B, H, K), v=r(1, B, HV, V),
        pool=r(NUM_SLOTS, HV, V, K) / K ** 0.5,
    )


def _hypothesis(pool: torch.Tensor, key_first: bool) -> torch.Tensor:
    """The value-first [slots, Hv, V, K] states a kernel of that layout sees in ``pool``'s memory."""
    n, hv, v, k = pool.shape
    return pool.reshape(n, hv, k, v).transpose(-1, -2) if key_first else pool


def _as_memory(states: torch.Tensor, key_first: bool) -> torch.Tensor:
    """The memory such a kernel leaves for value-first ``states``, viewed as the pool's shape."""
    n, hv, v, k = states.shape
    return states.transpose(-1, -2).reshape(n, hv, v, k) if key_first else states


def measure(entry: str, q_dtype: torch.dtype, pool_dtype: torch.dtype, head_dim_k: int, head_dim_v: int,
            device) -> probes.Verdict:
    """Run the probe now (no caching): the verdict and the errors under each hypothesis."""
    sig = signature(entry, q_dtype, pool_dtype, head_dim_k, head_dim_v)
    x = _inputs(head_dim_k, head_dim_v)
    dev = torch.device(device)
    qd = {k: x[k].to(dev, q_dtype) for k in ("q", "k", "v", "a", "b", "dt_bias")}
    A_log = x["A_log"].to(dev)
    pool = x["pool"].to(dev, pool_dtype).contiguous()
    before = pool.detach().cpu().clone()
    idx = torch.tensor(SLOTS, dtype=torch.int32, device=dev)
    cu = torch.arange(len(SLOTS) + 1, dtype=torch.int32, device=dev)
    out = seam.call(dc.DECODE_ENTRIES[entry], A_log=A_log, a=qd["a"], dt_bias=qd["dt_bias"], softplus_beta=1.0,
                    softplus_threshold=20.0, q=qd["q"], k=qd["k"], v=qd["v"], b=qd["b"],
                    initial_state_source=pool, initial_state_indices=idx, cu_seqlens=cu,
                    use_qk_l2norm_in_kernel=True)
    got_o = out.detach().float().cpu().reshape(len(SLOTS), 2, head_dim_v)
    got_pool = pool.detach().cpu()
    errors = {}
    live = [i for i, s in enumerate(SLOTS) if s >= 0]
    rows = [SLOTS[i] for i in live]
    for layout, key_first in ((dc.VALUE_FIRST, False), (dc.KEY_FIRST, True)):
        states = _hypothesis(before.double(), key_first)
        start = torch.stack([states[s] if s >= 0 else torch.zeros_like(states[0]) for s in SLOTS])
        o_ref, new = naive_gated_decode(
            A_log.cpu(), qd["a"].cpu(), qd["dt_bias"].cpu(), qd["q"][0].cpu(), qd["k"][0].cpu(), qd["v"][0].cpu(),
            qd["b"].cpu(), start, l2norm="kernel")
        after = states.clone()
        for i in live:
            after[SLOTS[i]] = new[i]
        mem = _as_memory(after, key_first)
        o_scale = float(o_ref.abs().max()) or 1.0
        s_scale = float(mem[rows].abs().max()) or 1.0
        err_o = float((got_o[live].double() - o_ref[live]).abs().max()) / o_scale
        err_s = float((got_pool[rows].double() - mem[rows]).abs().max()) / s_scale
        errors[layout] = max(err_o, err_s)
    untouched = [s for s in range(NUM_SLOTS) if s not in rows]
    kept = bool(torch.equal(got_pool[untouched], before[untouched]))
    tol = max(_TOL.get(q_dtype, 4e-2), _TOL.get(pool_dtype, 4e-2))
    detail = (f"relative error value-first {errors[dc.VALUE_FIRST]:.3g}, key-first {errors[dc.KEY_FIRST]:.3g}, "
              f"tolerance {tol:g}, unnamed slots {'kept' if kept else 'CHANGED'}")
    for layout in (dc.VALUE_FIRST, dc.KEY_FIRST):
        if kept and errors[layout] <= tol:
            return probes.Verdict(PROBE.name, sig, layout, layout == dc.VALUE_FIRST, detail)
    return probes.Verdict(PROBE.name, sig, dc.NEITHER, False, detail)


def layout_verdict(entry: str, q_dtype: torch.dtype, pool_dtype: torch.dtype, head_dim_k: int, head_dim_v: int,
                   device, *, before_serving: bool = False):
    """The recorded verdict for this signature, probing once if needed (None inside a capture)."""
    sig = signature(entry, q_dtype, pool_dtype, head_dim_k, head_dim_v)
    return probes.verdict(PROBE.name, sig,
                          lambda: measure(entry, q_dtype, pool_dtype, head_dim_k, head_dim_v, device),
                          before_serving=before_serving)
