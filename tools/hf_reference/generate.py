"""Reference parameter counts for hetplan's HuggingFace config reader (issue 12).

For each decoder family hetplan reads, this writes the `config.json` that `transformers` itself
writes for a published model's shape (`save_pretrained`, so only what differs from the base
defaults), builds the model from it on PyTorch's meta device (no weights, no download) and counts
its parameters as `transformers` does: every parameter once, tied weights once. For multimodal
wrappers only the language part is counted (the language model and its LM head).

Output: crates/hetplan/tests/data/hf/<name>.json (the configs) and
crates/hetplan/tests/data/hf/reference.json ({name: {model_type, params, transformers}}).
The Rust test `tests/hf_reference.rs` reads both and needs no Python.

Run: python tools/hf_reference/generate.py   (needs torch and transformers; CPU only)
"""

import json
import os
import sys
import tempfile

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    CONFIG_MAPPING,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "crates", "hetplan", "tests", "data", "hf")

# (name, model_type, kwargs): shapes of published checkpoints, as their configs give them.
CAUSAL = [
    ("llama-3.1-8b", "llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, tie_word_embeddings=False)),
    ("llama-3.2-1b", "llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
        max_position_embeddings=131072, tie_word_embeddings=True)),
    ("mistral-7b-v0.1", "mistral", dict(hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
        max_position_embeddings=32768, sliding_window=4096)),
    ("mixtral-8x7b", "mixtral", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
        num_experts_per_tok=2, max_position_embeddings=32768)),
    ("qwen2.5-7b", "qwen2", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
        max_position_embeddings=131072, tie_word_embeddings=False)),
    ("qwen1.5-moe-a2.7b", "qwen2_moe", dict(hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
        num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, max_position_embeddings=8192)),
    ("gpt2-medium", "gpt2", dict(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257)),
    ("pythia-1.4b", "gpt_neox", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
        intermediate_size=8192, vocab_size=50304, rotary_pct=0.25)),
    ("falcon-7b", "falcon", dict(hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
        vocab_size=65024, multi_query=True, parallel_attn=True, bias=False, alibi=False,
        new_decoder_architecture=False)),
    ("falcon-40b", "falcon", dict(hidden_size=8192, num_hidden_layers=60, num_attention_heads=128,
        num_kv_heads=8, vocab_size=65024, new_decoder_architecture=True, parallel_attn=True,
        bias=False)),
    ("mpt-7b", "mpt", dict(d_model=4096, n_heads=32, n_layers=32, vocab_size=50432,
        expansion_ratio=4, max_seq_len=2048)),
    ("qwen3-8b", "qwen3", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, tie_word_embeddings=False)),
    ("qwen3-0.6b", "qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, tie_word_embeddings=True)),
    ("qwen3-30b-a3b", "qwen3_moe", dict(hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        vocab_size=151936, max_position_embeddings=40960, decoder_sparse_step=1,
        mlp_only_layers=[], tie_word_embeddings=False)),
    # Qwen3-30B-A3B's shape with its first two blocks dense (`mlp_only_layers`).
    ("qwen3-30b-a3b-dense2", "qwen3_moe", dict(hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        vocab_size=151936, max_position_embeddings=40960, decoder_sparse_step=1,
        mlp_only_layers=[0, 1], tie_word_embeddings=False)),
    ("gemma-7b", "gemma", dict(hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=16, head_dim=256, vocab_size=256000,
        max_position_embeddings=8192)),
    ("gemma-2-9b", "gemma2", dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=256000,
        sliding_window=4096, max_position_embeddings=8192)),
    ("gemma-3-1b", "gemma3_text", dict(hidden_size=1152, intermediate_size=6912,
        num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
        vocab_size=262144, sliding_window=512, max_position_embeddings=32768)),
    ("phi-2", "phi", dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=32,
        num_attention_heads=32, vocab_size=51200, partial_rotary_factor=0.4,
        max_position_embeddings=2048)),
    ("phi-3-mini-4k", "phi3", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
        max_position_embeddings=4096)),
    ("phi-3.5-moe", "phimoe", dict(hidden_size=4096, intermediate_size=6400, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32064, num_local_experts=16,
        num_experts_per_tok=2, max_position_embeddings=131072)),
    ("olmo-7b", "olmo", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, vocab_size=50304, max_position_embeddings=2048)),
    ("olmo-2-7b", "olmo2", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=100352,
        max_position_embeddings=4096)),
    ("olmoe-1b-7b", "olmoe", dict(hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
        vocab_size=50304, max_position_embeddings=4096)),
    ("deepseek-v3", "deepseek_v3", dict(hidden_size=7168, intermediate_size=18432,
        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
        num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8,
        first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280, n_group=8, topk_group=4,
        max_position_embeddings=163840)),
    ("stablelm-2-1.6b", "stablelm", dict(hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32, vocab_size=100352,
        partial_rotary_factor=0.25, use_qkv_bias=True, max_position_embeddings=4096)),
    ("stablelm-2-12b", "stablelm", dict(hidden_size=5120, intermediate_size=13824,
        num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8, vocab_size=100352,
        partial_rotary_factor=0.25, use_qkv_bias=False, qk_layernorm=True,
        use_parallel_residual=True, max_position_embeddings=4096)),
    ("starcoder2-7b", "starcoder2", dict(hidden_size=4608, intermediate_size=18432,
        num_hidden_layers=32, num_attention_heads=36, num_key_value_heads=4, vocab_size=49152,
        sliding_window=4096, use_bias=True, max_position_embeddings=16384)),
    ("gpt-j-6b", "gptj", dict(n_embd=4096, n_layer=28, n_head=16, rotary_dim=64, vocab_size=50400,
        n_positions=2048, tie_word_embeddings=False)),
    ("gpt-neo-1.3b", "gpt_neo", dict(hidden_size=2048, num_layers=24, num_heads=16,
        vocab_size=50257, attention_types=[[["global", "local"], 12]], window_size=256,
        max_position_embeddings=2048)),
    ("santacoder", "gpt_bigcode", dict(n_embd=2048, n_layer=24, n_head=16, multi_query=True,
        vocab_size=49280, n_positions=2048)),
    ("bloom-7b1", "bloom", dict(hidden_size=4096, n_layer=30, n_head=32, vocab_size=250880)),
    ("opt-1.3b", "opt", dict(hidden_size=2048, ffn_dim=8192, num_hidden_layers=24,
        num_attention_heads=32, vocab_size=50272, max_position_embeddings=2048,
        word_embed_proj_dim=2048, do_layer_norm_before=True)),
    ("opt-350m", "opt", dict(hidden_size=1024, ffn_dim=4096, num_hidden_layers=24,
        num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048,
        word_embed_proj_dim=512, do_layer_norm_before=False)),
    ("codegen-2b", "codegen", dict(n_embd=2560, n_layer=32, n_head=32, rotary_dim=64,
        vocab_size=51200, n_positions=2048, tie_word_embeddings=False)),
    ("command-r", "cohere", dict(hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
        num_attention_heads=64, num_key_value_heads=64, vocab_size=256000, use_qk_norm=False,
        max_position_embeddings=131072)),
    ("command-r-plus", "cohere", dict(hidden_size=12288, intermediate_size=33792,
        num_hidden_layers=64, num_attention_heads=96, num_key_value_heads=8, vocab_size=256000,
        use_qk_norm=True, max_position_embeddings=131072)),
    ("granite-3.0-8b", "granite", dict(hidden_size=4096, intermediate_size=12800,
        num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8, vocab_size=49155,
        tie_word_embeddings=True, max_position_embeddings=4096)),
    ("dbrx", "dbrx", dict(d_model=6144, n_heads=48, n_layers=40, max_seq_len=32768,
        vocab_size=100352, attn_config=dict(kv_n_heads=8, clip_qkv=8, rope_theta=500000),
        ffn_config=dict(ffn_hidden_size=10752, moe_num_experts=16, moe_top_k=4))),
    ("persimmon-8b", "persimmon", dict(hidden_size=4096, intermediate_size=16384,
        num_hidden_layers=36, num_attention_heads=64, vocab_size=262144, qk_layernorm=True,
        partial_rotary_factor=0.5, max_position_embeddings=16384)),
    ("minitron-8b", "nemotron", dict(hidden_size=4096, intermediate_size=16384,
        num_hidden_layers=32, num_attention_heads=48, num_key_value_heads=8, head_dim=128,
        vocab_size=256000, partial_rotary_factor=0.5, max_position_embeddings=4096)),
    ("gpt-oss-20b", "gpt_oss", dict(hidden_size=2880, intermediate_size=2880,
        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        num_local_experts=32, num_experts_per_tok=4, vocab_size=201088, sliding_window=128,
        max_position_embeddings=131072)),
    ("smollm3-3b", "smollm3", dict(hidden_size=2048, intermediate_size=11008,
        num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4, vocab_size=128256,
        tie_word_embeddings=True, max_position_embeddings=65536)),
    ("glm-4-9b-0414", "glm4", dict(hidden_size=4096, intermediate_size=13696,
        num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
        vocab_size=151552, attention_bias=True, partial_rotary_factor=0.5,
        max_position_embeddings=32768)),
]

# Multimodal wrappers: (name, model_type, kwargs); only the language part is counted.
WRAPPERS = [
    ("mistral-small-3.1-24b", "mistral3", dict(text_config=dict(model_type="mistral",
        hidden_size=5120, intermediate_size=32768, num_hidden_layers=40, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=131072,
        max_position_embeddings=131072))),
    ("gemma-3-4b", "gemma3", dict(text_config=dict(model_type="gemma3_text", hidden_size=2560,
        intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=262208, sliding_window=1024,
        max_position_embeddings=131072))),
]

# Configs as published on the Hub, written by older transformers: kept verbatim (the nested
# `text_config` is a diff against the sub-config class's defaults, so shape fields are absent).
VERBATIM = {
    "llava-1.5-7b": {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": 32000,
        "model_type": "llava",
        "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": 32064,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "model_type": "clip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    },
}


def count(params):
    seen = set()
    total = 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def causal_params(cfg):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return count(model.parameters())


def wrapper_params(cfg):
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(cfg)
    lm = model.model.language_model
    head = model.lm_head
    return count(list(lm.parameters()) + list(head.parameters()))


def written(cfg):
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            return json.load(f)


def main():
    os.makedirs(OUT, exist_ok=True)
    reference = {}
    for name, mt, kwargs in CAUSAL + WRAPPERS:
        cfg = CONFIG_MAPPING[mt](**kwargs)
        for k, v in kwargs.items():
            if k.endswith("_config") or k == "attention_types":
                continue
            # transformers 5 moves the rotary fields into `rope_parameters`; no parameters.
            if k in ("rotary_pct", "partial_rotary_factor") and not hasattr(cfg, k):
                continue
            if getattr(cfg, k) != v:
                sys.exit(f"{name}: {k} = {getattr(cfg, k)!r}, meant {v!r}")
        data = written(cfg)
        data["_name_or_path"] = name
        params = wrapper_params(cfg) if (name, mt, kwargs) in WRAPPERS else causal_params(cfg)
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        reference[name] = {"model_type": mt, "params": params}
        print(f"{name:24} {mt:14} {params:>16,}", file=sys.stderr)
    for name, data in VERBATIM.items():
        cfg = CONFIG_MAPPING[data["model_type"]].from_dict(data)
        params = wrapper_params(cfg)
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        reference[name] = {"model_type": data["model_type"], "params": params}
        print(f"{name:24} {data['model_type']:14} {params:>16,}", file=sys.stderr)
    out = {
        "generator": "tools/hf_reference/generate.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "models": reference,
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(out, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
