"""``ctxkit check-packing --model DIR IN`` as a function: pack records, check, print, exit code.

:func:`check_packing_command` loads a local model directory with transformers (offline), reads
records (text through the model's tokenizer, or already tokenized ``input_ids``), packs the
first ``max_records`` of them with :func:`ctxkit.pack` and runs :func:`ctxkit.check_packing` on
the batch. It prints a table of the segments and the verdict and returns the exit status:
0 when the segments stay apart, 1 on a leak, 2 on bad input (one line naming it).

Example:
    >>> check_packing_command("/no/such/model", "data.jsonl", capacity=512)
    2
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError, OptionError, RecordError
from ctxkit.io.models import load_pretrained
from ctxkit.io.records import check_input, read_records
from ctxkit.io.tokenizers import HFTokenizer
from ctxkit.packing.collate import pack
from ctxkit.training.check import CheckPackingResult, check_packing

__all__ = ["check_packing_command", "load_sequences", "render_check"]


def _load_model(model_dir: Path, attn_implementation: str | None, use_cache: bool) -> Any:
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    # refuses a classifier, a bare encoder or a checkpoint lacking the LM head: checked with a
    # random head the verdict would be about a model the user does not train
    model = load_pretrained(model_dir, "causal LM", **kwargs)
    # a saved config says how the model generates (use_cache: true); a training step runs
    # without the KV cache unless the trainer is told otherwise, and the check runs the
    # batch as the trainer will
    model.config.use_cache = use_cache
    return model


def _token_rows(path: Path) -> list[tuple[int, dict[str, Any]]] | None:
    """``(line, object)`` of a JSONL of tokenized records, or None when they are text records."""
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        return None
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RecordError(str(path), line, f"invalid JSON: {exc.msg}") from None
            if not rows and not (isinstance(obj, dict) and "input_ids" in obj):
                return None  # text records: read_records reads them
            rows.append((line, obj))
    return rows


def _ids(value: Any, path: Path, line: int, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                              and t >= 0 for t in value):
        raise RecordError(str(path), line, f"{name!r} must be a list of token ids (ints >= 0)")
    return value


def load_sequences(path: str | Path, tokenizer: HFTokenizer | None, *, field: str | None = None,
                   template: str | None = None, limit: int | None = None
                   ) -> tuple[list[list[int]], list[list[int]] | None]:
    """Token sequences of the records in ``path`` and their completion masks (or None).

    A JSONL whose records carry ``input_ids`` (and optionally ``completion_mask``) is used as
    it is; other records are read by :func:`~ctxkit.io.records.read_records` (``field`` or
    ``template``) and tokenized; with the ``alpaca`` template the prompt is masked.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"input_ids": [5, 6, 7], "completion_mask": [0, 1, 1]}\\n')
        >>> load_sequences(path, None)
        ([[5, 6, 7]], [[0, 1, 1]])
    """
    path = check_input(path)
    rows = _token_rows(path)
    if rows is not None:
        rows = rows[:limit]
        seqs = [_ids(obj.get("input_ids"), path, line, "input_ids") for line, obj in rows]
        if not all("completion_mask" in obj for _, obj in rows):
            return seqs, None
        masks = [_ids(obj["completion_mask"], path, line, "completion_mask")
                 for line, obj in rows]
        for (line, _), s, m in zip(rows, seqs, masks):
            if len(s) != len(m):
                raise RecordError(str(path), line, f"completion_mask has {len(m)} entries for "
                                  f"{len(s)} tokens")
        return seqs, masks
    if tokenizer is None:
        raise InputError(f"{path} holds text records and no tokenizer was given (the model "
                         "directory has none)")
    records = []
    for record in read_records(path, field=field, template=template):
        if limit is not None and len(records) >= limit:
            break
        records.append(record)
    if not any(r.prompt is not None for r in records):
        return tokenizer.encode_batch([r.text for r in records]), None
    seqs, masks = [], []
    for r in records:
        prompt = tokenizer.encode(r.prompt or "")
        rest = tokenizer.encode(r.completion if r.prompt is not None else r.text)
        seqs.append(prompt + rest)
        masks.append([0] * len(prompt) + [1] * len(rest))
    return seqs, masks


def _leading_zeros(mask: list[int]) -> int:
    """The prompt length of a completion mask: its leading tokens that are not trained on."""
    return next((i for i, m in enumerate(mask) if m), len(mask))


def _separator(separator: str, tokenizer: HFTokenizer | None, model: Any) -> int | None:
    """``--separator``: ``eos`` (the tokenizer's, else the model config's), ``none`` or an id."""
    from ctxkit.jobs.pack import parse_separator

    if separator.strip().lower() != "eos" or tokenizer is not None:
        return parse_separator(separator, tokenizer)
    eos = getattr(model.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, list) and eos else eos
    if not isinstance(eos, int):
        raise OptionError("--separator", "the model has no EOS token; use --separator none or "
                                         "an id")
    return eos


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_check(result: CheckPackingResult, console: Any = None, limit: int = 40) -> None:
    """Print ``result`` as a rich table of segments (leaking ones first) and the verdict."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"check-packing: {result.attn_implementation} attention, atol "
                  f"{result.atol:g}", title_justify="left")
    for name in ("segment", "row", "start", "tokens", "max |d logit|", "loss packed",
                 "loss alone", "d loss", "verdict"):
        table.add_column(name, justify="left" if name == "verdict" else "right")
    shown = sorted(result.segments, key=lambda s: (s.verdict != "leak", s.index))[:limit]
    for s in shown:
        style = "red" if s.verdict == "leak" else "green"
        table.add_row(str(s.index), str(s.row), str(s.start), str(s.length),
                      _fmt(s.max_logit_diff), _fmt(s.loss_packed), _fmt(s.loss_alone),
                      _fmt(s.loss_diff), f"[{style}]{s.verdict}[/{style}]")
    console.print(table)
    if len(result.segments) > limit:
        console.print(f"({len(result.segments) - limit} more segments not shown)")
    style = "green" if result.ok else "bold red"
    console.print(f"[{style}]{escape(result.reason)}[/{style}]")


def check_packing_command(
    model_dir: str | Path,
    input_path: str | Path,
    *,
    capacity: int,
    field: str | None = None,
    template: str | None = None,
    separator: str = "eos",
    layout: str = "flat",
    max_records: int = 32,
    atol: float | None = None,
    attn_implementation: str | None = None,
    use_cache: bool = False,
    console: Any = None,
) -> int:
    """Check that ``model_dir``'s model keeps ctxkit's packed segments of ``input_path`` apart.

    ``separator`` is ``eos``, ``none`` or a token id; ``layout`` is ``flat`` or ``padded``;
    records beyond ``max_records`` are not read; longer records are truncated to
    ``capacity``. ``attn_implementation`` overrides the model's configured one; ``use_cache``
    runs the batch with the KV cache on, as a training loop that does not turn it off would
    (off by default, as transformers' and TRL's trainers train). Returns 0 on pass, 1 on a
    leak, 2 on bad input.

    Example:
        >>> check_packing_command("/no/such/model", "data.jsonl", capacity=512)
        2
    """
    from rich.console import Console

    console = console or Console()
    err = Console(stderr=True)
    try:
        model_path = Path(model_dir)
        if not model_path.is_dir():
            raise InputError(f"model directory not found: {model_path}")
        check_input(input_path)
        if max_records < 1:
            raise InputError(f"--max-records must be at least 1, got {max_records}")
        tokenizer = HFTokenizer.load(model_path, name=str(model_path)) \
            if (model_path / "tokenizer_config.json").exists() or \
            (model_path / "tokenizer.json").exists() else None
        model = _load_model(model_path, attn_implementation, use_cache)
        seqs, masks = load_sequences(input_path, tokenizer, field=field, template=template,
                                     limit=max_records)
        if not seqs:
            raise InputError(f"{input_path} holds no records to pack")
        sep = _separator(separator, tokenizer, model)
        batch = pack(seqs, capacity=capacity, separator_id=sep, completion_mask=masks,
                     overflow="truncate", layout=layout)
        prompts = None if masks is None else [_leading_zeros(masks[i])
                                              for i in batch.segment_input.tolist()]
        result = check_packing(model, batch, atol=atol, separator_id=sep,
                               prompt_lengths=prompts)
    except (InputError, ValueError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return 2
    render_check(result, console)
    return 0 if result.ok else 1
