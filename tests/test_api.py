"""The public API named in the architecture page resolves and behaves as documented."""

import subprocess
import sys

import pytest

import ctxkit

TIMEOUT = 300  # seconds for any subprocess


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
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)
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
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


def test_import_is_light():
    code = "import sys, ctxkit; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.stdout.strip() == "ok"


# Parameters a caller may pass by position: the data argument, plus a second datum where a
# call has two (a model config and token counts; units and the query they are scored for;
# the text and the budget it must fit; a model and the batch or token ids it is checked on).
_POSITIONAL = {"kv_cache_bytes": 2, "Scorer.relevance": 2, "compress": 2, "compress_chat": 2,
               "check_packing": 2, "freeze_token_rows": 2, "kv_cache_report": 2}


def _public_callables():
    import dataclasses
    import inspect

    for name in sorted(ctxkit._EXPORTS):
        obj = getattr(ctxkit, name)
        if not isinstance(obj, type):
            yield name, obj
            continue
        # results, records, option sets and errors are built from fields, not called with data
        if not (dataclasses.is_dataclass(obj) or issubclass(obj, BaseException)) \
                and "__init__" in vars(obj):
            yield name, obj.__init__
        for attr, value in vars(obj).items():
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if not attr.startswith("_") and inspect.isfunction(value):
                yield f"{name}.{attr}", value


@pytest.mark.parametrize("name,fn", list(_public_callables()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_options_are_keyword_only_after_the_data_argument(name, fn):
    import inspect

    params = [p for p in inspect.signature(fn).parameters.values()
              if p.name not in ("self", "cls")]
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    assert positional == [p.name for p in params[:len(positional)]]
    assert len(positional) <= _POSITIONAL.get(name, 1), f"{name}: {positional}"


def test_the_signature_check_can_fail():
    def bad(texts, threshold=0.5):
        """A function taking an option by position."""

    with pytest.raises(AssertionError):
        test_options_are_keyword_only_after_the_data_argument("bad", bad)
