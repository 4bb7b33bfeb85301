"""Training-step benchmark: effective tokens per second of padded, grouped and packed batches.

    python -m evals.training [--quick] [--out DIR] [--device cpu|cuda] [--threads N]

A small Llama-shaped model (random weights, ``torch.manual_seed(0)``; see :data:`MODEL`) runs
forward, backward (loss over completion tokens) and an AdamW step on a fixed sample of each
shared dataset: gsm8k and codealpaca (Alpaca-formatted as :mod:`evals.packing` loads them; the
prompt is everything up to ``### Response:``) and the chat set (conversations as
:func:`evals.balance.chat_texts` joins them; the first turn is the prompt). Texts are tokenized
with cl100k_base, ids mapped into the model's vocabulary modulo its size, and cut to
:data:`MAX_LEN` tokens, TRL's ``SFTConfig`` default ``max_length``. Examples are drawn at
random until they fill about :data:`STEPS` steps (the chat set, 93 conversations, is repeated
as epochs). A step is the shape of an SFT step: :data:`WINDOWS` windows of :data:`MAX_LEN`
tokens, what a per-device batch of that many full rows holds. Four ways to batch the same
examples:

- ``padded``: what a Hugging Face Trainer user gets from ``DataCollatorWithPadding``: random
  order, a fixed number of examples per step (:func:`padded_rows`), padded to the step's
  longest (2-D attention mask);
- ``length-grouped``: the same rows per step, ``ctxkit.length_grouped_batches`` (sorted by
  length, batches in random order; ``group_by_length`` does the same within mega-batches),
  padded;
- ``flattening``: the padded method's steps collated by transformers'
  ``DataCollatorWithFlattening`` (TRL's padding-free path: ``[1, T]``, positions restart);
- ``ctxkit.pack``: ``ctxkit.pack(capacity=MAX_LEN, layout="flat", seed=0)``, :data:`WINDOWS`
  windows a step, flattened as TRL's packing with padding-free batches does.

Rows per padded step: as many examples as hold a packed step's real tokens on average
(``WINDOWS * MAX_LEN / mean length``), so every method trains on about the same tokens per
optimizer step, and tokens per second compare equal optimization work. A user who switches
to packing keeps their tokens per step (their effective batch size), not their example count;
the alternative rule, rows x longest within the step's tokens, makes a step with one long
example hold a few rows, so padded would take more, smaller optimizer steps than packing.

Per dataset and method: effective tokens per second (real tokens of the timed steps over their
wall time, after one untimed warm-up step per method; median over :data:`PASSES` passes, the
methods interleaved so load on a shared machine hits all of them alike; ``spread`` is
(max - min) / median of the passes, ``paired_speedup`` the median over passes of the ratio to
``padded`` in the same pass; ``--threads``, default :data:`THREADS`, torch's CPU threads: one,
because on a shared machine two OpenMP threads stall at every barrier while another process
holds a core, which swamps the differences measured), peak memory (CPU: the process's peak
resident set above its level before the pass, via ``/proc/self/clear_refs``; CUDA:
``torch.cuda.max_memory_allocated`` above the allocation before the pass), and the
speed-up over ``padded``. Correctness: every example's mean loss, from the logits of a forward
pass over each method's batches without an optimizer step, equals its loss computed alone
(float64 on CPU, tolerance :data:`TOLERANCE`); the max difference is reported per method.

Attention, each method's fastest correct one: the padded methods run transformers' ``sdpa``
(the 2-D padding mask becomes a 4-D mask). On CPU the padding-free methods run
:mod:`ctxkit.training.segment_attention` (``ctxkit_segments``: causal SDPA per segment, found
from the restarting ``position_ids``), so their attention costs ``sum(len_i**2)`` rather than a
block-causal mask over the whole step (``window**2``) as transformers' ``sdpa`` would run them;
this is what a TRL padding-free user gets on a GPU from flash-attn's varlen kernel, so the
flattening collator gets it too. ``--device cuda`` trains in bfloat16 with varlen attention
for the padding-free methods: flash-attn's ``flash_attention_2`` when it imports, else torch's
``varlen_attn`` through :func:`ctxkit.training.varlen.register_varlen_attention`; its loss
check runs in bfloat16 with the same attention (tolerance :data:`CUDA_TOLERANCE`). ``--quick``
is a seconds-long smoke run on a tiny model and a few examples (generated ones when
``../shared/data`` is absent).

Writes ``training.json``, ``training.md`` and ``training.png`` to ``--out`` (evals/results).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxkit.packing.batching import length_grouped_batches
from ctxkit.packing.collate import IGNORE_INDEX, pack
from ctxkit.training.segment_attention import register_segment_attention
from evals import _common as common

METHODS = ("padded", "length-grouped", "flattening", "ctxkit.pack")
DATASETS = ("gsm8k", "codealpaca", "chat")
# Llama shape ratios: intermediate 2.69x hidden (Llama-2), heads of 64 dims, grouped KV heads,
# vocab / hidden = 64 (Llama-3.2-1B: 128256 / 2048). Sized so that the full run takes minutes
# on two shared CPU cores.
MODEL = {"hidden": 128, "intermediate": 344, "layers": 4, "heads": 2, "kv_heads": 1,
         "vocab": 8192}
QUICK_MODEL = {"hidden": 64, "intermediate": 172, "layers": 2, "heads": 1, "kv_heads": 1,
               "vocab": 1024}
# The step of an SFT run: TRL's SFTConfig cuts examples to max_length 1024 by default, and a
# per-device batch of WINDOWS rows of that length is what packing fills per step. STEPS and
# PASSES keep the full run near 20 minutes on two shared cores (padded chat steps are ~33
# rows of 1,024 tokens).
MAX_LEN, WINDOWS, STEPS, PASSES = 1024, 4, 4, 3
QUICK = {"max_len": 128, "windows": 2, "steps": 4, "passes": 1}
TOLERANCE, CUDA_TOLERANCE = 1e-5, 5e-2
THREADS = 1
RESPONSE = "### Response:\n"


@dataclass
class Step:
    """One optimizer step's model inputs, which example owns each token (-1: padding) and the
    real (non-padding) token count."""

    inputs: dict
    owner: np.ndarray
    real: int


# --------------------------------------------------------------------------- data


def _split_alpaca(text: str) -> tuple[str, str]:
    at = text.find(RESPONSE)
    return (text, "") if at < 0 else (text[:at + len(RESPONSE)], text[at + len(RESPONSE):])


def _split_chat(text: str) -> tuple[str, str]:
    head, sep, rest = text.partition("\n")
    return head + sep, rest


def _pick(lengths: list[int], tokens: int, rng) -> list[int]:
    """Indices in random order until their lengths reach ``tokens``; a set that runs out is
    taken again in a fresh order (another epoch)."""
    out, total = [], 0
    while total < tokens:
        for i in rng.permutation(len(lengths)):
            if total >= tokens:
                break
            out.append(int(i))
            total += lengths[i]
    return out


def load_examples(quick: bool, vocab: int, max_len: int, tokens: int) -> dict[str, list]:
    """Per dataset, examples as ``(token ids, completion mask)`` lists, ids modulo ``vocab``
    and cut to ``max_len``, drawn at random until they hold ``tokens`` tokens (a set with
    fewer tokens is repeated, as epochs); generated lengths when the shared data is absent."""
    root = common.data_dir()
    rng = np.random.default_rng(0)
    if root is None:
        out = []
        for length in np.clip(rng.lognormal(4.5, 0.6, 4 * tokens // 90 + 1), 4,
                              max_len).astype(int):
            prompt = max(1, int(length * 0.4))
            out.append((rng.integers(3, vocab, length).tolist(),
                        [0] * prompt + [1] * (length - prompt)))
        return {"synthetic": [out[i] for i in _pick([len(e[0]) for e in out], tokens, rng)]}
    from ctxkit.io.tokenizers import get_tokenizer
    from evals.balance import chat_texts

    tok = get_tokenizer("cl100k_base")
    sources = {"gsm8k": lambda: [_split_alpaca(t) for t in common.alpaca_texts(
                   root / common.ALPACA_SOURCES["gsm8k"])],
               "codealpaca": lambda: [_split_alpaca(t) for t in common.alpaca_texts(
                   root / common.ALPACA_SOURCES["codealpaca"])],
               "chat": lambda: [_split_chat(t) for t in chat_texts(root)]}
    data = {}
    for name in (("gsm8k",) if quick else DATASETS):
        pairs = [p for p in sources[name]() if p[1].strip()]
        prompts = tok.encode_batch([p[0] for p in pairs])
        answers = tok.encode_batch([p[1] for p in pairs])
        rows = []
        for p, a in zip(prompts, answers):
            ids = [t % vocab for t in p + a][:max_len]
            mask = ([0] * len(p) + [1] * len(a))[:max_len]
            if sum(mask[1:]):  # at least one target token left after the cut
                rows.append((ids, mask))
        data[name] = [rows[i] for i in _pick([len(r[0]) for r in rows], tokens, rng)]
    return data


def example_labels(ids: list[int], mask: list[int]) -> list[int]:
    """Labels aligned with ``ids``: -100 on prompt tokens and on the first token."""
    labels = [t if k else IGNORE_INDEX for t, k in zip(ids, mask)]
    labels[0] = IGNORE_INDEX
    return labels


# --------------------------------------------------------------------------- batching


def padded_rows(lengths: list[int], step_tokens: int) -> int:
    """Rows per padded step: as many examples as hold ``step_tokens`` real tokens on average,
    so that padded and packed steps train on about the same tokens per optimizer step.

    Example:
        >>> padded_rows([100, 300, 200], 4096)
        20
    """
    return max(1, round(step_tokens / float(np.mean(lengths))))


def _chunks(order, rows: int) -> list[list[int]]:
    return [[int(i) for i in order[k:k + rows]] for k in range(0, len(order), rows)]


def _padded_step(examples, batch: list[int], torch) -> Step:
    width = max(len(examples[i][0]) for i in batch)
    shape = (len(batch), width)
    ids, labels = np.zeros(shape, np.int64), np.full(shape, IGNORE_INDEX, np.int64)
    attn, owner = np.zeros(shape, np.int64), np.full(shape, -1, np.int64)
    for r, i in enumerate(batch):
        seq, mask = examples[i]
        ids[r, :len(seq)], labels[r, :len(seq)] = seq, example_labels(seq, mask)
        attn[r, :len(seq)], owner[r, :len(seq)] = 1, i
    inputs = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels),
              "attention_mask": torch.from_numpy(attn)}
    return Step(inputs, owner, int(attn.sum()))


def _flattening_steps(examples, batches, varlen: bool, torch) -> list[Step]:
    from transformers import DataCollatorWithFlattening

    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=varlen)
    steps = []
    for batch in batches:
        feats = [{"input_ids": examples[i][0], "labels": example_labels(*examples[i])}
                 for i in batch]
        owner = np.concatenate([np.full(len(examples[i][0]), i) for i in batch])[None]
        steps.append(Step(dict(collate(feats)), owner, owner.size))
    return steps


def _pack_steps(examples, max_len: int, windows: int, varlen: bool, torch) -> list[Step]:
    res = pack([e[0] for e in examples], completion_mask=[e[1] for e in examples],
               capacity=max_len, layout="flat", seed=0)
    full = res.to_torch()
    cu, rows = res.cu_seqlens.astype(np.int64), res.row_offsets
    owner = np.repeat(res.segment_input, np.diff(cu))
    steps = []
    for r in range(0, res.n_windows, windows):
        first, last = rows[r], rows[min(r + windows, res.n_windows)]
        a, b = int(cu[first]), int(cu[last])
        inputs = {k: full[k][:, a:b] for k in ("input_ids", "labels", "position_ids")}
        if varlen:
            step_cu = torch.from_numpy((cu[first:last + 1] - a).astype(np.int32))
            longest = int(np.diff(step_cu.numpy()).max())
            inputs.update(cu_seq_lens_q=step_cu, cu_seq_lens_k=step_cu,
                          max_length_q=longest, max_length_k=longest)
        steps.append(Step(inputs, owner[None, a:b], b - a))
    return steps


def build_steps(method: str, examples: list, max_len: int, windows: int, *,
                varlen: bool = False) -> list[Step]:
    """The optimizer steps of one pass over ``examples`` batched by ``method``, for steps of
    ``windows`` windows of ``max_len`` tokens (see the module docstring)."""
    import torch

    lengths = [len(e[0]) for e in examples]
    rows = padded_rows(lengths, windows * max_len)
    random_rows = _chunks(np.random.default_rng(0).permutation(len(examples)), rows)
    if method == "padded":
        return [_padded_step(examples, b, torch) for b in random_rows]
    if method == "length-grouped":
        grouped = length_grouped_batches(lengths, batch_tokens=rows * max_len, max_rows=rows,
                                         seed=0)
        return [_padded_step(examples, b.tolist(), torch) for b in grouped.batches]
    if method == "flattening":
        return _flattening_steps(examples, random_rows, varlen, torch)
    return _pack_steps(examples, max_len, windows, varlen, torch)


# --------------------------------------------------------------------------- model and runs


def make_model(shape: dict, max_len: int, attn: str, dtype, device):
    """A Llama with random weights (``torch.manual_seed(0)``) of the given shape."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"], num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"], head_dim=64,
        max_position_embeddings=max(max_len, 128), attn_implementation=attn)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)


def _to(inputs: dict, device) -> dict:
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}


def example_losses(model, steps: list[Step], n: int, device) -> np.ndarray:
    """Each example's mean loss over its target tokens, from forward passes over ``steps``."""
    import torch

    sums, counts = np.zeros(n), np.zeros(n)
    head = model.get_output_embeddings()
    with torch.no_grad():
        for step in steps:
            inputs = _to(step.inputs, device)
            labels = inputs.pop("labels")
            hidden = model.model(**inputs, use_cache=False).last_hidden_state
            ce = torch.cat([torch.nn.functional.cross_entropy(  # one row's logits at a time
                head(h[:-1]).double(), y[1:], reduction="none", ignore_index=IGNORE_INDEX)
                for h, y in zip(hidden, labels)]).cpu().numpy()
            owner = step.owner[:, 1:].reshape(-1)
            keep = (labels[:, 1:].flatten() != IGNORE_INDEX).cpu().numpy() & (owner >= 0)
            np.add.at(sums, owner[keep], ce[keep])
            np.add.at(counts, owner[keep], 1)
    return sums / np.maximum(counts, 1)


class PeakMemory:
    """Peak memory of a block above its starting level, in bytes (see the module docstring)."""

    def __init__(self, device: str):
        self.device, self.peak = device, None

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as fh:
            line = next(x for x in fh if x.startswith(key + ":"))
        return int(line.split()[1]) * 1024

    def __enter__(self):
        import torch

        gc.collect()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed pages back before the base
        except (OSError, AttributeError):
            pass
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # resets VmHWM, the peak resident set
            self.base, self.key = self._status("VmRSS"), "VmHWM"
        except OSError:
            self.base, self.key = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None
        return self

    def __exit__(self, *exc):
        import torch

        if self.device == "cuda":
            self.peak = torch.cuda.max_memory_allocated() - self.base
        elif self.key:
            self.peak = self._status(self.key) - self.base
        else:
            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base
        return False


def train_pass(model, state: dict, steps: list[Step], device: str) -> dict:
    """Reset ``model`` to ``state`` and train one pass over ``steps`` with a fresh AdamW."""
    import torch

    model.load_state_dict(state)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seconds, tokens, losses = 0.0, 0, []
    with PeakMemory(device) as mem:
        for step in steps:
            inputs = _to(step.inputs, device)
            start = time.perf_counter()
            loss = model(**inputs, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - start
            tokens += step.real
            losses.append(float(loss.detach()))
    del opt
    return {"seconds": seconds, "tokens": tokens, "peak_bytes": mem.peak,
            "final_loss": losses[-1]}


def run_dataset(name: str, examples: list, cfg: dict, device: str) -> list[dict]:
    import torch

    cuda = device == "cuda"
    fast = _varlen_attention() if cuda else register_segment_attention()
    steps = {m: build_steps(m, examples, cfg["max_len"], cfg["windows"],
                            varlen=cuda and m in METHODS[2:]) for m in METHODS}
    attn = {m: fast if m in METHODS[2:] else "sdpa" for m in METHODS}
    # correctness: every method's per-example losses against each example alone under sdpa
    check_dtype = torch.bfloat16 if cuda else torch.float64
    alone = [_padded_step(examples, [i], torch) for i in range(len(examples))]
    checked, ref = {}, None
    for impl in dict.fromkeys(attn.values()):  # "sdpa" first
        model = make_model(cfg["model"], cfg["max_len"], impl, check_dtype, device)
        if ref is None:
            ref = example_losses(model, alone, len(examples), device)
        for m in METHODS:
            if attn[m] == impl:
                got = example_losses(model, steps[m], len(examples), device)
                checked[m] = float(np.abs(got - ref).max())
        del model
    print(f"{name}: loss check {checked}", file=sys.stderr, flush=True)
    # speed: one untimed warm-up step per method (its smallest), then passes with the
    # methods interleaved
    dtype = torch.bfloat16 if cuda else torch.float32
    models = {impl: make_model(cfg["model"], cfg["max_len"], impl, dtype, device)
              for impl in dict.fromkeys(attn.values())}
    state = copy.deepcopy(next(iter(models.values())).state_dict())
    for m in METHODS:
        train_pass(models[attn[m]], state, [min(steps[m], key=lambda s: s.owner.size)], device)
    passes = {m: [] for m in METHODS}
    for k in range(cfg["passes"]):
        for m in METHODS:
            passes[m].append(train_pass(models[attn[m]], state, steps[m], device))
            print(f"{name} pass {k + 1}: {m} {passes[m][-1]['seconds']:.1f} s",
                  file=sys.stderr, flush=True)
    rows_per_step = padded_rows([len(e[0]) for e in examples], cfg["windows"] * cfg["max_len"])
    rows = []
    for m in METHODS:
        rates = [p["tokens"] / p["seconds"] for p in passes[m] if p["seconds"] > 0]
        padded_tokens = sum(int(s.owner.size) for s in steps[m])
        median = statistics.median(rates) if rates else None
        rows.append({
            "dataset": name, "method": m, "attention": attn[m], "examples": len(examples),
            "steps": len(steps[m]), "real_tokens": sum(s.real for s in steps[m]),
            "rows_per_step": cfg["windows"] if m == "ctxkit.pack" else rows_per_step,
            "batch_tokens": padded_tokens,
            "tokens_per_second": median, "passes_tokens_per_second": rates,
            "spread": (max(rates) - min(rates)) / median if median else None,
            "peak_mib": max(p["peak_bytes"] for p in passes[m]) / 2**20,
            "final_loss": passes[m][-1]["final_loss"],
            "max_loss_diff": checked[m],
        })
    base = rows[0]["tokens_per_second"]
    for r in rows:
        r["speedup"] = r["tokens_per_second"] / base if base and r["tokens_per_second"] else None
        paired = [a / b for a, b in zip(r["passes_tokens_per_second"],
                                        rows[0]["passes_tokens_per_second"])]
        r["paired_speedup"] = statistics.median(paired) if paired else None
    return rows


def _set_threads(n: int) -> int:
    """Set torch's CPU threads to ``n``; returns the previous count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    return previous


def _varlen_attention() -> str:
    try:
        import flash_attn  # noqa: F401
        return "flash_attention_2"
    except ImportError:
        from ctxkit.training.varlen import register_varlen_attention

        return register_varlen_attention()


# --------------------------------------------------------------------------- report


def _fill_bound(rows: list[dict]) -> str:
    """Per dataset, the speed-up that fill alone allows: padded batch tokens / real tokens."""
    return ", ".join(f"{r['dataset']}: {r['batch_tokens'] / r['real_tokens']:.2f}x"
                     for r in rows if r["method"] == "padded")


# Llama-3.2-1B's shape, to put the benchmark model's attention share beside a real model's
LLAMA_1B = {"hidden": 2048, "intermediate": 8192, "layers": 16, "heads": 32, "kv_heads": 8,
            "vocab": 128256}


def attention_share(shape: dict, context: int) -> float:
    """Attention FLOPs per token (scores and values over ``context`` keys, 64-dim heads) over
    the FLOPs of the token's weight matmuls (layers and lm_head), for a Llama of ``shape``.

    Example:
        >>> round(attention_share(LLAMA_1B, 1024), 3)
        0.054
    """
    h, q, kv = shape["hidden"], shape["heads"] * 64, shape["kv_heads"] * 64
    layer = h * q * 2 + h * kv * 2 + 3 * h * shape["intermediate"]
    linear = 2 * (shape["layers"] * layer + h * shape["vocab"])
    return 4 * context * q * shape["layers"] / linear


def markdown(res: dict) -> str:
    table = [[r["dataset"], r["method"], r["attention"], r["examples"], r["rows_per_step"],
              r["steps"], f"{r['real_tokens']:,}",
              f"{r['real_tokens'] / r['batch_tokens']:.0%}",
              f"{r['tokens_per_second']:,.0f}" if r["tokens_per_second"] else "n/a",
              f"{r['spread']:.0%}" if r.get("spread") is not None else "n/a",
              f"{r['speedup']:.2f}x" if r["speedup"] else "n/a",
              f"{r['paired_speedup']:.2f}x" if r.get("paired_speedup") else "n/a",
              f"{r['peak_mib']:.0f}",
              f"{r['max_loss_diff']:.1e}"] for r in res["rows"]]
    m, c = res["model"], res["config"]
    step = c["windows"] * c["max_len"]
    bar = ", ".join(f"{k}: {v:.2f}x" for k, v in res["pack_speedup"].items())
    return (
        "# Training-step benchmark\n\n"
        f"A Llama with random weights (hidden {m['hidden']}, intermediate {m['intermediate']}, "
        f"{m['layers']} layers, {m['heads']} heads of 64 dims, {m['kv_heads']} KV head(s), "
        f"vocab {m['vocab']:,}, cl100k_base ids modulo the vocab) on {res['device']} "
        f"(torch threads: {res.get('threads', '?')}): forward, backward and AdamW. The step "
        f"of an SFT run: examples cut to {c['max_len']:,} tokens (TRL's default max_length); "
        f"ctxkit.pack fills {c['windows']} windows of {c['max_len']:,} tokens per step "
        f"({step:,} tokens, a per-device batch of {c['windows']} rows); padded, length-grouped "
        "and flattening take a fixed number of examples per step (`rows/step`, as "
        "`per_device_train_batch_size`) chosen so that their steps hold as many real tokens "
        f"on average. Examples are drawn at random until about {c['steps']} such steps per "
        "dataset (a set with fewer tokens is repeated, as epochs); median of "
        f"{c['passes']} passes (methods interleaved) after one untimed warm-up step per "
        "method. `fill`: real tokens / batch tokens. "
        "`spread`: (max - min) / median of the passes' tokens/s. `vs padded`: median tokens/s "
        "over padded's; `paired`: median over passes of the ratio to padded in the same pass "
        "(the methods of a pass share the machine's load). `loss diff`: max over examples "
        "of |mean loss in the method's batches - mean loss alone| "
        f"({res['check_dtype']}, tolerance {res['tolerance']:g}).\n\n"
        + common.md_table(["dataset", "method", "attention", "examples", "rows/step", "steps",
                           "real tokens", "fill", "tokens/s", "spread", "vs padded", "paired",
                           "peak MiB", "loss diff"], table)
        + f"\nctxkit.pack over padded: {bar}; losses within tolerance: "
        + f"{'yes' if res['losses_equal'] else 'no'}.\n"
        + ("\nThe padding-free methods attend within each segment (`ctxkit_segments`, "
           "`ctxkit.training.segment_attention`: causal SDPA per segment), as flash-attn's "
           "varlen kernel does on a GPU; transformers' `sdpa` would run them with a "
           "block-causal mask over the whole step. The padded methods run `sdpa` with a "
           "padding mask, so every row attends over the batch's longest. Projections, MLP, "
           "lm_head and loss cost the same per batch token, padding included, so padded batch "
           f"tokens / real tokens ({_fill_bound(res['rows'])}) bounds the speed-up from "
           "them; the rest comes from attention and the extra optimizer steps. This model "
           "is small, so attention weighs more than in a real one: over a "
           f"{c['max_len']:,}-token context its attention FLOPs are "
           f"{attention_share(m, c['max_len']):.2f}x its weight-matmul FLOPs per token, "
           f"against {attention_share(LLAMA_1B, c['max_len']):.2f}x for Llama-3.2-1B's shape. "
           "Timings on a shared machine are noisy; `passes_tokens_per_second` in the JSON "
           "has every pass.\n"
           if res["device"] == "cpu" else "")
        + f"\nCommand: `{res['command']}`.\n"
    )


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    x, width = np.arange(len(names)), 0.8 / len(METHODS)
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 5 * len(names)), 4.5), layout="tight")
    panels = (("tokens_per_second", "effective tokens / second (real tokens)"),
              ("speedup", "effective tokens / second over padded"))
    for ax, (key, label) in zip(axes, panels):
        for k, m in enumerate(METHODS):
            vals = [next(r[key] or 0 for r in rows if r["dataset"] == n and r["method"] == m)
                    for n in names]
            ax.bar(x + k * width, vals, width, label=m)
        ax.set_xticks(x + 0.4 - width / 2, names)
        ax.set(ylabel=label)
    axes[1].axhline(1.5, color="k", linestyle="--", linewidth=1, label="1.5x")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Training step (forward, backward, AdamW) on {res['device']}")
    common.save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m evals.training",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds: tiny model, few examples")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", default="evals/results", help="output directory")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    previous = _set_threads(args.threads)
    try:
        return _run(args)
    finally:
        _set_threads(previous)


def _run(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    cfg = dict(QUICK) if args.quick else {"max_len": MAX_LEN, "windows": WINDOWS,
                                          "steps": STEPS, "passes": PASSES}
    cfg["model"] = QUICK_MODEL if args.quick else MODEL
    data = load_examples(args.quick, cfg["model"]["vocab"], cfg["max_len"],
                         cfg["steps"] * cfg["windows"] * cfg["max_len"])
    rows = [r for name, ex in data.items() for r in run_dataset(name, ex, cfg, args.device)]
    cuda = args.device == "cuda"
    tolerance = CUDA_TOLERANCE if cuda else TOLERANCE
    res = {
        "command": "python -m evals.training" + (" --quick" if args.quick else "")
        + (" --device cuda" if cuda else "")
        + (f" --threads {args.threads}" if args.threads != THREADS else ""),
        "quick": args.quick, "device": args.device, "model": cfg["model"],
        "threads": args.threads,
        "config": {k: v for k, v in cfg.items() if k != "model"},
        "check_dtype": "bfloat16" if cuda else "float64", "tolerance": tolerance,
        "rows": rows,
        "pack_speedup": {r["dataset"]: r["speedup"] for r in rows
                         if r["method"] == "ctxkit.pack"},
        "losses_equal": all(r["max_loss_diff"] <= tolerance for r in rows),
    }
    res["seconds"] = time.perf_counter() - start
    md = markdown(res)
    out = common.write_results(args.out, "training", res, md)
    plot(res, out / "training.png")
    print(md)
    print(f"wrote {out / 'training.json'}, training.md, training.png in {res['seconds']:.0f} s",
          file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
