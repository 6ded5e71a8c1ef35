"""transformers' log-probabilities of SGLang's greedy tokens, in a process without the emulated device.

``python -m sglang_ascend_hybrid.testing.runtime.reference_worker SPEC OUT``: SPEC is
``{"model_path", "dtype", "sequences": [{"input_ids", "output_ids"}, ...]}``; for each sequence the
model recomputes the whole history (teacher forcing on SGLang's tokens) and OUT receives, per
generated token, transformers' log-probability of SGLang's token, its own greedy token and its
top-1 / top-2 log-probability margin.  transformers' own torch paths serve the GDN and conv
functions (not FLA's Triton kernels, which need a GPU driver).
"""

from __future__ import annotations

import json
import sys

_HUB_KERNEL_NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                     "causal_conv1d_update")


def _torch_paths(model) -> None:
    """transformers swaps its GDN / conv functions for FLA's kernels when ``fla`` imports; use the
    decorated functions' own torch implementations (``__wrapped__``)."""
    for module in {sys.modules[type(m).__module__] for m in model.modules()}:
        for name in _HUB_KERNEL_NAMES:
            fn = getattr(module, name, None)
            if fn is not None and getattr(fn, "__wrapped__", None) is not None:
                setattr(module, name, fn.__wrapped__)


def _load(transformers, path: str, dtype):
    """The checkpoint's transformers model: a causal LM, or an image-text-to-text model (LFM2-VL)
    whose text requests run through its language model."""
    config = transformers.AutoConfig.from_pretrained(path)
    auto = transformers.AutoModelForCausalLM
    if type(config) not in auto._model_mapping:
        auto = transformers.AutoModelForImageTextToText
    return auto.from_pretrained(path, torch_dtype=dtype, attn_implementation="eager").eval()


def run(spec: dict) -> dict:
    import torch
    import transformers

    dtype = getattr(torch, spec.get("dtype", "float32"))
    model = _load(transformers, spec["model_path"], dtype)
    _torch_paths(model)
    rows = []
    with torch.no_grad():
        for seq in spec["sequences"]:
            ids = seq["input_ids"] + seq["output_ids"]
            logits = model(input_ids=torch.tensor([ids[:-1]]), use_cache=False).logits[0].float()
            first = len(seq["input_ids"]) - 1
            logp = torch.log_softmax(logits[first:first + len(seq["output_ids"])], dim=-1)
            top2 = logp.topk(2, dim=-1)
            chosen = torch.tensor(seq["output_ids"])
            rows.append({
                "logprobs": logp.gather(1, chosen[:, None])[:, 0].tolist(),
                "argmax": top2.indices[:, 0].tolist(),
                "margin": (top2.values[:, 0] - top2.values[:, 1]).tolist(),
            })
    return {"sequences": rows}


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(run(spec), fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
