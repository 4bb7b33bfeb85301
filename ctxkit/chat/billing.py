"""Prompt-cache accounting: what a chat application is billed when providers cache prefixes.

OpenAI, Anthropic and Gemini bill the input tokens of a prompt prefix identical to an earlier
request's at a fraction of the price (and prefill them far faster); vLLM and SGLang skip their
prefill the same way. A chat window that is re-selected every turn changes from its first old
message on, so it pays full price for almost all of its tokens, every turn; a window that only
grows at its end between compactions pays full price for the new turns only.

:class:`CacheMeter` measures that turn by turn. Each window sent is compared with the previous
one message by message, as rendered (canonical JSON of the message dict, so any change in
role, content, name or tool calls breaks the match); the leading identical messages are the
cached prefix and their billed tokens (:func:`~ctxkit.chat.pipeline.count_chat_tokens`'s
accounting) are ``cached_tokens``. The reply priming after the last message is never counted
as cached. Providers cache in blocks (OpenAI from 1,024 tokens in steps of 128; Anthropic at
breakpoints of at least 1,024 tokens): ``min_cached_tokens`` and ``block_tokens`` model that;
their defaults (0 and 1) give the ideal cache every provider approaches.

Billed input at a cached-price ratio ``r`` is ``uncached + r * cached`` token-equivalents;
0.1 and 0.5 are the published discounts of two large providers (:data:`CACHED_PRICES`).

Example:
    >>> a = [{"role": "user", "content": "Plan a trip to Lisbon."},
    ...      {"role": "assistant", "content": "Three days: Alfama, Belem, Sintra."}]
    >>> b = a + [{"role": "user", "content": "And a fourth day?"}]
    >>> result = cache_accounting([a, b])
    >>> [(t.tokens, t.cached_tokens) for t in result.turns]
    [(29, 0), (38, 26)]
    >>> result.billed(0.1)  # 29 + (38 - 26) + 0.1 * 26
    43.6
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxkit import validate
from ctxkit.chat.features import billed_tokens
from ctxkit.errors import InputError
from ctxkit.io.messages import message_format, message_text, raw_role
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import bad_option

__all__ = ["CACHED_PRICES", "CacheAccountingResult", "CacheMeter", "CachedTurn",
           "cache_accounting"]

# cached input price over uncached: 0.1 and 0.5 are two large providers' published discounts
CACHED_PRICES = (0.1, 0.5)


@dataclass(frozen=True)
class CachedTurn:
    """One window sent: ``tokens`` billed in all, ``cached_tokens`` of them in the prefix of
    whole messages identical to the previous window's (``cached_messages`` messages)."""

    turn: int
    messages: int
    tokens: int
    cached_messages: int
    cached_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.tokens - self.cached_tokens

    def billed(self, cached_price: float) -> float:
        """Token-equivalents billed when cached tokens cost ``cached_price`` of the price (a
        share in [0, 1]; anything else is an :class:`~ctxkit.errors.OptionError`)."""
        price = validate.unit_interval(cached_price, "cached_price")
        return self.uncached_tokens + price * self.cached_tokens

    def to_dict(self) -> dict[str, int]:
        return {"turn": self.turn, "messages": self.messages, "tokens": self.tokens,
                "cached_messages": self.cached_messages, "cached_tokens": self.cached_tokens,
                "uncached_tokens": self.uncached_tokens}


@dataclass(frozen=True)
class CacheAccountingResult:
    """The turns of a replay and their totals."""

    turns: tuple[CachedTurn, ...]

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.turns)

    @property
    def cached_tokens(self) -> int:
        return sum(t.cached_tokens for t in self.turns)

    @property
    def uncached_tokens(self) -> int:
        return self.tokens - self.cached_tokens

    @property
    def hit_share(self) -> float:
        """Share of all input tokens that were served from the cache."""
        return self.cached_tokens / self.tokens if self.tokens else 0.0

    def billed(self, cached_price: float) -> float:
        """Token-equivalents billed over the replay at ``cached_price``, a share in [0, 1]
        (see the module; anything else is an :class:`~ctxkit.errors.OptionError`)."""
        price = validate.unit_interval(cached_price, "cached_price")
        return self.uncached_tokens + price * self.cached_tokens

    def to_dict(self, *, cached_prices: Sequence[float] = CACHED_PRICES,
                per_turn: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turns": len(self.turns), "tokens": self.tokens,
            "cached_tokens": self.cached_tokens, "uncached_tokens": self.uncached_tokens,
            "hit_share": round(self.hit_share, 4),
            "billed": {str(p): round(self.billed(p), 1) for p in cached_prices},
        }
        if per_turn:
            out["per_turn"] = [t.to_dict() for t in self.turns]
        return out


def _rendered(message: Mapping[str, Any]) -> str:
    """The message as a provider sees it: canonical JSON of every field."""
    return json.dumps(message, ensure_ascii=False, sort_keys=True, default=str)


class CacheMeter:
    """Feed the windows a chat application sends, one per turn; read the cache accounting.

    ``record(window)`` takes a list of messages (OpenAI or ShareGPT dicts) or anything with a
    ``messages`` attribute (a :class:`~ctxkit.chat.pipeline.CompressChatResult`) and returns
    that turn's :class:`CachedTurn`; :meth:`result` the whole replay. Token counts follow
    ``count_chat_tokens`` (``per_message`` framing per message, ``reply_priming`` once).

    Example:
        >>> meter = CacheMeter()
        >>> msgs = [{"role": "user", "content": "hi"}]
        >>> meter.record(msgs).cached_tokens, meter.record(msgs).cached_tokens
        (0, 5)
    """

    def __init__(self, *, tokenizer: str | Tokenizer = "cl100k_base", per_message: int = 3,
                 reply_priming: int = 3, min_cached_tokens: int = 0, block_tokens: int = 1):
        for name, value, low in (("per_message", per_message, 0),
                                 ("reply_priming", reply_priming, 0),
                                 ("min_cached_tokens", min_cached_tokens, 0),
                                 ("block_tokens", block_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad_option(name, f" must be an integer >= {low}, got {value!r}")
        self.tok = resolve_tokenizer(tokenizer)
        self.per_message, self.reply_priming = per_message, reply_priming
        self.min_cached_tokens, self.block_tokens = min_cached_tokens, block_tokens
        self._previous: list[str] = []
        self._tokens: dict[str, int] = {}
        self._turns: list[CachedTurn] = []

    def _message_tokens(self, key: str, message: Mapping[str, Any], index: int) -> int:
        n = self._tokens.get(key)
        if n is None:
            n = self._tokens[key] = billed_tokens(message, raw_role(message),
                                                  message_text(message, index),
                                                  self.per_message, self.tok.count)
        return n

    def record(self, window: Any) -> CachedTurn:
        """Account for one window sent; returns its :class:`CachedTurn`."""
        messages = getattr(window, "messages", window)
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InputError(f"window {len(self._turns)} must be a list of messages, got "
                             f"{type(messages).__name__}")
        try:
            message_format(messages)
        except (TypeError, ValueError) as exc:
            raise InputError(f"window {len(self._turns)}: {exc}") from None
        keys = [_rendered(m) for m in messages]
        costs = [self._message_tokens(k, m, i) for i, (k, m) in enumerate(zip(keys, messages))]
        shared = 0
        for old, new in zip(self._previous, keys):
            if old != new:
                break
            shared += 1
        cached = sum(costs[:shared])
        cached -= cached % self.block_tokens
        if cached < self.min_cached_tokens:
            cached = 0
        total = sum(costs) + (self.reply_priming if messages else 0)
        turn = CachedTurn(len(self._turns), len(keys), total, shared, cached)
        self._turns.append(turn)
        self._previous = keys
        return turn

    def result(self) -> CacheAccountingResult:
        """Every turn recorded so far, with totals."""
        return CacheAccountingResult(tuple(self._turns))


def cache_accounting(windows: Iterable[Any], *, tokenizer: str | Tokenizer = "cl100k_base",
                     per_message: int = 3, reply_priming: int = 3, min_cached_tokens: int = 0,
                     block_tokens: int = 1) -> CacheAccountingResult:
    """Cache accounting of a replay: the windows sent, in order (see :class:`CacheMeter`).

    Example:
        >>> w = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
        >>> r = cache_accounting([w, w + [{"role": "assistant", "content": "4"}]])
        >>> r.turns[1].cached_messages, round(r.hit_share, 2)
        (2, 0.37)
    """
    if isinstance(windows, (str, bytes, Mapping)) or not isinstance(windows, Iterable):
        raise InputError(f"windows must be a sequence of windows, got {type(windows).__name__}")
    meter = CacheMeter(tokenizer=tokenizer, per_message=per_message, reply_priming=reply_priming,
                       min_cached_tokens=min_cached_tokens, block_tokens=block_tokens)
    for window in windows:
        meter.record(window)
    return meter.result()
