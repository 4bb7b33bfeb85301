"""The ``lm`` scorer: token surprisal under a small causal language model, summed per atom.

Example:
    >>> LMScorer.name
    'lm'
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ctxkit.compression.atoms import atoms
from ctxkit.compression.scoring.base import _Lexical
from ctxkit.compression.scoring.cache import DEFAULT_CACHE_SIZE, TextCache
from ctxkit.compression.scoring.smollm2 import smollm2_dir
from ctxkit.options import bad_option

__all__ = ["LMScorer"]


@functools.lru_cache(maxsize=2)
def _load_causal_lm(model_dir: str, device: str):
    """(model, tokenizer), loaded once per process: every ``LMScorer`` shares them (read-only
    in inference)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, local_files_only=True
    ).to(device).eval()
    return model, tok


class LMScorer(_Lexical):
    """Token surprisal ``-log2 p(token | prefix)`` under a small causal LM, summed per atom.

    Selective Context (Li et al. 2023) and LLMLingua (Jiang et al. 2023) prune by this
    self-information. The default model is SmolLM2-135M-Instruct from the optional extra
    ``ctxkit[lm]``; ``model`` may name any local transformers causal-LM directory. Texts longer
    than ``window`` tokens are scored in windows that keep ``context`` tokens of left context.
    Relevance and similarity are lexical (TF-IDF). Surprisal is cached by text
    (``cache_size`` texts).

    Example:
        >>> s = LMScorer()  # doctest: +SKIP
        >>> bits = s.information(["The capital of France is Paris."])[0]  # doctest: +SKIP
    """

    name = "lm"

    def __init__(self, model: str | Path | None = None, device: str = "cpu",
                 window: int = 512, context: int = 128, batch_size: int = 8,
                 cache_size: int = DEFAULT_CACHE_SIZE):
        if context >= window:
            raise bad_option("context", f" must be smaller than window ({window}), got {context}")
        self.model_dir = Path(model) if model is not None else smollm2_dir()
        self.device, self.window, self.context, self.batch_size = (device, window, context,
                                                                   batch_size)
        self._model = self._tok = None
        self.cache = TextCache(cache_size)  # a history is scored at several budgets

    def clear_cache(self) -> None:
        """Forget every text's surprisal."""
        self.cache.clear()

    def _load(self):
        if self._model is None:
            self._model, self._tok = _load_causal_lm(str(self.model_dir), self.device)
        return self._model, self._tok

    def token_surprisal(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: token character offsets ``[n, 2]`` and surprisal in bits ``[n]``."""
        import torch

        if not texts:
            return []

        model, tok = self._load()
        enc = tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        jobs = []  # (text, first scored token, context tokens before it, window ids)
        step = self.window - self.context
        for t, ids in enumerate(enc["input_ids"]):
            for start in range(0, len(ids), step):
                left = max(0, start - self.context)
                jobs.append((t, start, start - left, [bos] + ids[left:start + step]))
        bits = [np.zeros(len(ids)) for ids in enc["input_ids"]]
        jobs.sort(key=lambda j: len(j[3]))  # similar lengths per batch: less padding
        for b in range(0, len(jobs), self.batch_size):
            batch = jobs[b:b + self.batch_size]
            width = max(len(j[3]) for j in batch)
            ids = torch.full((len(batch), width), bos, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, job in enumerate(batch):
                ids[r, :len(job[3])] = torch.tensor(job[3])
                mask[r, :len(job[3])] = 1
            with torch.no_grad():
                logits = model(input_ids=ids.to(self.device),
                               attention_mask=mask.to(self.device)).logits.float()
            # log p(gold) = logit(gold) - logsumexp(logits): no [batch, len, vocab] log-softmax
            # tensor is written (the vocabulary is 49k wide)
            logits = logits[:, :-1]
            gold = (logits.gather(2, ids[:, 1:, None].to(self.device))[..., 0]
                    - torch.logsumexp(logits, dim=-1)).cpu().numpy()
            for r, (t, start, skip, row) in enumerate(batch):
                # gold[k] is log p(row[k + 1] | row[:k + 1]); row[0] is BOS
                scored = -gold[r, skip:len(row) - 1] / math.log(2)
                bits[t][start:start + len(scored)] = scored
        return [(np.array(o, dtype=np.int64).reshape(-1, 2), bt)
                for o, bt in zip(enc["offset_mapping"], bits)]

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self.cache.values(list(texts), self._information)

    def _information(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = []
        spans_of = [atoms(t) for t in texts]
        it = iter(self.token_surprisal([t for t, sp in zip(texts, spans_of) if sp]))
        for spans in spans_of:
            if not spans:
                out.append(np.zeros(0))
                continue
            offsets, bits = next(it)
            starts = np.array([s for s, _, _ in spans])
            # a token belongs to the atom holding its last character (BPE tokens carry the
            # space before a word, which belongs to no atom)
            owner = np.searchsorted(starts, np.maximum(offsets[:, 1] - 1, 0), side="right") - 1
            per_atom = np.zeros(len(spans))
            np.add.at(per_atom, np.clip(owner, 0, len(spans) - 1), bits)
            out.append(per_atom)
        return out
