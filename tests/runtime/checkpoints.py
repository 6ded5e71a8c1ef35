"""Tiny random-weight checkpoints of every family, on disk, as SGLang loads them.

Each family's tiny config (``tests/e2e/families.py``: the real example config's layer pattern and
head ratios, small widths) becomes two folders: ``model/`` -- the checkpoint SGLang serves
(``config.json`` in SGLang's schema with the real architecture name, ``model.safetensors`` with the
checkpoint's own weight names, e.g. Qwen3.5's ``model.language_model.*``) -- and ``reference/``,
the same weights as transformers' ``save_pretrained`` writes them, for the reference process.
LFM2-VL's model folder also gets what SGLang's tokenizer manager loads for a multimodal model even
with ``skip_tokenizer_init`` (its ``AutoProcessor``): a word-level tokenizer naming the image
placeholder and the image processor sized from the config.
"""

from __future__ import annotations

import json
import os

import torch

from tests.e2e import families, harness


def write(name: str, dest: str, dtype: torch.dtype = torch.float32) -> tuple[str, str]:
    """Write family ``name``'s checkpoint under ``dest``; return (model path, reference path)."""
    from safetensors.torch import save_file
    from transformers.core_model_loading import revert_weight_conversion

    fam = families.FAMILIES[name]
    sg_cfg, hf_cfg = fam.configs(dtype)
    torch.manual_seed(fam.seed)
    hf = families._cls(fam.hf_model)(hf_cfg).eval()
    harness.randomize_(hf, fam.seed)
    hf = hf.to(dtype)
    model_dir, ref_dir = os.path.join(dest, "model"), os.path.join(dest, "reference")
    os.makedirs(model_dir, exist_ok=True)
    hf.save_pretrained(ref_dir, safe_serialization=True)

    state = revert_weight_conversion(hf, {k: v.detach().clone() for k, v in hf.state_dict().items()})
    if fam.checkpoint_name is not None:
        state = {fam.checkpoint_name(k): v for k, v in state.items()}
    if fam.checkpoint is not None:
        state = fam.checkpoint(state)
    save_file({k: v.contiguous().clone() for k, v in state.items()}, os.path.join(model_dir, "model.safetensors"))

    config = sg_cfg.to_dict()
    config["architectures"] = [fam.sglang_model.rsplit(".", 1)[1]]
    config["torch_dtype"] = str(dtype).replace("torch.", "")
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=1, default=str)
    if name == "lfm2_vl":
        _write_lfm2_vl_processor(model_dir, config)
    return model_dir, ref_dir


# the special words transformers' Lfm2VlProcessor looks up (processing_lfm2_vl.py), on free tiny ids
_LFM2_VL_WORDS = ("<|image_start|>", "<|image_end|>", "<|img_thumbnail|>")


def _write_lfm2_vl_processor(model_dir: str, config: dict) -> None:
    import transformers

    from sglang_ascend_hybrid.testing.runtime.server import write_word_level_tokenizer

    text = config["text_config"]
    image = config["image_token_id"]
    free = [i for i in range(text["vocab_size"] - 1, 0, -1)
            if i not in (image, text["bos_token_id"], text["eos_token_id"], text["pad_token_id"])]
    named = {image: "<image>", **dict(zip(free, _LFM2_VL_WORDS))}
    write_word_level_tokenizer(model_dir, text["vocab_size"], bos=text["bos_token_id"], eos=text["eos_token_id"],
                               pad=text["pad_token_id"], named=named)
    images = transformers.Lfm2VlImageProcessor(
        **{k: config[k] for k in ("max_image_tokens", "min_image_tokens", "max_num_patches", "tile_size",
                                  "encoder_patch_size")})
    transformers.Lfm2VlProcessor(images, transformers.AutoTokenizer.from_pretrained(model_dir)).save_pretrained(
        model_dir)
