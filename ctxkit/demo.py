"""The demo: a generated instruction dataset, tokenized and packed, compared across strategies.

:func:`demo_records` writes Alpaca-style records (``instruction``, ``input``, ``output``) from a
seed, with no external data: explanations, summaries, sentiment labels, worked arithmetic,
Python functions, tip lists, emails, date extraction, rewrites and short stories. Their lengths
are mixed as in real instruction data: many short answers, a long tail of long ones.
:func:`run_demo` tokenizes them (prompt masked from the loss), packs them and compares
strategies; ``ctxkit demo`` prints the result.

Example:
    >>> recs = demo_records(3, seed=0)
    >>> sorted(recs[0])
    ['id', 'input', 'instruction', 'output']
    >>> demo_records(3, seed=0) == recs
    True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DemoResult", "StrategyRow", "demo_records", "run_demo"]

TOPICS = [
    "photosynthesis", "the water cycle", "binary search", "compound interest", "plate tectonics",
    "the French Revolution", "TCP congestion control", "sourdough fermentation", "vaccines",
    "black holes", "supply and demand", "the immune system", "recursion", "climate feedback loops",
    "the printing press", "hash tables", "public key cryptography", "coral reefs", "inflation",
    "neural networks", "the Roman aqueducts", "tides", "garbage collection", "bird migration",
    "the Silk Road", "solar panels", "probability", "the nitrogen cycle", "version control",
    "volcanoes", "sleep cycles", "electric motors", "the Renaissance", "caching", "glaciers",
]
AUDIENCES = ["a ten-year-old", "a new employee", "a first-year student", "a busy manager",
             "someone who has never heard of it", "an expert in a different field"]
SUBJECTS = ["The process", "This idea", "In practice it", "The key mechanism", "Historically, it",
            "A common misconception is that it", "Researchers found that it", "At its core it",
            "Put simply, it", "One useful way to see it is that it"]
VERBS = ["depends on", "transforms", "balances", "connects", "limits", "amplifies", "reuses",
         "stores", "breaks down", "moves", "predicts", "reduces", "combines", "regulates"]
OBJECTS = ["energy from sunlight", "small pieces of information", "the flow of resources",
           "many independent parts", "a feedback signal", "the cost of each step",
           "patterns that repeat over time", "the pressure inside the system",
           "the order in which things happen", "a surprisingly simple rule",
           "the boundary between two regions", "errors before they spread"]
TAILS = ["so the whole system stays stable.", "which is why it matters so much.",
         "and this shows up in everyday life.", "although the details vary from case to case.",
         "so small changes can have large effects.", "which engineers exploit deliberately.",
         "and scientists still debate the exact numbers.", "unless something interrupts it."]
NAMES = ["Ada", "Kofi", "Mei", "Lars", "Priya", "Tomas", "Amara", "Jonah", "Sofia", "Ravi"]
PLACES = ["a lighthouse", "a night market", "an orbital station", "a mountain village",
          "a flooded library", "a desert railway", "a small bakery", "a research vessel"]
REVIEWS = {
    "Positive": ["I loved it and would buy it again.", "Works exactly as described.",
                 "The staff were friendly and quick.", "Best purchase I made this year."],
    "Negative": ["It broke after two days.", "Customer support never answered.",
                 "The instructions were confusing and parts were missing.",
                 "Far too expensive for what you get."],
    "Neutral": ["It arrived on Tuesday.", "The box contained the item and a manual.",
                "It is available in three colours.", "I have used it twice so far."],
}
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
CODE_TASKS = [
    ("reverses the words in a sentence", "reverse_words", "text: str", "str",
     ["words = text.split()", "return \" \".join(reversed(words))"]),
    ("returns the n-th Fibonacci number", "fibonacci", "n: int", "int",
     ["a, b = 0, 1", "for _ in range(n):", "    a, b = b, a + b", "return a"]),
    ("counts how often each word occurs", "word_counts", "text: str", "dict[str, int]",
     ["counts: dict[str, int] = {}", "for word in text.lower().split():",
      "    counts[word] = counts.get(word, 0) + 1", "return counts"]),
    ("checks whether a string is a palindrome", "is_palindrome", "text: str", "bool",
     ["cleaned = [c.lower() for c in text if c.isalnum()]", "return cleaned == cleaned[::-1]"]),
    ("merges two sorted lists into one sorted list", "merge_sorted",
     "a: list[int], b: list[int]", "list[int]",
     ["out, i, j = [], 0, 0", "while i < len(a) and j < len(b):",
      "    if a[i] <= b[j]:", "        out.append(a[i])", "        i += 1", "    else:",
      "        out.append(b[j])", "        j += 1", "return out + a[i:] + b[j:]"]),
    ("flattens a nested list", "flatten", "items: list", "list",
     ["out = []", "for item in items:", "    if isinstance(item, list):",
      "        out.extend(flatten(item))", "    else:", "        out.append(item)", "return out"]),
]
ACTIVITIES = ["learning a new language", "running a first marathon", "writing clean code",
              "saving money on groceries", "giving a conference talk", "growing tomatoes",
              "onboarding remote teammates", "studying for exams", "reducing screen time"]
TIP_VERBS = ["Start", "Keep", "Plan", "Track", "Review", "Practise", "Ask for", "Avoid",
             "Schedule", "Celebrate"]
TIP_OBJECTS = ["small, daily goals", "a simple log of your progress", "feedback early",
               "one change at a time", "the hardest part first", "rest days",
               "a checklist for the routine steps", "distractions during focus time"]


def _sentence(rng: np.random.Generator, topic: str | None = None) -> str:
    subject = SUBJECTS[rng.integers(len(SUBJECTS))]
    if topic is not None and rng.random() < 0.3:
        subject = f"The study of {topic}"
    return (f"{subject} {VERBS[rng.integers(len(VERBS))]} "
            f"{OBJECTS[rng.integers(len(OBJECTS))]}, {TAILS[rng.integers(len(TAILS))]}")


def _paragraph(rng: np.random.Generator, n: int, topic: str | None = None) -> str:
    return " ".join(_sentence(rng, topic) for _ in range(n))


def _length_scale(rng: np.random.Generator) -> int:
    """Paragraph counts: mostly short, a long tail (lognormal, as in instruction data)."""
    return int(np.clip(rng.lognormal(mean=0.6, sigma=0.8), 1, 12))


def _explain(rng):
    topic = TOPICS[rng.integers(len(TOPICS))]
    aud = AUDIENCES[rng.integers(len(AUDIENCES))]
    paras = [_paragraph(rng, int(rng.integers(2, 6)), topic) for _ in range(_length_scale(rng))]
    return f"Explain {topic} to {aud}.", "", "\n\n".join(paras)


def _summarize(rng):
    topic = TOPICS[rng.integers(len(TOPICS))]
    passage = "\n\n".join(_paragraph(rng, int(rng.integers(3, 7)), topic)
                          for _ in range(_length_scale(rng)))
    return ("Summarize the following passage in one or two sentences.", passage,
            _paragraph(rng, int(rng.integers(1, 3)), topic))


def _sentiment(rng):
    label = list(REVIEWS)[rng.integers(3)]
    pool = REVIEWS[label]
    text = " ".join(pool[i] for i in rng.permutation(len(pool))[: int(rng.integers(1, 4))])
    return "Classify the sentiment of this review as Positive, Negative or Neutral.", text, label


def _arithmetic(rng):
    name = NAMES[rng.integers(len(NAMES))]
    boxes, per_box, eaten = (int(rng.integers(2, 15)), int(rng.integers(3, 25)),
                             int(rng.integers(1, 20)))
    price = int(rng.integers(2, 9))
    total = boxes * per_box
    left = total - eaten
    question = (f"{name} buys {boxes} boxes of apples with {per_box} apples in each box. "
                f"{name} gives away {eaten} apples and sells the rest for ${price} each. "
                "How much money does " + name + " make?")
    answer = (f"{name} has {boxes} x {per_box} = {total} apples.\n"
              f"After giving away {eaten}, {total} - {eaten} = {left} apples are left.\n"
              f"Selling them at ${price} each gives {left} x {price} = ${left * price}.\n"
              f"#### {left * price}")
    return "Solve the word problem and show your steps.", question, answer


def _code(rng):
    desc, fname, args, ret, body = CODE_TASKS[rng.integers(len(CODE_TASKS))]
    lines = [f"def {fname}({args}) -> {ret}:", f'    """Return a value that {desc[8:]}."""'
             if desc.startswith("returns ") else f'    """{desc[0].upper() + desc[1:]}."""']
    lines += ["    " + b for b in body]
    text = "```python\n" + "\n".join(lines) + "\n```"
    if rng.random() < 0.6:
        text += "\n\n" + _paragraph(rng, int(rng.integers(1, 5)))
    return f"Write a Python function that {desc}.", "", text


def _tips(rng):
    k = int(rng.integers(3, 12))
    act = ACTIVITIES[rng.integers(len(ACTIVITIES))]
    items = [f"{i + 1}. {TIP_VERBS[rng.integers(len(TIP_VERBS))]} "
             f"{TIP_OBJECTS[rng.integers(len(TIP_OBJECTS))]}. {_sentence(rng)}" for i in range(k)]
    return f"List {k} tips for {act}.", "", "\n".join(items)


def _email(rng):
    who, topic = NAMES[rng.integers(len(NAMES))], TOPICS[rng.integers(len(TOPICS))]
    body = _paragraph(rng, int(rng.integers(2, 6)), topic)
    sender = NAMES[rng.integers(len(NAMES))]
    return (f"Write a short email to {who} about the workshop on {topic}.", "",
            f"Hi {who},\n\n{body}\n\nBest regards,\n{sender}")


def _dates(rng):
    n = int(rng.integers(1, 5))
    dates = [f"{MONTHS[rng.integers(12)]} {int(rng.integers(1, 29))}, "
             f"{int(rng.integers(1990, 2030))}" for _ in range(n)]
    parts = []
    for d in dates:
        parts.append(_sentence(rng))
        parts.append(f"The next review is planned for {d}.")
    return "Extract every date mentioned in the text.", " ".join(parts), "\n".join(dates)


def _rewrite(rng):
    text = _paragraph(rng, int(rng.integers(1, 6)))
    formal = text.replace("it", "the phenomenon").replace("so ", "consequently, ")
    return "Rewrite the following text in a more formal tone.", text, formal


def _story(rng):
    name, place = NAMES[rng.integers(len(NAMES))], PLACES[rng.integers(len(PLACES))]
    n = _length_scale(rng) + 2
    paras = [f"{name} had lived near {place} for years."] + [
        _paragraph(rng, int(rng.integers(2, 6))) for _ in range(n)]
    return f"Write a short story about {name}, who finds a map in {place}.", "", "\n\n".join(paras)


_KINDS = [(_explain, 0.16), (_summarize, 0.12), (_sentiment, 0.12), (_arithmetic, 0.12),
          (_code, 0.1), (_tips, 0.1), (_email, 0.08), (_dates, 0.08), (_rewrite, 0.07),
          (_story, 0.05)]


def demo_records(n: int = 2000, seed: int = 0) -> list[dict[str, str]]:
    """``n`` Alpaca-style records generated deterministically from ``seed``.

    Example:
        >>> len(demo_records(5, seed=1))
        5
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    probs = np.array([p for _, p in _KINDS])
    kinds = rng.choice(len(_KINDS), size=n, p=probs / probs.sum())
    out = []
    for i, k in enumerate(kinds):
        instruction, input_text, output = _KINDS[int(k)][0](rng)
        out.append({"id": f"demo-{i:06d}", "instruction": instruction, "input": input_text,
                    "output": output})
    return out


@dataclass
class StrategyRow:
    """One way to fill windows: how many, how full, how long planning took."""

    method: str
    windows: int
    utilization: float
    padding_tokens: int
    seconds: float


@dataclass
class DemoResult:
    n_records: int
    capacity: int
    tokenizer: str
    total_tokens: int
    target_tokens: int
    max_length: int
    mean_length: float
    batch: Any  # PackedBatch packed with bfd
    rows: list[StrategyRow] = field(default_factory=list)
    tokenize_seconds: float = 0.0


def run_demo(n: int = 2000, capacity: int = 2048, seed: int = 0,
             tokenizer: str = "cl100k_base", overflow: str = "truncate") -> DemoResult:
    """Generate, tokenize (prompt masked, EOS after each record), pack with bfd, compare.

    Example:
        >>> res = run_demo(50, capacity=1024)
        >>> res.batch.n_windows >= res.batch.lower_bound
        True
    """
    from ctxkit.io.records import format_alpaca_prompt
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.collate import pack_arrays
    from ctxkit.packing.plan import pack_lengths

    tok = get_tokenizer(tokenizer)
    records = demo_records(n, seed)
    t0 = time.perf_counter()
    prompts = tok.encode_batch([format_alpaca_prompt(r["instruction"], r["input"])
                                for r in records])
    outputs = tok.encode_batch([r["output"] for r in records])
    tokenize_seconds = time.perf_counter() - t0
    lengths = np.array([len(p) + len(o) for p, o in zip(prompts, outputs)], dtype=np.int64)
    tokens = np.fromiter((t for p, o in zip(prompts, outputs) for t in (*p, *o)),
                         dtype=np.int64, count=int(lengths.sum()))
    mask = np.concatenate([np.r_[np.zeros(len(p), bool), np.ones(len(o), bool)]
                           for p, o in zip(prompts, outputs)]) if records else np.zeros(0, bool)
    batch = pack_arrays(tokens, lengths, capacity, strategy="bfd", separator_id=tok.eos_id,
                        completion_mask=mask, overflow=overflow, seed=seed)
    with_sep = lengths + (1 if tok.eos_id is not None else 0)
    rows = []
    placed = np.minimum(with_sep, capacity) if overflow == "truncate" else with_sep
    total = int(placed.sum())
    rows.append(StrategyRow("padding, 1 per row", int(placed.size),
                            total / (placed.size * capacity) if placed.size else 0.0,
                            int(placed.size * capacity - total), 0.0))
    # TRL's pack_dataset runs BFD per datasets.map block of 1,000 examples; ctxkit plans globally
    t0 = time.perf_counter()
    blocks = [pack_lengths(with_sep[i:i + 1000], capacity, overflow=overflow)
              for i in range(0, with_sep.size, 1000)]
    n_block = sum(b.n_bins for b in blocks)
    rows.append(StrategyRow("bfd, blocks of 1,000 (TRL)", n_block,
                            total / (n_block * capacity) if n_block else 0.0,
                            n_block * capacity - total, time.perf_counter() - t0))
    for strategy in ("greedy", "bfd", "optimal"):
        t0 = time.perf_counter()
        plan = pack_lengths(with_sep, capacity, strategy=strategy, overflow=overflow, seed=seed)
        rows.append(StrategyRow(strategy, plan.n_bins, plan.utilization, plan.padding_tokens,
                                time.perf_counter() - t0))
    order = ["padding, 1 per row", "greedy", "bfd, blocks of 1,000 (TRL)", "bfd", "optimal"]
    rows.sort(key=lambda row: order.index(row.method))
    return DemoResult(
        n_records=len(records), capacity=capacity, tokenizer=tok.name,
        total_tokens=int(lengths.sum()), target_tokens=int(mask.sum()),
        max_length=int(lengths.max()) if lengths.size else 0,
        mean_length=float(lengths.mean()) if lengths.size else 0.0,
        batch=batch, rows=rows, tokenize_seconds=tokenize_seconds,
    )
