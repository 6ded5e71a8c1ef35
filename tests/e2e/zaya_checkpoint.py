"""ZAYA1: transformers' layout -> the Zyphra checkpoint layout SGLang's ``ZayaForCausalLM``
loads.

transformers 5.19 (``models/zaya/modeling_zaya.py``) packs one CCA attention block and
one MoE block into each "hybrid" decoder layer and stores experts fused; the Zyphra
checkpoint (what ``sglang/srt/models/zaya.py`` ``load_weights`` reads) has separate
alternating layers (``zaya_layers = ["a", E, "a", E, ...]``) and per-expert
``linear_fc1`` (gate rows, then up rows) / ``linear_fc2``.  transformers has no
conversion mapping for this model, so the correspondence is written out here, one
line per tensor, from the two forwards:

- the residual merges: transformers' model-input scaling and each block's
  ``post_*_residual_scale`` are SGLang's ``res_scale`` at the start of the next layer
  (the last one is the model-level ``res_scale``);
- norms: ``input_layernorm`` / ``post_attention_layernorm`` are the attention and MoE
  layers' ``input_norm``;
- CCA: ``q_proj``/``k_proj`` -> ``linear_q``/``linear_k``, ``v_proj_current`` /
  ``v_proj_delayed`` -> ``val_proj1`` / ``val_proj2`` (first / second half of each
  value head), the depthwise / grouped convs -> ``conv_qk.0`` / ``conv_qk.1``,
  ``qk_norm.temp`` -> ``temp``;
- router: ``gate.down_proj`` / ``router_mlp.{norm, fc1, fc2, out_proj}`` ->
  ``router.down_proj`` / ``rmsnorm_eda`` / ``router_mlp.{0, 2, 4}``; the first MoE
  layer has no EDA input in either model (transformers creates no
  ``router_states_scale`` there; SGLang's is unused and written as ones).
"""

from __future__ import annotations

import torch


def hf_to_zyphra(state: dict, num_hf_layers: int) -> dict:
    out = {"model.embed_tokens.weight": state["model.embed_tokens.weight"],
           "model.final_norm.weight": state["model.norm.weight"],
           "model.layers.0.res_scale.hidden_states_scale": state["model.input_hidden_states_scale"],
           "model.layers.0.res_scale.hidden_states_bias": state["model.input_hidden_states_bias"]}
    for i in range(num_hf_layers):
        h, a, m = f"model.layers.{i}.", f"model.layers.{2 * i}.", f"model.layers.{2 * i + 1}."
        nxt = f"model.layers.{2 * i + 2}." if i + 1 < num_hf_layers else "model."
        cca = h + "self_attn.qkv_proj."
        out.update({
            a + "input_norm.weight": state[h + "input_layernorm.weight"],
            a + "self_attn.qkv.linear_q.weight": state[cca + "q_proj.weight"],
            a + "self_attn.qkv.linear_k.weight": state[cca + "k_proj.weight"],
            a + "self_attn.qkv.val_proj1.weight": state[cca + "v_proj_current.weight"],
            a + "self_attn.qkv.val_proj2.weight": state[cca + "v_proj_delayed.weight"],
            a + "self_attn.qkv.conv_qk.0.weight": state[cca + "conv_qk_depthwise.weight"],
            a + "self_attn.qkv.conv_qk.0.bias": state[cca + "conv_qk_depthwise.bias"],
            a + "self_attn.qkv.conv_qk.1.weight": state[cca + "conv_qk_grouped.weight"],
            a + "self_attn.qkv.conv_qk.1.bias": state[cca + "conv_qk_grouped.bias"],
            a + "self_attn.qkv.temp": state[h + "self_attn.qk_norm.temp"],
            a + "self_attn.o_proj.weight": state[h + "self_attn.o_proj.weight"],
            m + "input_norm.weight": state[h + "post_attention_layernorm.weight"],
        })
        for src, dst in ((h + "post_attention_residual_scale.", m + "res_scale."),
                         (h + "post_mlp_residual_scale.", nxt + "res_scale.")):
            for p in ("hidden_states_scale", "hidden_states_bias", "residual_scale", "residual_bias"):
                out[dst + p] = state[src + p]
        gate, router = h + "mlp.gate.", m + "zaya_block.router."
        out.update({
            router + "down_proj.weight": state[gate + "down_proj.weight"],
            router + "down_proj.bias": state[gate + "down_proj.bias"],
            router + "rmsnorm_eda.weight": state[gate + "router_mlp.norm.weight"],
            router + "router_mlp.0.weight": state[gate + "router_mlp.fc1.weight"],
            router + "router_mlp.0.bias": state[gate + "router_mlp.fc1.bias"],
            router + "router_mlp.2.weight": state[gate + "router_mlp.fc2.weight"],
            router + "router_mlp.2.bias": state[gate + "router_mlp.fc2.bias"],
            router + "router_mlp.4.weight": state[gate + "router_mlp.out_proj.weight"],
            router + "balancing_biases": state[gate + "balancing_biases"],
            router + "router_states_scale": state.get(
                gate + "router_states_scale", torch.ones_like(state[gate + "down_proj.bias"])),
        })
        gate_up, down = state[h + "mlp.experts.gate_up_proj"], state[h + "mlp.experts.down_proj"]
        for e in range(gate_up.shape[0]):
            experts = f"{m}zaya_block.experts.local_experts.{e}."
            out[experts + "linear_fc1.weight"] = gate_up[e]
            out[experts + "linear_fc2.weight"] = down[e]
    return out
