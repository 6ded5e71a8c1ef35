"""``sglang-ascend-hybrid rehearse``: an operator's launch, rehearsed on the emulated Ascend device.

``rehearse --model-path DIR [sglang flags]`` reads ``DIR/config.json``, shrinks the model to tiny sizes
while keeping what decides which kernels serve -- the architecture, the layer pattern (one period of
it), every head count (so the per-rank head layout at the flags' ``--tp-size`` is the real one), the
head dimensions and conv width -- writes a random-weight checkpoint of it, starts SGLang's real Engine
with the operator's flags on the emulated device, serves a few greedy requests (a long prompt in
chunks, short ones, then two that share the long prompt's prefix) and reports: what SGLang and the
plugin adjusted at startup, the plugin's kernels that served, the device ops that ran, the cached
tokens, and whether the tokens matched transformers.  A combination of flags that fails says why in
one message.

What it does not show: the real model's numerics (the weights are random and tiny), real NPU kernels
(each device op is a CPU emulator of its contract), HCCL, memory pressure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Optional

from sglang_ascend_hybrid.tools.console import PROG

TINY_HIDDEN = 64
TINY_VOCAB = 160
TINY_INTERMEDIATE = 128
TINY_EXPERT_INTERMEDIATE = 32
MIN_LAYERS = 4
LANGUAGE_MODEL_ONLY = "language_model_only"  # SGLang's multimodal configs: serve the text backbone only

# Flags a rehearsal sets unless the operator's flags do: the emulated device, no tokenizer (the
# requests are token ids), and pools sized for a CPU.
DEFAULT_FLAGS = {
    "--device": "npu",
    "--attention-backend": "ascend_hybrid",
    "--max-total-tokens": "4096",
    "--max-mamba-cache-size": "48",
    "--max-running-requests": "8",
    "--chunked-prefill-size": "128",
}
FLAGS_WITHOUT_VALUE = ("--skip-tokenizer-init",)


class RehearsalError(RuntimeError):
    """A rehearsal that cannot run, in one message."""


# --------------------------------------------------------------------------- the tiny model


def _layer_period(text: dict) -> int:
    """How many leading layers hold every kind of layer the model has (one period of its pattern)."""
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        seen, need = set(), set(kinds)
        for i, kind in enumerate(kinds):
            seen.add(kind)
            if seen == need:
                return max(MIN_LAYERS, i + 1)
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return max(MIN_LAYERS, interval)
    return MIN_LAYERS


def shrink_text(text: dict) -> dict:
    """A text config cut to tiny widths; head counts, head dims, conv width and the layer pattern kept."""
    out = dict(text)
    layers = min(_layer_period(text), int(text.get("num_hidden_layers", MIN_LAYERS)))
    out["num_hidden_layers"] = layers
    if isinstance(text.get("layer_types"), list):
        out["layer_types"] = text["layer_types"][:layers]
    heads = int(text.get("num_attention_heads", 4))
    head_dim = text.get("head_dim")
    if head_dim is None:  # head_dim = hidden / heads (LFM2): keep a small head dim, the real head count
        out["hidden_size"] = heads * 16
    else:
        out["hidden_size"] = TINY_HIDDEN
    for name in ("conv_dim", "conv_dim_out", "block_dim"):
        if name in out:
            out[name] = out["hidden_size"]
    for name in ("intermediate_size", "block_ff_dim"):
        if name in out:
            out[name] = TINY_INTERMEDIATE
    if "block_multiple_of" in out:
        out["block_multiple_of"] = 32
    for name in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if name in out:
            out[name] = TINY_EXPERT_INTERMEDIATE
    if "num_experts" in out and "num_experts_per_tok" in out:
        out["num_experts"] = max(8, int(out["num_experts_per_tok"]) * 2)
    out["vocab_size"] = TINY_VOCAB
    out["max_position_embeddings"] = min(int(text.get("max_position_embeddings", 512)), 512)
    out.pop("torch_dtype", None)
    out.pop("dtype", None)
    return out


def shrink_config(config: dict) -> dict:
    """The whole config: its text part shrunk, a vision tower (kept for the architecture) cut to one layer."""
    out = dict(config)
    if isinstance(config.get("text_config"), dict):
        out["text_config"] = shrink_text(config["text_config"])
        hidden = out["text_config"]["hidden_size"]
    else:
        out = shrink_text(config)
        hidden = out["hidden_size"]
    vision = config.get("vision_config")
    if isinstance(vision, dict):
        out["vision_config"] = {**vision, "depth": 1, "num_hidden_layers": 1, "hidden_size": 32,
                                "intermediate_size": 64, "num_heads": 2, "num_attention_heads": 2,
                                "out_hidden_size": hidden}
        # a rehearsal sends token ids only: SGLang serves the language model alone (no image processor)
        out[LANGUAGE_MODEL_ONLY] = True
    return out


def _randomize(model, seed: int = 0) -> None:
    """Seeded weights with unit-scale activations (norm weights near their identity, matrices
    ~ N(0, 1/fan_in)), so greedy decoding has clear margins."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                owner = type(model.get_submodule(name.rsplit(".", 1)[0])).__name__ if "." in name else ""
                centred = owner.startswith("Qwen3") and "RMSNorm" in owner and "Gated" not in owner
                base = 0.0 if centred or "norm" not in name else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed" in name:
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)


def write_checkpoint(config: dict, dest: str, dtype: str) -> None:
    """Random weights of ``config``'s architecture, saved as transformers saves that checkpoint."""
    import torch
    import transformers

    with open(os.path.join(dest, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    arch = (config.get("architectures") or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None:
        raise RehearsalError(f"config.json names architecture {arch!r}, which the installed transformers "
                             f"({transformers.__version__}) does not have: no reference model to rehearse against")
    hf_config = transformers.AutoConfig.from_pretrained(dest)
    torch.manual_seed(0)
    model = cls(hf_config).eval()
    _randomize(model)
    model.to(getattr(torch, dtype)).save_pretrained(dest, safe_serialization=True)


# --------------------------------------------------------------------------- the launch


def _flag_value(argv: list[str], *names: str) -> Optional[str]:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def rehearsal_flags(user_flags: list[str]) -> list[str]:
    """The operator's flags plus :data:`DEFAULT_FLAGS` they do not set."""
    flags = list(user_flags)
    for name, value in DEFAULT_FLAGS.items():
        if _flag_value(flags, name) is None:
            flags += [name, value]
    for name in FLAGS_WITHOUT_VALUE:
        if name not in flags:
            flags.append(name)
    return flags


def model_dtype(config: dict, flags: list[str]) -> str:
    asked = _flag_value(flags, "--dtype")
    if asked in ("float32", "bfloat16", "float16"):
        return asked
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return str(text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16").replace("torch.", "")


def rounds():
    from sglang_ascend_hybrid.testing.runtime.session import Request

    long = [3 + (7 * i) % 150 for i in range(303)]
    return [[Request(long, 8), Request([7, 8, 9, 10, 11, 12], 8)],
            [Request(long[:300] + [20, 21], 8)]]


def rehearse(model_path: str, user_flags: list[str], out=sys.stdout) -> int:
    from sglang_ascend_hybrid.testing.runtime import session

    path = os.path.join(model_path, "config.json") if os.path.isdir(model_path) else model_path
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise RehearsalError(f"--model-path {model_path!r}: cannot read a config.json ({exc})") from None
    tiny = shrink_config(config)
    flags = rehearsal_flags(user_flags)
    dtype = model_dtype(config, flags)
    print(f"rehearsing {os.path.basename(os.path.normpath(model_path))} "
          f"({(config.get('architectures') or ['?'])[0]}) with: {' '.join(flags)}", file=out)
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        write_checkpoint(tiny, tmp, dtype)
        env = {"SGLANG_MAMBA_CONV_DTYPE": dtype} if dtype == "float32" else {}
        if dtype == "float32":
            env["SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32"] = "1"
        try:
            served = session.serve(tmp, rounds(), argv=flags, env_extra=env)
        except session.RuntimeRunError as exc:
            raise RehearsalError(_first_error(str(exc))) from None
        ref = session.reference(tmp, served, rounds(), dtype=dtype)
        report(served, session.compare(served, ref), out)
    return 0


def _first_error(log: str) -> str:
    """The line of a failed launch that says why (the last exception line of the log)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception")) or head.endswith("Unavailable"):
            return line
    return lines[-1] if lines else "the launch failed with no output"


def report(served, comparison, out=sys.stdout) -> None:
    print(f"startup {served.startup_s:.1f} s on the emulated device", file=out)
    if served.adjusted:
        print("adjusted at startup (SGLang and the plugin):", file=out)
        for name, asked, final in served.adjusted:
            print(f"  {name}: {asked!r} -> {final!r}", file=out)
    for line in served.log.splitlines():
        if "sglang-ascend-hybrid:" in line:
            print("  " + line.split("sglang-ascend-hybrid:", 1)[1].strip(), file=out)
    print("plugin kernels that served:", file=out)
    for op, rung in sorted(served.rungs()):
        print(f"  {op}: {rung}", file=out)
    print("device ops that ran: " + ", ".join(sorted(served.device_ops())), file=out)
    print("requests:", file=out)
    for line in comparison.detail:
        print("  " + line, file=out)
    verdict = "matched" if comparison.tokens_equal else (
        "matched where transformers' choice is decisive" if comparison.decisive_equal else "DID NOT match")
    print(f"transformers: {verdict} (largest log-probability gap {comparison.max_gap:.3g})", file=out)


def main(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        return rehearse(args.model_path, extra)
    except RehearsalError as exc:
        print(f"{PROG} rehearse: {exc}", file=sys.stderr)
        return 1
