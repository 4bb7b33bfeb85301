"""Defaults are declared once, on the option classes: every CLI option and every public
keyword that maps to an option-class field has that field's default."""

import dataclasses
import inspect

import click
import pytest
import typer

import ctxkit
from ctxkit.chat.options import ChatOptions
from ctxkit.cli import app
from ctxkit.compression.options import CompressOptions, DensityOptions
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.embedding.options import ClassifyOptions, EmbedOptions
from ctxkit.packing.options import PackOptions

# command -> option classes whose fields its options map to (CLI name = field name)
COMMAND_OPTIONS = {
    "pack": [PackOptions],
    "demo": [PackOptions],
    "eval": [PackOptions],
    "dedup": [MinHashOptions],  # --threshold is per method: "minhash=0.7,semantic=0.9"
    "embed": [EmbedOptions],
    "classify": [ClassifyOptions],
    "compress": [CompressOptions],
    "chat": [ChatOptions],
    "density": [DensityOptions],
}
FUNCTIONS = [
    (ctxkit.compress, CompressOptions),
    (ctxkit.compress_chat, ChatOptions),
    (ctxkit.ChatMemory, ChatOptions),
    (ctxkit.PackedEncoder, EmbedOptions),
    (ctxkit.PackedClassifier, ClassifyOptions),
    (ctxkit.pack, PackOptions),
    (ctxkit.density, DensityOptions),
]


# options that share a field's name but not its meaning: the seed of generated data (demo,
# eval) is not the window shuffle's, and dedup's threshold spans methods
NOT_FIELDS = {("demo", "seed"), ("eval", "seed"), ("dedup", "threshold")}


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING}


def _commands() -> dict[str, click.Command]:
    return typer.main.get_command(app).commands


@pytest.mark.parametrize("command", sorted(COMMAND_OPTIONS))
def test_cli_defaults_are_the_option_classes(command):
    params = {p.name: p for p in _commands()[command].params}
    checked = 0
    for cls in COMMAND_OPTIONS[command]:
        for name, default in _defaults(cls).items():
            if name in params and not params[name].required and (command, name) not in \
                    NOT_FIELDS:
                got = params[name].default
                assert got == default or (got is None and default == ()), (command, name)
                checked += 1
    assert checked >= 1, command  # the mapping above still reaches the command's options


@pytest.mark.parametrize("fn,cls", FUNCTIONS, ids=lambda x: getattr(x, "__name__", ""))
def test_function_defaults_are_the_option_classes(fn, cls):
    params = inspect.signature(fn).parameters
    defaults = _defaults(cls)
    shared = [n for n in params if n in defaults]
    assert len(shared) >= 3
    for name in shared:
        assert params[name].default == defaults[name], (fn.__name__, name)
        if fn is not ctxkit.pack and name != "model":  # model: the encoders' first argument
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_a_changed_default_is_seen():
    # the check can fail: a default that differs from the field's is caught
    def fake(text, *, granularity="sentence"):
        """fake"""

    assert inspect.signature(fake).parameters["granularity"].default != \
        _defaults(CompressOptions)["granularity"]


# entry points whose option keywords come from their option set (ctxkit.options.takes_options)
DECLARED_ONCE = [
    (ctxkit.compress, CompressOptions),
    (ctxkit.compress_chat, ChatOptions),
    (ctxkit.ChatMemory, ChatOptions),
    (ctxkit.density, DensityOptions),
]


def _keyword_defaults(fn) -> dict:
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize("fn,cls", DECLARED_ONCE, ids=lambda x: getattr(x, "__name__", ""))
def test_signature_is_the_option_set(fn, cls):
    # every field is a keyword at its default, and no field is missing (ChatMemory once had
    # no image_tokens)
    keywords = _keyword_defaults(fn)
    fields = _defaults(cls)
    assert {k: keywords.get(k, "missing") for k in fields} == fields


def test_a_signature_that_lacks_a_field_is_caught():
    def partial(text, *, options=None, tokenizer="cl100k_base"):
        """fake"""

    keywords = _keyword_defaults(partial)
    fields = _defaults(CompressOptions)
    assert {k: keywords.get(k, "missing") for k in fields} != fields


def _history(turns: int = 8) -> list[dict]:
    msgs = []
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: tell me about topic {i}, its "
                     "long history and the people in it. " * 3})
        msgs.append({"role": "assistant", "content": f"Answer {i}: the details of topic {i} "
                     "with names, places and dates. " * 3})
    return msgs


def test_a_written_keyword_applies_over_options():
    msgs = _history()
    two = ctxkit.compress_chat(msgs, 400, keep_last=2, scorer="idf")
    five = ctxkit.compress_chat(msgs, 400, keep_last=5, scorer="idf")
    assert two.messages != five.messages  # the case tells keep_last=2 from 5
    both = ctxkit.compress_chat(msgs, 400, options=ChatOptions(keep_last=5, scorer="idf"),
                                keep_last=2)
    assert both.messages == two.messages
    mem = ctxkit.ChatMemory(400, options=ChatOptions(keep_last=5), keep_last=2)
    assert mem.options.keep_last == 2
    text = " ".join(m["content"] for m in msgs)
    sort = ctxkit.compress(text, 60, options=CompressOptions(reorder="sort", scorer="idf"),
                           reorder="original")
    assert sort.text == ctxkit.compress(text, 60, scorer="idf").text


def test_memory_takes_every_chat_option():
    assert ctxkit.ChatMemory(400, image_tokens=10).options.image_tokens == 10


def test_unknown_keyword_and_wrong_options_type():
    with pytest.raises(TypeError, match="keep_lats"):
        ctxkit.compress_chat([], 10, keep_lats=2)
    with pytest.raises(ValueError, match="options must be a ChatOptions"):
        ctxkit.compress_chat([{"role": "user", "content": "hi"}], 10,
                             options=CompressOptions())
