"""The public API named in the architecture page resolves and behaves as documented."""

import subprocess
import sys

import pytest

import ctxkit


def test_every_public_name_resolves():
    missing = [name for name in ctxkit.__all__ if getattr(ctxkit, name, None) is None]
    assert missing == []


def test_packed_model_classes_are_public():
    assert {"PackedEncoder", "PackedClassifier", "EmbedOptions"} <= set(ctxkit.__all__)


def test_pack_is_callable_whichever_import_comes_first():
    code = (
        "import ctxkit.packing.plan, ctxkit\n"
        "b = ctxkit.pack([[1, 2, 3], [4, 5]], capacity=4)\n"
        "assert b.input_ids.tolist() == [[1, 2, 3, 0], [4, 5, 0, 0]]\n"
        "import ctxkit.packing.collate\n"
        "assert callable(ctxkit.pack)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert ctxkit.pack([[7]], capacity=2).input_ids.tolist() == [[7, 0]]


_CALL_EVERY_PUBLIC_FUNCTION = """
import ctxkit
texts = ["a cat sat on the mat", "a cat sat on the mat", "dogs bark loudly at night"]
assert ctxkit.pack([[1, 2, 3], [4, 5]], capacity=4).input_ids.shape == (2, 4)
assert ctxkit.pack_lengths([3, 2], capacity=4).n_bins == 2
assert ctxkit.dedup(texts, method="exact").keep.tolist() == [0, 2]
assert len(ctxkit.density(texts).texts) == 3
assert ctxkit.compress("one. two. three.", budget=50).text
assert ctxkit.compress_chat([{"role": "user", "content": "hi"}], budget=50).messages
assert ctxkit.evaluate(texts, capacity=64, sections=("lengths",)).sections
assert ctxkit.get_tokenizer("cl100k_base").count("hello") == 1
assert ctxkit.kv_cache_bytes("llama-3.1-8b", 2) == 262144
"""


def _submodules() -> list[str]:
    import pkgutil

    return sorted(
        m.name for m in pkgutil.walk_packages(ctxkit.__path__, "ctxkit.")
        if not m.name.startswith("ctxkit.distributed") and m.name != "ctxkit.__main__"
    )


@pytest.mark.parametrize("order", ["submodules first", "functions first"])
def test_public_functions_survive_importing_every_submodule(order):
    """No submodule import may shadow a public function (ctxkit.density, ctxkit.evaluate...)."""
    imports = "".join(f"import {m}\n" for m in _submodules())
    code = (imports + _CALL_EVERY_PUBLIC_FUNCTION if order == "submodules first"
            else _CALL_EVERY_PUBLIC_FUNCTION + imports + _CALL_EVERY_PUBLIC_FUNCTION)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_is_light():
    code = "import sys, ctxkit; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"
