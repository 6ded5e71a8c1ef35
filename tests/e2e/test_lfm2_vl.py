"""LFM2-VL with an image: one image request through SGLang's multimodal plumbing and the
plugin's short-conv backend, against transformers' ``Lfm2VlForConditionalGeneration`` fed
the same pixel values.  (Text-only LFM2-VL requests run with the other families in
``test_models_fp32.py`` / ``test_models_bf16.py``.)

What is SGLang's own here: the processor-side item (``MultimodalDataItem`` with the fields
SGLang's LFM2-VL processor collects from the HF processor: padded NaFlex patches as
``feature``, ``pixel_attention_mask``, ``spatial_shapes``, the placeholder span as
``offsets``), ``MultimodalInputs.from_processor_output`` (pad values from the item hash),
the model's ``pad_input_ids``, and in the forward ``general_mm_embed_routine`` ->
``embed_mm_inputs`` -> ``get_image_feature`` (SigLIP2 tower, pixel-unshuffle projector),
the image embedding cut per chunk by ``extend_prefix_lens`` / ``extend_seq_lens``.
Not real: the HF image processor (random patches stand in for a resized, tiled image),
SGLang's tokenizer manager and scheduler (the harness scheduler puts the request's
``MultimodalInputs`` into each EXTEND batch, as ``ScheduleBatch`` does)."""

from __future__ import annotations

from array import array

import pytest
import torch

from sglang_ascend_hybrid.integration import short_conv
from tests.e2e import harness
from tests.e2e.families import LFM2_VL_IMAGE_TOKEN
from tests.e2e.runner import built, run_family

GRID = (4, 6)  # the image's patch grid (height, width): 24 patches of 4 x 4 pixels, one tile
PADDED_PATCHES = 28  # the processor pads each tile's patches to max_num_patches
BEFORE, AFTER = [5, 17, 3], [99, 42, 8, 61]
DECODES = 6
CONV_LAYERS = 3


def _image_inputs(cfg, seed: int = 3):
    """(pixel_values [1, padded, 3 * p * p], pixel_attention_mask [1, padded], spatial_shapes [1, 2],
    number of image tokens after the projector's pixel unshuffle)."""
    p = cfg.vision_config.patch_size
    n = GRID[0] * GRID[1]
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.zeros(1, PADDED_PATCHES, cfg.vision_config.num_channels * p * p)
    pixels[0, :n] = torch.rand(n, pixels.shape[-1], generator=gen) * 2 - 1  # normalised to [-1, 1]
    mask = torch.zeros(1, PADDED_PATCHES, dtype=torch.int32)
    mask[0, :n] = 1
    f = cfg.downsample_factor
    return pixels, mask, torch.tensor([GRID]), (GRID[0] // f) * (GRID[1] // f)


def _sglang_mm_inputs(model, cfg, prompt, pixels, mask, shapes):
    """What SGLang's scheduler holds for the request: ``MultimodalInputs`` from the processor's
    output, and the prompt with its placeholders padded by the model."""
    from sglang.srt.managers.schedule_batch import (
        Modality,
        MultimodalDataItem,
        MultimodalInputs,
        MultimodalProcessorOutput,
    )

    start = prompt.index(cfg.image_token_id)
    end = len(prompt) - 1 - prompt[::-1].index(cfg.image_token_id)
    item = MultimodalDataItem(modality=Modality.IMAGE, feature=pixels, offsets=[(start, end)],
                              model_specific_data={"pixel_attention_mask": mask, "spatial_shapes": shapes})
    mm = MultimodalInputs.from_processor_output(
        MultimodalProcessorOutput(mm_items=[item], input_ids=list(prompt), im_token_id=cfg.image_token_id))
    try:  # 0.5.23: pad_mm_tokens over an int64 array; older releases: a list through the padding pattern
        padded = model.pad_input_ids(array("q", prompt), mm)
    except (AssertionError, TypeError):
        padded = model.pad_input_ids(list(prompt), mm)
    return mm, list(padded)


def _plan(engine, model, cfg, image_prompt, pixels, mask, shapes):
    """The image request I prefilled in two chunks (the boundary inside the image span), its
    continuation batched with a text request T, then decode steps of both."""
    mm, padded = _sglang_mm_inputs(model, cfg, image_prompt, pixels, mask, shapes)
    sched = harness.Scheduler(engine)
    img = sched.admit(harness.Request("I", padded, row=3, slot=5, mm_inputs=mm))
    txt = sched.admit(harness.Request("T", [11, 7, 64, 120, 9], row=1, slot=9))
    first = len(BEFORE) + 2  # two of the image tokens in the first chunk
    sched.extend([(img, first)])
    sched.extend([(img, len(padded) - first), (txt, len(txt.prompt))])
    for _ in range(DECODES):
        sched.decode([img, txt])
    return img, txt, padded


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_lfm2_vl_image_request_matches_transformers(dtype, monkeypatch):
    from tests.e2e import device

    fp32 = dtype == torch.float32
    b = built("lfm2_vl")
    cfg = b.config
    pixels, mask, shapes, n_image = _image_inputs(cfg)
    image_prompt = BEFORE + [cfg.image_token_id] * n_image + AFTER
    assert cfg.image_token_id == LFM2_VL_IMAGE_TOKEN and n_image == 6

    features, seen = [], {}
    # the model runner's embedding cache of image features (kv_cache_builder: init_mm_embedding_cache
    # of SGLANG_VLM_CACHE_SIZE_MB), fresh for this test
    from sglang.srt.environ import envs
    from sglang.srt.managers import mm_schedule

    monkeypatch.setattr(mm_schedule, "embedding_cache", None)
    mm_schedule.init_mm_embedding_cache(envs.SGLANG_VLM_CACHE_SIZE_MB.get() * 1024 * 1024)

    def plan_runner(engine, _plan_unused):
        m = engine.model
        real = m.get_image_feature
        monkeypatch.setattr(m, "get_image_feature", lambda items: features.append(1) or real(items))
        img, txt, padded = _plan(engine, m, cfg, image_prompt, pixels, mask, shapes)
        seen["padded"] = padded
        return [img, txt]

    run = run_family("lfm2_vl", dtype=dtype, device=None if fp32 else device.npu_emulators, plan_runner=plan_runner)
    img, txt = run.reqs

    # SGLang's placeholders: the item's pad values, everything else the prompt's own tokens
    item = img.mm_inputs.mm_items[0]
    # 0.5.21+: a cycle of sentinels from the item hash (padding_values); 0.5.20: the one pad_value
    pads = set(item.padding_values()) if hasattr(type(item), "padding_values") else {item.pad_value}
    assert not pads & set(image_prompt)
    padded = seen["padded"]
    assert [t in pads for t in padded] == [t == cfg.image_token_id for t in image_prompt]
    # the vision tower ran once, for the first chunk; the second chunk took its part of the image
    # features from the embedding cache (keyed by the item hash), as in serving
    assert features == [1], features
    assert mm_schedule.embedding_cache.get_single(item.hash) is not None

    def reference(hf, req):
        if req is not img:
            return harness.reference_logits(hf, req)
        ids = torch.tensor([image_prompt + req.generated[:-1]])
        with torch.no_grad():
            out = hf(input_ids=ids, pixel_values=pixels, pixel_attention_mask=mask, spatial_shapes=shapes,
                     use_cache=False).logits[0].float()
        return out[len(image_prompt) - 1:len(image_prompt) - 1 + len(req.generated)]

    cmp = harness.compare(run.reqs, run.reference, run.seconds, reference=reference)
    assert cmp.fp32_ok() if fp32 else cmp.bf16_ok(), str(cmp)
    assert isinstance(run.backend, short_conv.backend_classes()[1])
    assert run.calls == {"causal_conv1d_fn": CONV_LAYERS * 2, "causal_conv1d_update": CONV_LAYERS * DECODES}

    # the image changes the answer: the same prompt without the image's features differs
    with torch.no_grad():
        blind = run.reference(input_ids=torch.tensor([image_prompt]), use_cache=False).logits[0, -1]
    # (measured: another first token, logits apart by about 3.7, far beyond either tolerance)
    assert int(blind.argmax()) != img.generated[0]
    assert float((blind - img.logits[0]).abs().max()) > 1.0
