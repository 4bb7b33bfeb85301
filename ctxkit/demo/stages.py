"""The demo's stages on generated data: dedup, chat compression, packing, a packed embedding pass.

Each stage is a plain function returning a small frozen dataclass; :func:`run_demo` runs all
four in order (the packing and embedding stages take the records dedup kept). Every result
has ``rows()``, the ``(metric, value)`` pairs of its one-screen report, which ``ctxkit demo``
prints; nothing here prints. Results are deterministic given the seed, except the
``seconds`` and speed fields.

Example:
    >>> from ctxkit.demo.data import demo_dataset
    >>> res = dedup_stage(demo_dataset(200, seed=0, near_copies=0.1))
    >>> res.planted, res.planted_found
    (20, 20)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.deduplication.options import MinHashOptions
from ctxkit.demo.data import DemoChat, DemoData, demo_chat, demo_dataset

__all__ = ["ChatStage", "DedupStage", "DemoRun", "EmbedStage", "PackStage", "StrategyRow",
           "chat_stage", "dedup_stage", "embed_stage", "file_records", "pack_stage", "record_text",
           "run_demo"]

Rows = list[tuple[str, object]]


def record_text(rec: dict[str, str]) -> str:
    """The text of an Alpaca-style record that dedup compares: instruction, input, output."""
    return "\n".join(part for part in (rec["instruction"], rec["input"], rec["output"]) if part)


def file_records(records: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The records as ``ctxkit demo --write-data`` writes them: each gains a ``text`` field
    (:func:`record_text`, what the demo dedups), so every command reads the file with its
    defaults and ``ctxkit dedup FILE`` finds what the demo found; ``--template alpaca``
    reads the same file as prompt and response.

    Example:
        >>> file_records([{"instruction": "Add 2 and 3", "input": "", "output": "5"}])[0]["text"]
        'Add 2 and 3\\n5'
    """
    return [{**r, "text": record_text(r)} for r in records]


# ----- 1. dedup -----


@dataclass(frozen=True)
class DedupStage:
    """Exact then MinHash dedup of the records, checked against the planted near copies."""

    records: int
    kept: list[int]  # indices of the kept records, ascending
    removed_exact: int
    removed_minhash: int
    threshold: float
    planted: int  # near copies the generator planted
    planted_found: int  # of those, removed by dedup
    tokens_before: int
    tokens_after: int
    example: tuple[str, str, str, float] | None  # (removed id, kept id, method, similarity)
    seconds: float

    def rows(self) -> Rows:
        rows: Rows = [
            ("records in", self.records),
            ("exact copies removed", self.removed_exact),
            (f"near duplicates removed (>= {self.threshold})", self.removed_minhash),
            ("records kept", len(self.kept)),
            ("planted copies found", f"{self.planted_found:,} of {self.planted:,}"),
            ("tokens in -> out", f"{self.tokens_before:,} -> {self.tokens_after:,}"),
        ]
        if self.example is not None:
            gone, kept, method, sim = self.example
            rows.append(("example removed", f"{gone} ~ {kept} ({method} {sim:.2f})"))
        rows.append(("seconds", self.seconds))
        return rows


def dedup_stage(data: DemoData, threshold: float = MinHashOptions.threshold,
                tokenizer: str = "cl100k_base") -> DedupStage:
    """Remove exact and near duplicates from ``data.records`` (text: :func:`record_text`).

    ``threshold`` is dedup's default, the one ``ctxkit dedup`` uses, so the demo shows what
    the command does on the file ``--write-data`` writes. The generated records are built
    from a small stock of template sentences, so some records that are not planted copies
    (short sentiment, arithmetic and summary tasks) join a cluster too, through a chain of
    similar ones: the caveat of real data with shared boilerplate (``docs/dedup.md``).

    Example:
        >>> from ctxkit.demo.data import demo_dataset
        >>> res = dedup_stage(demo_dataset(100, seed=1, near_copies=0.0))
        >>> res.planted, res.records == len(res.kept) + res.removed_exact + res.removed_minhash
        (0, True)
    """
    from ctxkit.deduplication.pipeline import dedup
    from ctxkit.io.tokenizers import get_tokenizer

    t0 = time.perf_counter()
    texts = [record_text(r) for r in data.records]
    res = dedup(texts, method=["exact", "minhash"], threshold=threshold)
    tokens = np.array([len(t) for t in get_tokenizer(tokenizer).encode_batch(texts)],
                      dtype=np.int64)
    methods = np.array(res.method, dtype=object)
    removed = res.removed
    example = None
    if removed.size:
        # show a planted near copy when there is one: exact copies are the less surprising
        # kind, and a member linked through others can be less similar to the kept one
        shown = removed[(methods[removed] == "minhash") & (data.copy_of[removed] >= 0)
                        & (res.similarity[removed] >= threshold)]
        i = int(shown[0] if shown.size else removed[0])
        j = int(res.duplicate_of[i])
        example = (data.records[i]["id"], data.records[j]["id"], str(methods[i]),
                   float(res.similarity[i]))
    planted = data.copy_of >= 0
    return DedupStage(
        records=len(texts), kept=res.keep.tolist(),
        removed_exact=int((methods == "exact").sum()),
        removed_minhash=int((methods == "minhash").sum()),
        threshold=threshold, planted=int(planted.sum()),
        planted_found=int((res.duplicate_of[planted] >= 0).sum()),
        tokens_before=int(tokens.sum()), tokens_after=int(tokens[res.keep].sum()),
        example=example, seconds=time.perf_counter() - t0,
    )


# ----- 2. compression of a chat history -----


@dataclass(frozen=True)
class ChatStage:
    """A long chat history compressed to a budget, with the ledger of what went."""

    messages: int
    messages_kept: int
    dropped: int
    shortened: int
    tokens_before: int
    tokens_after: int
    budget: int
    fact: str
    fact_kept: bool
    question: str
    reasons: dict[str, int]  # dropped messages per reason code (over_budget, filler, ...)
    ledger: list[tuple[int, str, str, str, int]]  # (index, role, action, reason, tokens)
    seconds: float

    def rows(self) -> Rows:
        return [
            ("messages in -> kept", f"{self.messages:,} -> {self.messages_kept:,}"),
            ("tokens in -> out", f"{self.tokens_before:,} -> {self.tokens_after:,}"),
            ("budget", self.budget),
            ("dropped / shortened", f"{self.dropped:,} / {self.shortened:,}"),
            ("dropped as", ", ".join(f"{code.replace('_', ' ')} {count}"
                                     for code, count in self.reasons.items())),
            ("last question", self.question),
            (f"fact it needs ({self.fact}) kept", "yes" if self.fact_kept else "NO"),
            ("seconds", self.seconds),
        ]


def chat_stage(chat: DemoChat, ratio: float = 0.25, tokenizer: str = "cl100k_base",
               scorer: str = "idf") -> ChatStage:
    """Compress ``chat`` to ``ratio`` of its tokens with :func:`ctxkit.compress_chat`.

    The system prompt and the last two messages stay verbatim; the budget is raised to
    what they need when ``ratio`` of a short history is less.

    Example:
        >>> from ctxkit.demo.data import demo_chat
        >>> res = chat_stage(demo_chat(12, seed=0), ratio=0.5)
        >>> res.tokens_after <= res.budget, res.fact_kept
        (True, True)
    """
    from ctxkit.chat.pipeline import compress_chat, count_chat_tokens

    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    t0 = time.perf_counter()
    before = count_chat_tokens(chat.messages, tokenizer=tokenizer)
    # never below what the verbatim part (system prompt, last two messages) needs
    verbatim = count_chat_tokens([chat.messages[0], *chat.messages[-2:]], tokenizer=tokenizer)
    budget = max(int(before * ratio), verbatim)
    out = compress_chat(chat.messages, budget=budget, keep_last=2, tokenizer=tokenizer,
                        scorer=scorer)
    actions = [c.action for c in out.ledger]
    codes = [c.code for c in out.ledger if c.action == "dropped"]
    reasons = {code: codes.count(code) for code in sorted(set(codes), key=codes.count,
                                                         reverse=True)}
    return ChatStage(
        messages=len(chat.messages), messages_kept=len(out.messages),
        dropped=actions.count("dropped"), shortened=actions.count("shortened"),
        tokens_before=out.original_tokens, tokens_after=out.compressed_tokens, budget=budget,
        fact=chat.fact, fact_kept=any(chat.fact in m["content"] for m in out.messages),
        question=chat.messages[-1]["content"], reasons=reasons,
        ledger=[(c.index, c.role, c.action, c.reason, c.tokens_before) for c in out.ledger],
        seconds=time.perf_counter() - t0,
    )


# ----- 3. packing -----


@dataclass(frozen=True)
class StrategyRow:
    """One way to fill windows: how many, how full, how long planning took."""

    method: str
    windows: int
    utilization: float
    padding_tokens: int
    seconds: float


@dataclass(frozen=True)
class PackStage:
    """The kept records tokenized (prompt masked), packed with bfd, and strategies compared."""

    n_records: int
    capacity: int
    tokenizer: str
    total_tokens: int
    target_tokens: int
    max_length: int
    mean_length: float
    batch: Any  # PackResult packed with bfd
    strategies: list[StrategyRow]
    tokenize_seconds: float

    def rows(self) -> Rows:
        return [
            ("records", self.n_records),
            ("tokens (prompt + response)", self.total_tokens),
            ("response tokens (trained on)", self.target_tokens),
            ("mean / max length", f"{self.mean_length:,.1f} / {self.max_length:,}"),
            ("tokenize seconds", self.tokenize_seconds),
        ]


_STRATEGY_ORDER = ["padding, 1 per row", "greedy", "bfd, blocks of 1,000 (TRL)", "bfd", "optimal"]


def pack_stage(records: Sequence[dict[str, str]], capacity: int = 2048, seed: int = 0,
               tokenizer: str = "cl100k_base", overflow: str = "truncate") -> PackStage:
    """Tokenize Alpaca records (prompt masked, EOS after each), pack with bfd, compare.

    Example:
        >>> from ctxkit.demo.data import demo_records
        >>> res = pack_stage(demo_records(50), capacity=1024)
        >>> res.batch.n_windows >= res.batch.lower_bound
        True
    """
    from ctxkit.io.records import format_alpaca_prompt
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.collate import pack_arrays
    from ctxkit.packing.plan import pack_lengths

    tok = get_tokenizer(tokenizer)
    t0 = time.perf_counter()
    prompts = tok.encode_batch([format_alpaca_prompt(r["instruction"], r["input"])
                                for r in records])
    outputs = tok.encode_batch([r["output"] for r in records])
    tokenize_seconds = time.perf_counter() - t0
    lengths = np.array([len(p) + len(o) for p, o in zip(prompts, outputs)], dtype=np.int64)
    tokens = np.fromiter((t for p, o in zip(prompts, outputs) for t in (*p, *o)),
                         dtype=np.int64, count=int(lengths.sum()))
    mask = np.zeros(0, bool)
    if len(records):
        mask = np.concatenate([np.r_[np.zeros(len(p), bool), np.ones(len(o), bool)]
                               for p, o in zip(prompts, outputs)])
    batch = pack_arrays(tokens, lengths, capacity=capacity, strategy="bfd", separator_id=tok.eos_id,
                        completion_mask=mask, overflow=overflow, seed=seed)
    with_sep = lengths + (1 if tok.eos_id is not None else 0)
    placed = np.minimum(with_sep, capacity) if overflow == "truncate" else with_sep
    total = int(placed.sum())

    def row(method: str, windows: int, seconds: float) -> StrategyRow:
        return StrategyRow(method, windows, total / (windows * capacity) if windows else 0.0,
                           windows * capacity - total, seconds)

    rows = [row("padding, 1 per row", int(placed.size), 0.0)]
    # TRL's pack_dataset runs BFD per datasets.map block of 1,000 examples; ctxkit plans globally
    t0 = time.perf_counter()
    n_block = sum(pack_lengths(with_sep[i:i + 1000], capacity=capacity, overflow=overflow).n_bins
                  for i in range(0, with_sep.size, 1000))
    rows.append(row("bfd, blocks of 1,000 (TRL)", n_block, time.perf_counter() - t0))
    for strategy in ("greedy", "bfd", "optimal"):
        t0 = time.perf_counter()
        plan = pack_lengths(with_sep, capacity=capacity, strategy=strategy, overflow=overflow,
                            seed=seed)
        rows.append(StrategyRow(strategy, plan.n_bins, plan.utilization, plan.padding_tokens,
                                time.perf_counter() - t0))
    rows.sort(key=lambda r: _STRATEGY_ORDER.index(r.method))
    return PackStage(
        n_records=len(records), capacity=capacity, tokenizer=tok.name,
        total_tokens=int(lengths.sum()), target_tokens=int(mask.sum()),
        max_length=int(lengths.max()) if lengths.size else 0,
        mean_length=float(lengths.mean()) if lengths.size else 0.0,
        batch=batch, strategies=rows, tokenize_seconds=tokenize_seconds,
    )


# ----- 4. packed embedding pass -----


@dataclass(frozen=True)
class EmbedStage:
    """A packed embedding pass, timed and checked against ``SentenceTransformer.encode``."""

    texts: int
    dim: int
    tokens: int
    rows_packed: int
    utilization: float  # real tokens / computed slots, packed
    encode_utilization: float  # the same for encode(batch_size=32)'s padded batches
    seconds: float
    encode_seconds: float  # SentenceTransformer.encode(batch_size=32) on the same texts
    min_cosine: float
    max_abs_diff: float
    device: str

    @property
    def speedup(self) -> float:
        return self.encode_seconds / self.seconds if self.seconds > 0 else 0.0

    def rows(self) -> Rows:
        return [
            ("prompts embedded", f"{self.texts:,} -> {self.texts:,} x {self.dim} vectors"),
            ("tokens / packed rows", f"{self.tokens:,} / {self.rows_packed:,}"),
            ("slots that are tokens", f"{self.utilization:.1%} (encode: "
                                      f"{self.encode_utilization:.1%})"),
            ("seconds", f"{self.seconds:.2f} (encode: {self.encode_seconds:.2f}, "
                        f"{self.speedup:.2f}x)"),
            ("min cosine to encode", f"{self.min_cosine:.7f}"),
            ("max abs diff to encode", f"{self.max_abs_diff:.1e}"),
            ("device", self.device),
        ]


def _encode_slots(lengths: np.ndarray, chars: np.ndarray, batch_size: int) -> int:
    """Slots ``SentenceTransformer.encode`` computes: batches in order of descending
    character count, each padded to its longest text in tokens."""
    order = np.argsort(-chars, kind="stable")
    return int(sum(lengths[order[s:s + batch_size]].max() * len(order[s:s + batch_size])
                   for s in range(0, len(order), batch_size)))


def embed_stage(texts: Sequence[str], device: str = "auto") -> EmbedStage:
    """Embed ``texts`` with :class:`ctxkit.PackedEncoder` (bundled all-MiniLM-L6-v2) and with
    the same model's ``SentenceTransformer.encode(batch_size=32)``; compare time and vectors.

    Example:
        >>> res = embed_stage(["a short text", "and a somewhat longer second one"], "cpu")
        >>> res.dim, res.min_cosine > 0.9999
        (384, True)
    """
    from ctxkit.embedding.encoder import PackedEncoder

    texts = list(texts)
    if not texts:
        raise ValueError("embed_stage needs at least one text")
    enc = PackedEncoder(device=device)
    reference_model = enc.backbone.model  # the SentenceTransformer the encoder reads
    warm = texts[:8]  # first calls pay one-off costs (allocations, kernel selection)
    enc.encode(warm)
    reference_model.encode(warm, batch_size=32)
    t0 = time.perf_counter()
    vecs = enc.encode(texts)
    seconds = time.perf_counter() - t0
    stats = enc.last_stats
    t0 = time.perf_counter()
    ref = np.asarray(reference_model.encode(texts, batch_size=32), dtype=np.float32)
    encode_seconds = time.perf_counter() - t0
    lengths = enc.tokenize(texts).lengths
    slots = _encode_slots(lengths, np.array([len(t) for t in texts]), 32)
    cos = (vecs * ref).sum(1) / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(ref, axis=1))
    return EmbedStage(
        texts=len(texts), dim=int(vecs.shape[1]), tokens=int(stats.tokens),
        rows_packed=int(stats.rows), utilization=float(stats.utilization),
        encode_utilization=float(lengths.sum() / slots), seconds=seconds,
        encode_seconds=encode_seconds, min_cosine=float(cos.min()),
        max_abs_diff=float(np.abs(vecs - ref).max()), device=str(enc.device),
    )


# ----- the whole demo -----


@dataclass(frozen=True)
class DemoRun:
    """Every stage of one demo run, in order."""

    data: DemoData
    dedup: DedupStage
    chat: ChatStage
    pack: PackStage
    embed: EmbedStage | None


def run_demo(n: int = 2000, capacity: int = 2048, seed: int = 0,
             tokenizer: str = "cl100k_base", *, near_copies: float = 0.05,
             chat_turns: int = 40, embed_texts: int = 128, device: str = "auto") -> DemoRun:
    """Generate the data, then dedup, compress a chat, pack the kept records, embed some.

    ``embed_texts`` prompts of kept records go through the embedding stage (0 skips it).

    Example:
        >>> run = run_demo(60, capacity=1024, chat_turns=6, embed_texts=0)
        >>> run.pack.n_records == len(run.dedup.kept), run.embed is None
        (True, True)
    """
    if n <= 0:
        raise ValueError(f"n must be a positive number of records, got {n}")
    if capacity <= 0:
        raise ValueError(f"capacity must be a positive number of tokens, got {capacity}")
    if embed_texts < 0:
        raise ValueError(f"embed_texts must be >= 0, got {embed_texts}")
    data = demo_dataset(n, seed, near_copies)
    dedup = dedup_stage(data, tokenizer=tokenizer)
    chat = chat_stage(demo_chat(chat_turns, seed), tokenizer=tokenizer)
    kept = [data.records[i] for i in dedup.kept]
    pack = pack_stage(kept, capacity, seed, tokenizer)
    embed = None
    if embed_texts:
        prompts = [(r["instruction"] + "\n" + r["input"]).strip() for r in kept[:embed_texts]]
        embed = embed_stage(prompts, device)
    return DemoRun(data, dedup, chat, pack, embed)
