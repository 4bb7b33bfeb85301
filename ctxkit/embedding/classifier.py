"""Packed classification heads: ``PackedClassifier``, the logits of a sequence classifier.

A BERT-family ``AutoModelForSequenceClassification`` model or a sentence-transformers
``CrossEncoder`` reads only the first token of each text after its encoder. So the encoder
runs on packed rows exactly as :class:`~ctxkit.embedding.encoder.PackedEncoder` runs it (own
``[CLS] ... [SEP]`` per text, restarting positions, block-diagonal attention, token types
restarting per pair), the first-token state of every segment is taken, and the model's own
head modules turn it into logits (their dropouts are off in eval mode):

- ``BertForSequenceClassification``: ``bert.pooler`` (dense + tanh), then ``classifier``;
- ``RobertaForSequenceClassification`` (and XLM-R, CamemBERT) and
  ``ElectraForSequenceClassification``: their ``classifier`` head (dense, tanh or GELU,
  ``out_proj``), which reads the first token itself;
- ``DistilBertForSequenceClassification``: ``pre_classifier``, ReLU, ``classifier``.

Why this equals the unpacked model: ``docs/classify.md``.

Example (a small random BERT classifier; a directory or a ``CrossEncoder`` works the same):
    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> from ctxkit.io.tokenizers import get_tokenizer
    >>> model = BertForSequenceClassification(BertConfig(
    ...     hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
    >>> clf = PackedClassifier(model, device="cpu", tokenizer=get_tokenizer("minilm").backend)
    >>> clf.predict(["great product", "", "broken on arrival"]).shape
    (3, 2)
    >>> clf.labels, clf.last_stats.empty
    (['LABEL_0', 'LABEL_1'], 1)
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctxkit import validate
from ctxkit.embedding.encoder import PackedPasses, Tokenized, tokenize_texts
from ctxkit.embedding.model import PackedModel, packed_encoder, resolve_device, resolve_dtype
from ctxkit.embedding.ops import RowBatch, pool_segments
from ctxkit.embedding.options import ClassifyOptions, EmbedOptions
from ctxkit.errors import InputError, OptionError
from ctxkit.io.models import load_pretrained, quiet_loading
from ctxkit.options import bad_option

__all__ = ["ClassifierModel", "PackedClassifier", "load_classifier", "scores_from_logits"]

# class name -> how its head reads the first-token state (see the module docstring)
_HEADS = {
    "BertForSequenceClassification": "pooler",
    "RobertaForSequenceClassification": "classification_head",
    "XLMRobertaForSequenceClassification": "classification_head",
    "CamembertForSequenceClassification": "classification_head",
    "ElectraForSequenceClassification": "classification_head",
    "DistilBertForSequenceClassification": "pre_classifier",
}
_D = ClassifyOptions()


def _head_fn(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """First-token states ``[k, hidden]`` -> logits ``[k, num_labels]`` with the model's own
    modules (the model is in eval mode, so its dropouts are the identity)."""
    name = type(model).__name__
    kind = _HEADS.get(name)
    if kind is None:
        raise ValueError(f"packed classification supports {', '.join(sorted(_HEADS))}; "
                         f"got {name}")
    if kind == "pooler":
        pooler = model.bert.pooler
        if pooler is None:
            raise ValueError(f"{name} has no pooler (bert.pooler is None): its own forward "
                             "cannot run either")
        return lambda cls: model.classifier(pooler(cls.unsqueeze(1)))
    if kind == "classification_head":  # the head takes features[:, 0, :] itself
        return lambda cls: model.classifier(cls.unsqueeze(1))
    return lambda cls: model.classifier(torch.relu(model.pre_classifier(cls)))


def scores_from_logits(logits: np.ndarray, config: Any,
                       activation: Callable | None = None) -> np.ndarray:
    """Scores as the user's library reports them: ``activation`` (a ``CrossEncoder``'s
    ``activation_fn``) when given, else transformers' text-classification pipeline rule:
    sigmoid for one label or ``multi_label_classification``, none for ``regression``,
    softmax otherwise.

    Example:
        >>> from types import SimpleNamespace
        >>> cfg = SimpleNamespace(num_labels=2, problem_type=None)
        >>> scores_from_logits(np.array([[0.0, 0.0]]), cfg).tolist()
        [[0.5, 0.5]]
    """
    logits = np.asarray(logits, dtype=np.float32)
    if activation is not None:
        out = activation(torch.from_numpy(logits)).float().numpy()
        return out.reshape(logits.shape)
    problem = getattr(config, "problem_type", None)
    if problem == "regression":
        return logits
    if problem == "multi_label_classification" or logits.shape[-1] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@dataclass
class ClassifierModel(PackedModel):
    """A sequence classifier made ready for packed passes: its encoder and its head."""

    model: Any = field(default=None, repr=False)  # the transformers classification model
    head: Callable[[torch.Tensor], torch.Tensor] | None = field(default=None, repr=False)
    labels: tuple[str, ...] = ()
    activation: Callable | None = field(default=None, repr=False)  # a CrossEncoder's
    cross_encoder: bool = False


def _is_cross_encoder_dir(path: Path) -> bool:
    st_cfg = path / "config_sentence_transformers.json"
    try:
        if st_cfg.exists():
            return json.loads(st_cfg.read_text()).get("model_type") == "CrossEncoder"
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return "sbert_ce_default_activation_function" in cfg  # saved by sentence-transformers < 4


def _max_length(tokenizer: Any, config: Any, offset: int, given: int | None) -> int:
    """The tokenizer's ``model_max_length`` (what ``truncation=True`` cuts to), never past the
    position table."""
    positions = int(config.max_position_embeddings) - offset
    tok_max = getattr(tokenizer, "model_max_length", None) or positions
    limit = min(int(min(tok_max, 1 << 30)), positions)
    if given is None:
        return limit
    if isinstance(given, bool) or not isinstance(given, int) or not 1 < given <= positions:
        raise ValueError(f"max_length must be an integer in 2..{positions}, got {given!r}")
    return given


def classifier_from_model(model: Any, tokenizer: Any, device: torch.device, dtype: torch.dtype,
                          name: str, max_length: int | None = None,
                          activation: Callable | None = None,
                          cross_encoder: bool = False) -> ClassifierModel:
    """A :class:`ClassifierModel` for a loaded transformers classification model."""
    head = _head_fn(model)
    model.to(device)
    model.eval()
    parts = packed_encoder(model.base_model, device, dtype, name)
    cfg = model.config
    n = int(cfg.num_labels)
    id2label = {int(k): v for k, v in (getattr(cfg, "id2label", None) or {}).items()}
    return ClassifierModel(
        tokenizer=tokenizer, pad_id=int(tokenizer.pad_token_id or 0),
        max_seq_length=_max_length(tokenizer, cfg, parts["position_offset"], max_length),
        model=model, head=head, labels=tuple(str(id2label.get(i, f"LABEL_{i}"))
                                             for i in range(n)),
        activation=activation, cross_encoder=cross_encoder, **parts)


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, device: str, dtype: str, max_length: int | None) -> ClassifierModel:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dev = torch.device(device)
    dt = resolve_dtype(dtype, dev)
    if _is_cross_encoder_dir(Path(path)):
        from sentence_transformers import CrossEncoder

        try:
            with quiet_loading():
                ce = CrossEncoder(path, device=str(dev), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure to read the user's files is theirs
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"cannot load a cross-encoder from {path!r}: {first}") from exc
        return _from_cross_encoder(ce, dev, dt, path, max_length)
    from transformers import AutoTokenizer

    # refuses a checkpoint without a trained classification head (transformers would make
    # one up and every label would be random)
    model = load_pretrained(path, "sequence classifier")
    try:
        with quiet_loading():
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"found no tokenizer beside the classifier in {path!r}") from exc
    return classifier_from_model(model, tok, dev, dt, path, max_length)


def _from_cross_encoder(ce: Any, device: torch.device, dtype: torch.dtype, name: str,
                        max_length: int | None) -> ClassifierModel:
    given = max_length if max_length is not None else getattr(ce, "max_seq_length", None)
    return classifier_from_model(ce.model, ce.tokenizer, device, dtype, name, given,
                                 activation=ce.activation_fn, cross_encoder=True)


def load_classifier(model: Any, device: str | torch.device = "auto",
                    dtype: str | torch.dtype = "auto", *, tokenizer: Any = None,
                    max_length: int | None = None) -> ClassifierModel:
    """A :class:`ClassifierModel` for ``model``: a local directory (a transformers sequence
    classifier or a saved ``CrossEncoder``; cached per directory, device and dtype), a loaded
    ``CrossEncoder``, or a loaded transformers classification model (its ``tokenizer`` given,
    or found offline at its ``name_or_path``)."""
    dev = resolve_device(device)
    if isinstance(model, (str, Path)):
        path = Path(model).expanduser()
        if not path.is_dir():
            raise bad_option("model", f" directory not found: {str(path)!r} (no downloads "
                                      "offline)")
        dt = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        return _load_cached(str(path.resolve()), str(dev), dt, max_length)
    dt = resolve_dtype(dtype, dev)
    if type(model).__name__ == "CrossEncoder":
        return _from_cross_encoder(model, dev, dt, "CrossEncoder", max_length)
    if not hasattr(model, "base_model") or not hasattr(model, "config"):
        raise bad_option("model", " must be a directory, a CrossEncoder or a transformers "
                                  f"sequence-classification model, got {type(model).__name__}")
    if tokenizer is None:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model.name_or_path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ValueError("pass tokenizer=: none found offline at the model's "
                             f"name_or_path {model.name_or_path!r}") from exc
    return classifier_from_model(model, tokenizer, dev, dt, type(model).__name__, max_length)


class PackedClassifier(PackedPasses):
    """Sequence-classifier and cross-encoder logits with packed rows; equal to the model's own
    (unpacked) logits to fp32 rounding.

    ``model``: a local directory holding a transformers sequence classifier
    (``AutoModelForSequenceClassification``: BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA,
    DistilBERT) or a saved sentence-transformers ``CrossEncoder``; or such a model loaded
    (a ``CrossEncoder``, or a transformers model with its ``tokenizer``). ``max_length``:
    truncation length (default: the tokenizer's ``model_max_length``, a CrossEncoder's
    ``max_seq_length``). ``device``, ``dtype``, ``batch_tokens``, ``row_length``,
    ``attention``, ``overlap``, ``chunk_size``: as :class:`~ctxkit.embedding.encoder.
    PackedEncoder` (one :class:`~ctxkit.embedding.options.ClassifyOptions` may give them all,
    ``max_length`` included).

    ``labels`` are the label names from the model config (``id2label``); ``last_stats`` the
    figures of the last call, as on ``PackedEncoder``.

    Example:
        >>> clf = PackedClassifier("path/to/classifier", device="cpu")  # doctest: +SKIP
        >>> logits = clf.predict(["I loved it", "", "never again"])  # doctest: +SKIP
        >>> [clf.labels[i] for i in logits.argmax(1)]  # doctest: +SKIP
        ['POSITIVE', 'NEGATIVE', 'NEGATIVE']
    """

    def __init__(self, model: Any = _D.model, *, options: EmbedOptions | None = None,
                 device: str = _D.device, dtype: str = _D.dtype,
                 batch_tokens: int | None = _D.batch_tokens,
                 row_length: int | str = _D.row_length, attention: str = _D.attention,
                 overlap: bool | None = _D.overlap, chunk_size: int = _D.chunk_size,
                 max_length: int | None = _D.max_length, tokenizer: Any = None) -> None:
        opts = ClassifyOptions.resolve(
            ClassifyOptions.of(options), model=model, device=device, dtype=dtype,
            batch_tokens=batch_tokens, row_length=row_length, attention=attention,
            overlap=overlap, chunk_size=chunk_size, max_length=max_length)
        if opts.model is None:
            raise OptionError("model", "PackedClassifier needs a model: a local classifier or "
                                       "cross-encoder directory, or a loaded model")
        self.classifier = load_classifier(opts.model, opts.device, opts.dtype,
                                          tokenizer=tokenizer, max_length=opts.max_length)
        self._configure(self.classifier, opts)
        self._head_dtype = next(self.classifier.model.classifier.parameters()).dtype

    @property
    def labels(self) -> list[str]:
        """Label names, in logit order (``config.id2label``)."""
        return list(self.classifier.labels)

    @property
    def num_labels(self) -> int:
        return len(self.classifier.labels)

    def tokenize(self, inputs: Sequence[tuple[str, ...]]) -> Tokenized:
        """Token ids of ``(text,)`` or ``(query, document)`` tuples, as the model's tokenizer
        encodes texts or pairs (truncation ``"longest_first"`` to ``max_seq_length``)."""
        cm = self.classifier
        pairs = bool(inputs) and len(inputs[0]) == 2
        types = pairs and cm.token_types and \
            "token_type_ids" in getattr(cm.tokenizer, "model_input_names", ())
        return tokenize_texts(cm.tokenizer, [x[0] for x in inputs], self.max_seq_length,
                              [x[1] for x in inputs] if pairs else None, token_types=types)

    def _logits(self, b: RowBatch, hidden: torch.Tensor) -> torch.Tensor:
        dev = hidden.device
        seg, pos, starts, lens = (torch.from_numpy(a).to(dev) for a in
                                  (b.segment_ids, b.position_ids, b.starts, b.lengths))
        first = pool_segments(hidden, seg, pos, starts, lens, ("cls",))
        return self.classifier.head(first.to(self._head_dtype))

    def predict(self, inputs: Sequence[str] | Sequence[tuple[str, str]],
                *, batch_tokens: int | None = None, activation: bool = False,
                progress: bool | Callable[[int], Any] = False) -> np.ndarray:
        """Logits ``[len(inputs), num_labels]`` (float32, input order) for texts, or for
        ``(query, document)`` pairs as a ``CrossEncoder`` takes them.

        ``activation=True`` returns scores instead: a ``CrossEncoder``'s own activation
        (sigmoid for one label, so equal to ``CrossEncoder.predict``), else transformers'
        pipeline rule (:func:`scores_from_logits`). ``batch_tokens`` and ``progress`` as
        ``PackedEncoder.encode``; the call's figures go to ``last_stats``.

        Example:
            >>> clf = PackedClassifier("path/to/cross-encoder")  # doctest: +SKIP
            >>> clf.predict([("who wrote it?", "Ann wrote it."), ("who?", "")]).shape
            ... # doctest: +SKIP
            (2, 1)
        """
        items = _as_items(inputs)
        out = self._run(items, self.tokenize, self._logits, self.num_labels, batch_tokens,
                        progress, "classify")
        if activation:
            return scores_from_logits(out, self.classifier.model.config,
                                      self.classifier.activation)
        return out


def _as_items(inputs: Any) -> list[tuple[str, ...]]:
    """Texts as ``(text,)``, pairs as ``(query, document)``; one kind per call."""
    if isinstance(inputs, str):
        raise InputError("predict() takes a list of texts or of (query, document) pairs, not "
                         "one str; wrap it in a list")
    if not validate.is_collection(inputs):
        raise InputError(f"inputs must be a list of texts or of (query, document) pairs, got "
                         f"{type(inputs).__name__}")
    items = []
    pairs = None
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            item = (x,)
        elif isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(t, str) for t in x):
            item = (x[0], x[1])
        else:
            raise InputError(f"input {i} is {_describe(x)}; give str texts or (query, "
                             "document) pairs of str")
        if pairs is None:
            pairs = len(item) == 2
        elif pairs != (len(item) == 2):
            raise InputError(f"input {i} is a {'text' if pairs else 'pair'} but input 0 is a "
                             f"{'pair' if pairs else 'text'}; give one kind per call")
        items.append(item)
    return items


def _describe(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} item(s)"
    return type(x).__name__
