"""Tiny configurations of every family, cut from the real example configs
(``examples/configs``): the family's own layer pattern (the first layers of the
real ``layer_types``), its real head ratios, small widths."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from tests.e2e import harness


def _lfm2_tiny(cfg: dict, n_layers: int = 4, **extra) -> dict:
    """An LFM2 text config cut to a tiny model: its first ``n_layers`` real layer types."""
    cfg.update(hidden_size=64, num_hidden_layers=n_layers, layer_types=cfg["layer_types"][:n_layers],
               vocab_size=160, num_attention_heads=8, num_heads=8, num_key_value_heads=2,
               max_position_embeddings=512, intermediate_size=128, block_multiple_of=32,
               block_dim=64, block_ff_dim=128, conv_dim=64, conv_dim_out=64, **extra)
    return cfg


def _lfm2_dict(example: str, n_layers: int = 4, **extra) -> Callable[[], dict]:
    def make():
        return _lfm2_tiny(harness.example_config(example), n_layers, **extra)
    return make


def _gdn_dict(example: str, *, value_heads: int, key_heads: int, head_dim: int, n_layers: int = 4,
              **extra) -> Callable[[], dict]:
    """A GDN model's text config: the real ``layer_types`` pattern (3 GDN layers, then full
    attention), ``value_heads`` / ``key_heads`` GDN heads of ``head_dim``."""
    def make():
        cfg = harness.example_config(example)
        cfg = dict(cfg.get("text_config", cfg))
        cfg.pop("layer_types", None)
        cfg.update(hidden_size=64, num_hidden_layers=n_layers, full_attention_interval=4, vocab_size=160,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                   linear_num_value_heads=value_heads, linear_num_key_heads=key_heads,
                   linear_key_head_dim=head_dim, linear_value_head_dim=head_dim, max_position_embeddings=512,
                   mtp_num_hidden_layers=0, **extra)
        if "num_experts" in cfg:
            cfg.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32)
        return cfg
    return make


def _qwen3_5_served(text: dict, config: str = "Qwen3_5Config"):
    """What SGLang builds for a Qwen3.5 / 3.6 checkpoint: the multimodal config; the text
    backbone only (``language_model_only``, no vision tower)."""
    from sglang.srt.configs import qwen3_5

    return getattr(qwen3_5, config)(text_config=dict(text), language_model_only=True, tie_word_embeddings=False)


def _qwen3_5_moe_served(text: dict):
    """The same for a Qwen3.5-MoE checkpoint (``Qwen3_5MoeConfig``)."""
    return _qwen3_5_served(text, "Qwen3_5MoeConfig")


def _qwen3_5_checkpoint_name(name: str) -> str:
    """Qwen3.5 checkpoints hold the text backbone under ``model.language_model``
    (transformers' ``Qwen3_5ForCausalLM`` strips that prefix on load)."""
    return name.replace("model.", "model.language_model.", 1) if name.startswith("model.") else name


LFM2_VL_IMAGE_TOKEN = 150  # inside the tiny vocabulary (transformers embeds the placeholder ids too)


def _lfm2_vl_dict() -> dict:
    """LFM2-VL: its text model cut like LFM2's above, a 2-layer SigLIP2 NaFlex tower (patches of
    4 pixels, a 4 x 4 position grid) and the projector with its pixel unshuffle (factor 2)."""
    cfg = harness.example_config("lfm2-vl-1.6b")
    # the text config's own torch_dtype (bf16) would build transformers' language model in bf16;
    # the run's dtype is the outer one (Family.configs)
    cfg["text_config"].pop("torch_dtype", None)
    cfg.update(image_token_id=LFM2_VL_IMAGE_TOKEN, projector_hidden_size=64, max_image_tokens=16,
               min_image_tokens=1, max_num_patches=20, encoder_patch_size=4, tile_size=16,
               text_config=_lfm2_tiny(dict(cfg["text_config"])),
               vision_config={**cfg["vision_config"], "hidden_size": 32, "intermediate_size": 64,
                              "num_attention_heads": 2, "num_hidden_layers": 2, "num_patches": 16,
                              "patch_size": 4})
    return cfg


def _lfm2_vl_checkpoint_name(name: str) -> str:
    """LFM2-VL checkpoints hold the SigLIP2 tower as ``model.vision_tower.vision_model.*`` (what
    SGLang's ``Lfm2VlForConditionalGeneration.load_weights`` strips to ``vision_model.*``);
    transformers' ``Siglip2VisionModel`` drops that ``vision_model`` level on load and its
    state dict does not put it back."""
    head = "model.vision_tower."
    if name.startswith(head) and not name.startswith(head + "vision_model."):
        return head + "vision_model." + name[len(head):]
    return name


ZAYA_LAYERS = 4  # SGLang layers: attention, MoE, attention, MoE (= 2 transformers hybrid layers)


def _zaya_dict() -> dict:
    cfg = harness.example_config("zaya1-base")
    n = ZAYA_LAYERS
    experts = 4
    cfg.update(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, kv_channels=16,
               vocab_size=160, num_experts=experts, max_position_embeddings=512, num_hidden_layers=n,
               zaya_layers=["a" if x == "a" else experts for x in cfg["zaya_layers"][:n]],
               cca_num_q_heads=[4 if x else 0 for x in cfg["cca_num_q_heads"][:n]],
               num_query_groups_list=[2 if x else 0 for x in cfg["num_query_groups_list"][:n]],
               ffn_hidden_size_list=[128 if x else 0 for x in cfg["ffn_hidden_size_list"][:n]],
               zaya_mlp_expansion=[32 if x else 0 for x in cfg["zaya_mlp_expansion"][:n]])
    return cfg


def _zaya_hf_dict() -> dict:
    """The same model in transformers' schema (one hybrid layer = attention + MoE)."""
    z = _zaya_dict()
    return dict(vocab_size=z["vocab_size"], hidden_size=z["hidden_size"], num_hidden_layers=ZAYA_LAYERS // 2,
                num_attention_heads=z["num_attention_heads"], num_key_value_heads=z["num_key_value_heads"],
                head_dim=z["head_dim"], moe_intermediate_size=64, num_experts=z["num_experts"],
                num_experts_per_tok=z["moe_router_topk"], router_hidden_size=32, rms_norm_eps=z["norm_epsilon"],
                cca_time0=z["cca_time0"], cca_time1=z["cca_time1"], max_position_embeddings=512,
                tie_word_embeddings=True,
                rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": z["rope_theta"],
                                            "partial_rotary_factor": z["partial_rotary_factor"]}})


def _zaya_checkpoint(state: dict) -> dict:
    from tests.e2e.zaya_checkpoint import hf_to_zyphra

    return hf_to_zyphra(state, ZAYA_LAYERS // 2)


def _cls(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    name: str
    config: Callable[[], dict]
    sglang_config: str  # module.Class
    hf_config: str  # module.Class
    sglang_model: str  # module.Class
    hf_model: str  # module.Class
    seed: int = 0
    # SGLang serves the model through a wrapper config (Qwen3.5: the multimodal config
    # with language_model_only) and the checkpoint names that wrapper loads
    wrap_config: Callable = None
    checkpoint_name: Callable = None
    hf_config_dict: Callable = None  # when transformers' config schema differs from SGLang's
    checkpoint: Callable = None  # transformers state dict -> the checkpoint SGLang loads

    def configs(self, dtype: torch.dtype = torch.float32):
        d = self.config()
        d.pop("architectures", None)
        d["torch_dtype"] = str(dtype).replace("torch.", "")  # the checkpoint's dtype: what the model runs in
        sg_cfg = self.wrap_config(d) if self.wrap_config is not None else _cls(self.sglang_config)(**d)
        hf_cfg = _cls(self.hf_config)(**(self.hf_config_dict() if self.hf_config_dict else d))
        hf_cfg._attn_implementation = "eager"
        return sg_cfg, hf_cfg

    def sglang_from(self, hf, sg_cfg, dtype=torch.float32):
        """SGLang's model class built in ``dtype`` (as SGLang's loader does: the default dtype
        set while the model is constructed), weights from ``hf`` through ``load_weights``."""
        saved = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with harness.sglang_process():  # weight loaders read the rank too (SGLang <= 0.5.21)
                with harness.cpu_model_construction():
                    sg = _cls(self.sglang_model)(sg_cfg)
                torch.set_default_dtype(saved)
                harness.load_into_sglang(sg, hf, rename=self.checkpoint_name, convert=self.checkpoint)
        finally:
            torch.set_default_dtype(saved)
        return sg.eval()

    def build(self) -> "Built":
        """(SGLang model, transformers model, config), the same random weights, fp32."""
        sg_cfg, hf_cfg = self.configs()
        torch.manual_seed(self.seed)
        hf = _cls(self.hf_model)(hf_cfg).eval()
        harness.randomize_(hf, self.seed)
        return Built(self, self.sglang_from(hf, sg_cfg), hf, sg_cfg)


@dataclass
class Built:
    family: Family
    sglang: torch.nn.Module
    hf: torch.nn.Module
    config: object


FAMILIES = {
    "lfm2": Family("lfm2", _lfm2_dict("lfm2-1.2b"), "sglang.srt.configs.lfm2.Lfm2Config",
                   "transformers.Lfm2Config", "sglang.srt.models.lfm2.Lfm2ForCausalLM",
                   "transformers.Lfm2ForCausalLM"),
    "lfm2_moe": Family("lfm2_moe", _lfm2_dict("lfm2-8b-a1b", moe_intermediate_size=32, num_experts=8,
                                              num_experts_per_tok=2),
                       "sglang.srt.configs.lfm2_moe.Lfm2MoeConfig", "transformers.Lfm2MoeConfig",
                       "sglang.srt.models.lfm2_moe.Lfm2MoeForCausalLM", "transformers.Lfm2MoeForCausalLM"),
    "qwen3_next": Family("qwen3_next", _gdn_dict("qwen3-next-80b-a3b", value_heads=4, key_heads=2, head_dim=32),
                         "sglang.srt.configs.qwen3_next.Qwen3NextConfig", "transformers.Qwen3NextConfig",
                         "sglang.srt.models.qwen3_next.Qwen3NextForCausalLM", "transformers.Qwen3NextForCausalLM"),
    # Qwen3.6-27B at TP=8 has (6, 2) GDN heads per rank (head dim 128): the plugin's head plan
    "qwen3_5": Family("qwen3_5", _gdn_dict("qwen3_6-27b", value_heads=6, key_heads=2, head_dim=128),
                      "sglang.srt.configs.qwen3_5.Qwen3_5TextConfig", "transformers.Qwen3_5TextConfig",
                      "sglang.srt.models.qwen3_5.Qwen3_5ForConditionalGeneration",
                      "transformers.Qwen3_5ForCausalLM", wrap_config=_qwen3_5_served,
                      checkpoint_name=_qwen3_5_checkpoint_name),
    # Qwen3.5-35B-A3B at TP=8 has (4, 2) GDN heads per rank (head dim 128); MoE layers on
    # SGLang's FusedMoE (its CPU path, as for Qwen3-Next and LFM2-MoE)
    "qwen3_5_moe": Family("qwen3_5_moe", _gdn_dict("qwen3_5-35b-a3b", value_heads=4, key_heads=2, head_dim=128),
                          "sglang.srt.configs.qwen3_5.Qwen3_5MoeTextConfig", "transformers.Qwen3_5MoeTextConfig",
                          "sglang.srt.models.qwen3_5.Qwen3_5MoeForConditionalGeneration",
                          "transformers.Qwen3_5MoeForCausalLM", wrap_config=_qwen3_5_moe_served,
                          checkpoint_name=_qwen3_5_checkpoint_name),
    "lfm2_vl": Family("lfm2_vl", _lfm2_vl_dict, "sglang.srt.configs.lfm2_vl.Lfm2VlConfig",
                      "transformers.Lfm2VlConfig", "sglang.srt.models.lfm2_vl.Lfm2VlForConditionalGeneration",
                      "transformers.Lfm2VlForConditionalGeneration", checkpoint_name=_lfm2_vl_checkpoint_name),
    "zaya": Family("zaya", _zaya_dict, "sglang.srt.configs.zaya.ZayaConfig", "transformers.ZayaConfig",
                   "sglang.srt.models.zaya.ZayaForCausalLM", "transformers.ZayaForCausalLM",
                   hf_config_dict=_zaya_hf_dict, checkpoint=_zaya_checkpoint),
}
