"""Named models for :func:`~ctxkit.kvcache.accounting.kv_cache_bytes`: excerpts of published
``config.json`` files, only the fields the KV-cache formula reads.

Each preset is the excerpt plus the URL of the ``config.json`` it was copied from (Hugging Face
Hub, main branch); ``docs/kvcache.md`` lists them with the bytes per token they give. A preset is
read exactly as a user's ``config.json`` would be, so the excerpts keep the file's own field names
(``n_layer`` for GPT-2, ``multi_query`` for Falcon, ``text_config`` for Gemma 3).

Example:
    >>> PRESETS["llama-3.1-8b"].config["num_key_value_heads"]
    8
    >>> PRESETS["llama-3.1-8b"].url
    'https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    """A published config's KV-relevant fields and where they come from."""

    url: str
    config: dict[str, Any]


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


PRESETS: dict[str, Preset] = {
    # multi-head attention: one KV head per query head
    "llama-2-7b": Preset(_hf("meta-llama/Llama-2-7b-hf"), {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32}),
    "gpt2": Preset(_hf("openai-community/gpt2"), {
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12}),
    # grouped-query attention
    "llama-3.2-1b": Preset(_hf("meta-llama/Llama-3.2-1B"), {
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}),
    "llama-3.1-8b": Preset(_hf("meta-llama/Llama-3.1-8B"), {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8}),
    "llama-3.1-70b": Preset(_hf("meta-llama/Llama-3.1-70B"), {
        "model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8}),
    "qwen2.5-7b": Preset(_hf("Qwen/Qwen2.5-7B"), {
        "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "sliding_window": 131072,
        "use_sliding_window": False, "max_window_layers": 28}),
    # sliding window on every layer (Mistral 7B v0.1; v0.3 has "sliding_window": null)
    "mistral-7b": Preset(_hf("mistralai/Mistral-7B-v0.1"), {
        "model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096}),
    # sliding window on alternate layers (0, 2, 4...; transformers' Gemma2Config)
    "gemma-2-9b": Preset(_hf("google/gemma-2-9b"), {
        "model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "sliding_window": 4096}),
    # five sliding layers to one global; a multimodal config with the LM in text_config
    "gemma-3-27b": Preset(_hf("google/gemma-3-27b-it"), {
        "model_type": "gemma3", "text_config": {
            "model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
            "sliding_window": 1024, "sliding_window_pattern": 6}}),
    # multi-query attention: one KV head shared by all 71 query heads
    "falcon-7b": Preset(_hf("tiiuae/falcon-7b"), {
        "model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
        "num_attention_heads": 71, "multi_query": True, "new_decoder_architecture": False}),
    # multi-head latent attention: the cache holds a 512-dim latent plus a 64-dim RoPE key
    "deepseek-v3": Preset(_hf("deepseek-ai/DeepSeek-V3"), {
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}),
}
