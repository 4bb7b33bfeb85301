"""Defaults are declared once, on the option classes: every CLI option and every public
keyword that maps to an option-class field has that field's default."""

import dataclasses
import inspect

import click
import pytest
import typer

import ctxkit
from ctxkit.cli import app
from ctxkit.compression.options import ChatOptions, CompressOptions, DensityOptions
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
