"""What a chat application is billed, turn by turn, for each way of building its window.

Each dev LoCoMo conversation is replayed one message at a time at a budget of 1/4 and 1/8 of
its tokens; after every message each method builds the window it would send, and a
:class:`ctxkit.CacheMeter` counts the tokens served from a provider's prompt cache (the leading
messages identical to the previous window's). Figures per method: billed input over the replay
at cached prices of 0.1 and 0.5 (token-equivalents), the share of tokens served from the cache,
evidence retention for the conversation's questions asked at the end (every evidence turn in
the window, as ``evals.public_compression`` counts it), CPU ms per turn and the KV cache the
mean window holds (``ctxkit.kv_cache_bytes``, Llama-3.1-8B in bfloat16), and answer-in-window:
the share of those questions whose answer string (SQuAD-normalised, as
``evals.public_compression`` counts NQ answers) appears in the window's text, the summary
message included and the question itself not.

Methods: ``ChatMemory`` (re-selects the window for every question), ``ChatMemory`` with
``prefix_cache=True``, LangChain's ``trim_messages(strategy="last")`` (when ``langchain-core``
is installed), and the whole history every turn (over the budget: what not compressing costs).
Both ``ChatMemory`` modes also run with summaries of the evicted turns (``summarize=``, the
extractive summarizer sized to the summary's share of the budget; SmolLM2 on request).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KV_MODEL = "llama-3.1-8b"
FRACTIONS = (0.25, 0.125)
PRICES = (0.1, 0.5)


@dataclass
class Method:
    """A way to build windows: ``turn(history)`` returns the window sent after the history's
    last message; ``ask(history)`` the kept indices for a final question, state untouched."""

    name: str
    turn: Callable[[list[dict[str, Any]]], Any]
    ask: Callable[[list[dict[str, Any]]], tuple[list[int], list[Any]]]
    summarizer: Any = None


def summarizer(kind: str, budget: int) -> Any:
    """The summarizer of the summary rows: ``extractive`` or ``smollm2``, sized to the
    summary's share of ``budget``."""
    from ctxkit.chat import summarizers
    from ctxkit.chat.summary_placement import SummaryOptions

    room = max(16, int(SummaryOptions().share * budget) - 16)  # header and framing
    if kind == "smollm2":
        return summarizers.SmolLM2Summarizer(max_tokens=min(room, 256))
    return summarizers.ExtractiveSummarizer(max_tokens=room)


def _memory(budget: int, scorer: str, prefix_cache: bool, summarize: str | None = None
            ) -> Method:
    from ctxkit.chat.memory import ChatMemory
    from ctxkit.chat.selection import select
    from ctxkit.chat.summary_placement import summarized_select

    fold = summarizer(summarize, budget) if summarize else None
    mem = ChatMemory(budget, scorer=scorer, prefix_cache=prefix_cache, summarize=fold)

    def turn(history):
        mem.add(history[-1])
        return mem.compress().messages

    def ask(history):
        if mem._window is not None:  # the prefix as the replay left it, not advanced
            out = mem._window.peek(history, budget)
        elif fold is not None:
            out = summarized_select(select, history, budget, mem.options, mem.features, None,
                                    fold, mem.summary_options, mem.summary_state)[0]
        else:
            out = select(history, budget, mem.options, mem.features)
        return out.kept, out.messages

    name = "ChatMemory, prefix cache" if prefix_cache else "ChatMemory"
    if summarize:
        name += ", summaries" if summarize == "extractive" else f", {summarize} summaries"
    return Method(name, turn, ask, fold)


def _whole() -> Method:
    return Method("whole history", lambda history: history,
                  lambda history: (list(range(len(history))), history))


def _trim(budget: int) -> Method | None:
    """LangChain's ``trim_messages(strategy="last")``, counting tokens as ctxkit does."""
    try:
        from langchain_core.messages import trim_messages
        from langchain_core.messages.utils import convert_to_openai_messages
    except ImportError:
        return None
    from ctxkit.chat.pipeline import count_chat_tokens

    def count(messages):
        return count_chat_tokens(convert_to_openai_messages(list(messages)))

    def kept(history):
        out = trim_messages(history, max_tokens=budget, strategy="last", token_counter=count,
                            start_on="human", include_system=True)
        return list(range(len(history) - len(out), len(history))), out

    return Method("LangChain trim_messages (last)",
                  lambda history: convert_to_openai_messages(kept(history)[1]),
                  lambda history: (idx := kept(history)[0], [history[i] for i in idx]))


def answer_in_window(window: list[Any], answer: str) -> bool:
    """The answer string (normalised) in the text of the window before its last message
    (the question)."""
    from ctxkit.io.messages import message_text
    from evals import public_bench as pb

    text = " ".join(message_text(m, i) for i, m in enumerate(window[:-1]))
    return pb.nq_retained(text, [answer])


def replay(conv: Any, fraction: float, scorer: str,
           summaries: tuple[str, ...] = ("extractive",), plain: bool = True
           ) -> list[dict[str, Any]]:
    """One conversation at one budget: a row per method (``summaries``: the summarizers of
    the summary rows; ``plain=False`` runs only those)."""
    import ctxkit
    from evals import public_bench as pb

    messages = conv.messages
    total = ctxkit.count_chat_tokens(messages)
    budget = max(1, int(total * fraction))
    methods = [_memory(budget, scorer, False), _memory(budget, scorer, True), _trim(budget),
               _whole()] if plain else []
    for kind in summaries:
        methods += [_memory(budget, scorer, cache, kind) for cache in (False, True)
                    if cache or kind == "extractive"]  # a model per turn: prefix cache only
    rows = []
    for method in (m for m in methods if m is not None):
        meter = ctxkit.CacheMeter()
        cpu, tokens = [], []
        for k in range(len(messages)):
            t0 = time.process_time()
            window = method.turn(messages[:k + 1])
            cpu.append(time.process_time() - t0)
            tokens.append(meter.record(window).tokens)
        acc = meter.result()
        asked = [(q, method.ask(pb.locomo_messages(conv, q))) for q in conv.questions]
        retained = [pb.locomo_retained(kept, q) for q, (kept, _) in asked]
        answered = [answer_in_window(window, q.answer) for q, (_, window) in asked]
        rows.append({
            "conversation": conv.name, "fraction": fraction, "budget": budget,
            "history_tokens": total, "method": method.name, "turns": len(messages),
            "billed": {str(p): round(acc.billed(p)) for p in PRICES},
            "hit_share": round(acc.hit_share, 4), "tokens": acc.tokens,
            "over_budget_turns": sum(t > budget for t in tokens),
            "retention": round(sum(retained) / len(retained), 4) if retained else None,
            "questions": len(retained),
            "answer_in_window": round(sum(answered) / len(answered), 4) if answered else None,
            "summarizer_calls": getattr(method.summarizer, "calls", None),
            "ms_per_turn": round(1e3 * statistics.mean(cpu), 2),
            "mean_window_tokens": round(statistics.mean(tokens), 1),
            "kv_bytes_mean_window": ctxkit.kv_cache_bytes(KV_MODEL,
                                                          int(statistics.mean(tokens))),
        })
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fraction and method: billed summed over conversations, retention over questions."""
    out = []
    keys = sorted({(r["fraction"], r["method"]) for r in rows}, key=lambda k: (-k[0], k[1]))
    for fraction, method in keys:
        group = [r for r in rows if r["fraction"] == fraction and r["method"] == method]
        asked = sum(r["questions"] for r in group)
        out.append({
            "fraction": fraction, "method": method, "conversations": len(group),
            "billed": {str(p): sum(r["billed"][str(p)] for r in group) for p in PRICES},
            "hit_share": round(sum(r["hit_share"] * r["tokens"] for r in group)
                               / max(1, sum(r["tokens"] for r in group)), 4),
            "retention": round(sum(r["retention"] * r["questions"] for r in group) / asked, 4)
            if asked else None,
            "questions": asked,
            "answer_in_window": round(sum(r["answer_in_window"] * r["questions"]
                                          for r in group) / asked, 4) if asked else None,
            "ms_per_turn": round(statistics.mean(r["ms_per_turn"] for r in group), 2),
            "kv_mib_mean_window": round(statistics.mean(r["kv_bytes_mean_window"]
                                                        for r in group) / 2**20, 1),
            "over_budget_turns": sum(r["over_budget_turns"] for r in group),
        })
    return out


def markdown(summary: list[dict[str, Any]], conversations: str, scorer: str) -> str:
    from evals._common import md_table

    lines = [f"## Billed input over a replay ({conversations}; scorer `{scorer}`)\n",
             "Every message of each conversation in turn; after each, the window each method "
             "sends. Billed: token-equivalents summed over the replays, cached tokens at 0.1 "
             "or 0.5 of the price; cache hits: share of all tokens sent that a provider's "
             "prefix cache serves; retention: questions asked at the end whose evidence turns "
             "are all in the window; answer: questions whose answer string is in the window's "
             "text (the summary included, over budget or not); summaries: the evicted turns "
             "folded into one message after the system prompt (extractive unless named); KV: "
             f"the mean window's KV cache ({KV_MODEL}, bf16).\n"]
    for fraction in sorted({s["fraction"] for s in summary}, reverse=True):
        rows = [s for s in summary if s["fraction"] == fraction]
        base = next((s for s in rows if s["method"] == "ChatMemory"), None)
        table = []
        for s in rows:
            ratio = (f"{s['billed']['0.1'] / base['billed']['0.1']:.2f}x"
                     if base and base["billed"]["0.1"] else "")
            table.append([s["method"], f"{s['billed']['0.1']:,}", ratio,
                          f"{s['billed']['0.5']:,}", f"{s['hit_share']:.0%}",
                          "n/a (over budget)" if s["over_budget_turns"] else
                          "–" if s["retention"] is None else f"{s['retention']:.2f}",
                          "–" if s.get("answer_in_window") is None else
                          f"{s['answer_in_window']:.2f}",
                          f"{s['ms_per_turn']:.1f}", f"{s['kv_mib_mean_window']:,.0f}"])
        lines.append(f"### Budget {fraction:g} of each conversation's tokens\n")
        lines.append(md_table(["method", "billed @0.1", "vs ChatMemory", "billed @0.5",
                               "cache hits", "retention", "answer", "ms/turn", "KV MiB"],
                               table))
    return "\n".join(lines)
