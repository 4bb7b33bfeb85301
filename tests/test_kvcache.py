"""KV-cache accounting: the formula against hand-computed sizes for each attention layout and
config variant, the inputs it reads from, and a clear error for every config it cannot size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import ctxkit
from ctxkit.errors import InputError, OptionError
from ctxkit.kvcache.accounting import format_bytes, kv_bytes_per_sequence, kv_cache_change
from ctxkit.kvcache.presets import PRESETS
from ctxkit.kvcache.shape import kv_cache_shape

kv_cache_report = ctxkit.kv_cache_report

LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32}  # no num_key_value_heads: one per query head
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8}
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "n_layer": 32, "n_head": 71,
             "multi_query": True, "new_decoder_architecture": False}
MISTRAL_7B = {**LLAMA3_8B, "model_type": "mistral", "sliding_window": 4096}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
             "sliding_window": 4096}


# ----- the formula, by hand -------------------------------------------------------------------


def test_multi_head_attention_llama2():
    # 32 layers x 2 (K, V) x 32 heads x 128 dims x 2 bytes
    size = kv_cache_report(LLAMA2_7B, 1000)
    assert size.per_token_bytes == 2 * 32 * 32 * 128 * 2 == 524_288
    assert size.bytes == 1000 * 524_288
    assert (size.layers, size.kv_heads, size.head_dim, size.attention) == (32, 32, 128, "MHA")


def test_grouped_query_attention_llama3_8b_is_128_kib_per_token():
    size = kv_cache_report(LLAMA3_8B, 1)
    assert size.bytes == size.per_token_bytes == 131_072
    assert (size.kv_heads, size.head_dim, size.dtype_bytes, size.attention) == (8, 128, 2.0,
                                                                                 "GQA")
    assert kv_cache_report(LLAMA3_8B, 8192).bytes == 2**30
    assert kv_cache_report("llama-3.1-8b", 8192).bytes == 2**30  # the preset says the same


@pytest.mark.parametrize("dtype, per_token", [
    ("bfloat16", 131_072), ("float16", 131_072), ("torch.bfloat16", 131_072),
    ("float32", 262_144), ("fp8", 65_536), ("float8_e4m3fn", 65_536), ("int8", 65_536),
    ("int4", 32_768), ("int2", 16_384)])
def test_dtype_bytes(dtype, per_token):
    assert kv_cache_report(LLAMA3_8B, 3, dtype=dtype).bytes == 3 * per_token


def test_multi_query_attention_falcon():
    size = kv_cache_report(FALCON_7B, 2048)
    # 4544 / 71 = 64 dims, one KV head: 32 x 2 x 1 x 64 x 2 = 8 KiB per token
    assert (size.kv_heads, size.head_dim, size.attention) == (1, 64, "MQA")
    assert size.bytes == 2048 * 8192
    # Falcon-40B's new decoder architecture groups its 128 heads into 8 KV heads
    falcon40 = {"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60,
                "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": True}
    assert kv_cache_report(falcon40, 1).per_token_bytes == 60 * 2 * 8 * 64 * 2
    # the old architecture without multi_query is plain multi-head attention
    assert kv_cache_shape({**FALCON_7B, "multi_query": False}).kv_heads == 71
    # GPT-BigCode names multi-query the same way, without Falcon's other fields
    bigcode = {"model_type": "gpt_bigcode", "n_layer": 40, "n_head": 48, "n_embd": 6144,
               "multi_query": True}
    assert kv_cache_report(bigcode, 1).per_token_bytes == 40 * 2 * 1 * 128 * 2


def test_gpt2_field_names():
    assert kv_cache_report({"n_layer": 12, "n_head": 12, "n_embd": 768}, 10).bytes == \
        10 * 12 * 2 * 12 * 64 * 2


def test_explicit_head_dim_wins_over_hidden_size():
    # Gemma-2: 16 heads x 256 = 4096, not hidden_size 3584
    assert kv_cache_shape(GEMMA2_9B).head_dim == 256


def test_multi_head_latent_attention_caches_the_latent():
    deepseek = {"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
                "hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    size = kv_cache_report(deepseek, 100)
    assert size.attention == "MLA" and size.per_token_bytes == 61 * (512 + 64) * 2 == 70_272
    assert size.bytes == 100 * 70_272
    assert "576 latent values" in str(size)


# ----- sliding windows --------------------------------------------------------------------------


def test_mistral_window_every_layer():
    per_token = 131_072
    assert kv_cache_report(MISTRAL_7B, 1000).bytes == 1000 * per_token  # under the window
    assert kv_cache_report(MISTRAL_7B, 10_000).bytes == 4096 * per_token  # capped
    size = kv_cache_report(MISTRAL_7B, [10_000, 1000, 0])
    assert size.bytes == (4096 + 1000) * per_token  # each sequence capped on its own
    assert (size.tokens, size.sequences, size.window, size.window_layers) == (11_000, 3, 4096,
                                                                             32)
    assert "32 of 32 layers hold at most 4,096 tokens" in str(size)
    assert kv_cache_report({**MISTRAL_7B, "sliding_window": None}, 10_000).bytes == \
        10_000 * per_token


def test_gemma2_alternating_layers():
    # 21 of 42 layers slide over 4096 tokens; 2 x 8 heads x 256 dims x 2 bytes = 8 KiB per layer
    size = kv_cache_report(GEMMA2_9B, 8000)
    assert size.window_layers == 21
    assert size.bytes == 8192 * (21 * 8000 + 21 * 4096)
    assert kv_cache_report(GEMMA2_9B, 4000).bytes == 8192 * 42 * 4000  # all under the window


def test_layer_types_and_pattern():
    base = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 4, "sliding_window": 10}
    types = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
    # 2 x 2 heads x 4 dims x 2 bytes = 32 bytes per layer and token
    assert kv_cache_report({**base, "layer_types": types}, 100).bytes == 32 * (100 + 3 * 10)
    assert kv_cache_report({**base, "layer_types": ["full_attention"] * 4}, 100).bytes == \
        32 * 4 * 100
    # every second layer global
    assert kv_cache_shape({**base, "sliding_window_pattern": 2}).window_layers == 2
    # Gemma 3: 5 local layers to 1 global, read from the multimodal config's text_config
    gemma3 = {"model_type": "gemma3", "text_config": PRESETS["gemma-3-27b"].config["text_config"]}
    shape = kv_cache_shape(gemma3)
    assert (shape.layers, shape.window_layers, shape.window) == (62, 52, 1024)
    assert kv_cache_report(gemma3, 5000).bytes == 2 * 16 * 128 * 2 * (10 * 5000 + 52 * 1024)


def test_fields_a_config_leaves_out_come_from_transformers_defaults():
    # a text_config naming neither heads nor head_dim: Gemma3TextConfig fills 8 heads,
    # 4 KV heads, head_dim 256 and one global layer in 6
    partial = {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
        "sliding_window": 1024}}
    shape = kv_cache_shape(partial)
    assert (shape.kv_heads, shape.head_dim, shape.window_layers) == (4, 256, 34 - 34 // 6)
    assert kv_cache_report(partial, 2000).bytes == 2 * 4 * 256 * 2 * (5 * 2000 + 29 * 1024)


def test_qwen2_window_only_when_used():
    qwen = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "hidden_size": 3584, "sliding_window": 4096, "use_sliding_window": False,
            "max_window_layers": 28}
    assert kv_cache_report(qwen, 50_000).bytes == 50_000 * 57_344
    on = {**qwen, "use_sliding_window": True, "max_window_layers": 20}
    assert kv_cache_shape(on).window_layers == 8  # layers 20..27 slide


def test_array_tokens_and_per_sequence_bytes():
    counts = np.array([5000, 10, 4096], dtype=np.int32)
    each = kv_bytes_per_sequence(MISTRAL_7B, counts)
    assert each.tolist() == [4096 * 131_072, 10 * 131_072, 4096 * 131_072]
    assert kv_cache_report(MISTRAL_7B, counts).bytes == int(each.sum())
    assert kv_cache_report(LLAMA3_8B, []).bytes == 0


# ----- where the config comes from --------------------------------------------------------------


def test_config_json_path_and_model_directory(tmp_path):
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA3_8B))
    by_dir = kv_cache_report(model, 100)
    by_file = kv_cache_report(model / "config.json", 100)
    by_str = kv_cache_report(str(model), 100)
    assert by_dir.bytes == by_file.bytes == by_str.bytes == 100 * 131_072
    assert by_dir.model == by_file.model == "my-llama"
    other = tmp_path / "falcon.json"
    other.write_text(json.dumps(FALCON_7B))
    assert kv_cache_report(other, 1).model == "falcon"


def test_every_preset_has_a_source_and_is_in_the_docs():
    docs = (Path(__file__).parents[1] / "docs" / "kvcache.md").read_text()
    for name, preset in PRESETS.items():
        assert preset.url.startswith("https://huggingface.co/") and preset.url.endswith(
            "/config.json")
        size = kv_cache_report(name, 1)
        row = f"| `{name}` | {size.attention} | {size.per_token_bytes:,} |"
        assert row in docs, row
        assert preset.url in docs


def test_change_before_and_after():
    change = kv_cache_change("llama-3.1-8b", [4096, 4096], [1024, 0])
    assert (change.before.bytes, change.after.bytes) == (8192 * 131_072, 1024 * 131_072)
    assert change.saved_bytes == 7168 * 131_072 and change.ratio == 0.125
    assert str(change) == ("llama-3.1-8b KV cache (bfloat16): 1.00 GiB -> 128 MiB "
                           "(saves 896 MiB, 87.5%)")
    assert change.to_dict()["per_token_bytes"] == 131_072
    assert kv_cache_change("gpt2", 0, 0).ratio == 1.0


def test_docs_page_examples_run():
    import doctest

    page = Path(__file__).parents[1] / "docs" / "kvcache.md"
    result = doctest.testfile(str(page), module_relative=False,
                              optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1024, 36_864, 10 * 2**20, 3 * 2**40)] == \
        ["0 B", "1,023 B", "1.00 KiB", "36.0 KiB", "10.0 MiB", "3.00 TiB"]


# ----- what cannot be sized ---------------------------------------------------------------------


@pytest.mark.parametrize("config, match", [
    ({"num_attention_heads": 32, "hidden_size": 4096},
     "config: missing num_hidden_layers / n_layer / num_layers / n_layers"),
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "missing num_attention_heads"),
    ({"num_hidden_layers": 32, "num_attention_heads": 32}, "missing hidden_size"),
    ({"num_hidden_layers": 0, "num_attention_heads": 32, "hidden_size": 4096},
     "num_hidden_layers must be a positive integer, got 0"),
    ({"num_hidden_layers": "32", "num_attention_heads": 32, "hidden_size": 4096},
     "num_hidden_layers must be a positive integer, got '32'"),
    ({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 100},
     "hidden size 100 is not a multiple of 3 heads"),
    ({**LLAMA3_8B, "num_key_value_heads": 5}, "5 KV heads do not divide 32 attention heads"),
    ({**LLAMA3_8B, "layer_types": ["full_attention"] * 3}, "one type per layer \\(32\\)"),
    ({**LLAMA3_8B, "layer_types": ["mamba"] * 32}, "layer type 'mamba' is not supported"),
    ({**LLAMA3_8B, "layer_types": ["sliding_attention"] * 32}, "but no sliding_window"),
    ({"num_hidden_layers": 2, "kv_lora_rank": 512}, "missing qk_rope_head_dim"),
    ({"model_type": "no-such-model", "text_config": {"num_hidden_layers": 4}},
     "config: text_config: missing num_attention_heads"),
    ({"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 0},
     "num_attention_heads must be a positive integer, got 0"),
])
def test_bad_configs_say_what_is_missing(config, match):
    with pytest.raises(OptionError, match=match):
        kv_cache_report(config, 10)


def test_bad_paths_and_names(tmp_path):
    with pytest.raises(OptionError, match=r"unknown model 'llama-9'.*not a preset \(llama-2-7b"):
        kv_cache_report("llama-9", 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(OptionError, match="model directory .*empty has no config.json"):
        kv_cache_report(tmp_path / "empty", 1)
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text('{"num_hidden_layers": 2,\n oops}')
    with pytest.raises(OptionError, match=re.escape(f"{bad}: not valid JSON (line 2")):
        kv_cache_report(bad.parent, 1)
    bad.write_text("[1, 2]")
    with pytest.raises(OptionError, match="a config.json holds an object, got list"):
        kv_cache_report(bad, 1)
    bad.write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(OptionError, match="bad: missing num_attention_heads"):
        kv_cache_report(bad, 1)  # the error names the model directory


def test_bad_tokens_and_dtype():
    with pytest.raises(OptionError, match="unknown KV-cache dtype 'fp7'; choose from float32"):
        kv_cache_report(LLAMA3_8B, 1, dtype="fp7")
    with pytest.raises(InputError, match="token counts must be >= 0, got -3"):
        kv_cache_report(LLAMA3_8B, [5, -3])
    with pytest.raises(InputError, match="per-sequence token counts"):
        kv_cache_report(LLAMA3_8B, [1.5, 2.0])
    with pytest.raises(InputError, match="per-sequence token counts"):
        kv_cache_report(LLAMA3_8B, True)
    with pytest.raises(OptionError, match="config must be a dict, a path or a preset name"):
        kv_cache_report(42, 1)


def test_kv_cache_bytes_is_the_byte_count_and_the_report_its_breakdown():
    cfg = LLAMA3_8B
    size = ctxkit.kv_cache_bytes(cfg, 1000)
    assert type(size) is int and int(size) == ctxkit.kv_cache_report(cfg, 1000).bytes
    assert size == 1000 * 131072
    # per-sequence counts add up to one total, as the report's
    assert ctxkit.kv_cache_bytes(MISTRAL_7B, [10_000, 100], dtype="fp8") == \
        ctxkit.kv_cache_report(MISTRAL_7B, [10_000, 100], dtype="fp8").bytes == (4096 + 100) * 65536
    assert isinstance(ctxkit.kv_cache_report(cfg, 1), ctxkit.KVCacheReport)
    with pytest.raises(TypeError):
        ctxkit.kv_cache_bytes(cfg, 1, "fp8")  # dtype is keyword-only
