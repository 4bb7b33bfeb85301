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

A provider keeps a cached prefix for a lifetime after its last use (OpenAI and Anthropic: 5
minutes by default, an hour on request): with ``ttl`` (seconds) and the time of each window
(``record(window, at=...)``), a window sent more than ``ttl`` after the previous one finds the
cache expired and pays full price for all of it (``CachedTurn.expired``).

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
           "cache_accounting", "cache_expired", "check_ttl"]

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
    expired: bool = False  # sent after the cache's lifetime: nothing cached

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
                "uncached_tokens": self.uncached_tokens, "expired": self.expired}


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
    def expired(self) -> int:
        """Windows that found the cache expired (see the module)."""
        return sum(t.expired for t in self.turns)

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
            "hit_share": round(self.hit_share, 4), "expired": self.expired,
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

    ``record(window, at=None)`` takes a list of messages (OpenAI or ShareGPT dicts) or anything
    with a ``messages`` attribute (a :class:`~ctxkit.chat.pipeline.CompressChatResult`) and the
    time it is sent (seconds), and returns that turn's :class:`CachedTurn`; :meth:`result` the
    whole replay. Token counts follow ``count_chat_tokens`` (``per_message`` framing per
    message, ``reply_priming`` once). ``ttl``: the cache's lifetime in seconds after its last
    use (None: it never expires).

    Example:
        >>> meter = CacheMeter(ttl=300)
        >>> msgs = [{"role": "user", "content": "hi"}]
        >>> meter.record(msgs, at=0).cached_tokens, meter.record(msgs, at=60).cached_tokens
        (0, 5)
        >>> meter.record(msgs, at=600).expired  # ten idle minutes: the cache is gone
        True
    """

    def __init__(self, *, tokenizer: str | Tokenizer = "cl100k_base", per_message: int = 3,
                 reply_priming: int = 3, min_cached_tokens: int = 0, block_tokens: int = 1,
                 ttl: float | None = None):
        for name, value, low in (("per_message", per_message, 0),
                                 ("reply_priming", reply_priming, 0),
                                 ("min_cached_tokens", min_cached_tokens, 0),
                                 ("block_tokens", block_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad_option(name, f" must be an integer >= {low}, got {value!r}")
        self.ttl = check_ttl(ttl)
        self._last_at: float | None = None
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

    def record(self, window: Any, *, at: float | None = None) -> CachedTurn:
        """Account for one window sent (at time ``at``, in seconds, when the cache's lifetime
        matters); returns its :class:`CachedTurn`."""
        messages = getattr(window, "messages", window)
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InputError(f"window {len(self._turns)} must be a list of messages, got "
                             f"{type(messages).__name__}")
        try:
            message_format(messages)
        except (TypeError, ValueError) as exc:
            raise InputError(f"window {len(self._turns)}: {exc}") from None
        if at is not None:
            at = validate.finite_number(at, "at")
        expired = cache_expired(self.ttl, self._last_at, at)
        if at is not None:
            self._last_at = at
        if expired:
            self._previous = []
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
        turn = CachedTurn(len(self._turns), len(keys), total, shared, cached, expired)
        self._turns.append(turn)
        self._previous = keys
        return turn

    def result(self) -> CacheAccountingResult:
        """Every turn recorded so far, with totals."""
        return CacheAccountingResult(tuple(self._turns))


def check_ttl(ttl: Any, name: str = "ttl") -> float | None:
    """A cache lifetime: None (never expires) or seconds > 0."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise bad_option(name, f" must be None or seconds > 0, got {ttl!r}")
    return float(ttl)


def cache_expired(ttl: float | None, last: float | None, now: float | None) -> bool:
    """Whether a prefix cached at ``last`` has expired by ``now`` (seconds) under ``ttl``;
    unknown times never expire it.

    Example:
        >>> cache_expired(300, 0.0, 299.0), cache_expired(300, 0.0, 301.0)
        (False, True)
    """
    if ttl is None or last is None or now is None:
        return False
    return now - last > ttl


def cache_accounting(windows: Iterable[Any], *, tokenizer: str | Tokenizer = "cl100k_base",
                     per_message: int = 3, reply_priming: int = 3, min_cached_tokens: int = 0,
                     block_tokens: int = 1, ttl: float | None = None,
                     times: Sequence[float] | None = None) -> CacheAccountingResult:
    """Cache accounting of a replay: the windows sent, in order (see :class:`CacheMeter`);
    ``times``: when each was sent (seconds), for a cache that expires after ``ttl``.

    Example:
        >>> w = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
        >>> r = cache_accounting([w, w + [{"role": "assistant", "content": "4"}]])
        >>> r.turns[1].cached_messages, round(r.hit_share, 2)
        (2, 0.37)
    """
    if isinstance(windows, (str, bytes, Mapping)) or not isinstance(windows, Iterable):
        raise InputError(f"windows must be a sequence of windows, got {type(windows).__name__}")
    meter = CacheMeter(tokenizer=tokenizer, per_message=per_message, reply_priming=reply_priming,
                       min_cached_tokens=min_cached_tokens, block_tokens=block_tokens, ttl=ttl)
    windows = list(windows)
    if times is not None and (isinstance(times, (str, bytes)) or len(times) != len(windows)):
        raise InputError(f"times must give one time per window ({len(windows)})")
    for k, window in enumerate(windows):
        meter.record(window, at=None if times is None else times[k])
    return meter.result()
