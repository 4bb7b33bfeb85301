"""The demo's data, generated from a seed with no external files.

:func:`demo_records` writes Alpaca-style records (``instruction``, ``input``, ``output``):
explanations, summaries, sentiment labels, worked arithmetic, Python functions, tip lists,
emails, date extraction, rewrites and short stories. Their lengths are mixed as in real
instruction data: many short answers, a long tail of long ones.
:func:`demo_dataset` plants re-scraped near copies among them (reformatted or lightly edited,
as crawled instruction data has them) and says which record each copy came from.
:func:`demo_chat` writes a long support-style chat history with filler turns, a re-asked
question and one fact, stated early, that the last question asks for.

Example:
    >>> recs = demo_records(3, seed=0)
    >>> sorted(recs[0])
    ['id', 'input', 'instruction', 'output']
    >>> demo_records(3, seed=0) == recs
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DemoChat", "DemoData", "demo_chat", "demo_dataset", "demo_records"]

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


# ----- near copies: the same record scraped twice, reformatted or lightly edited -----

_OPENERS = ["Sure! ", "Here you go:\n", "Of course. ", "Great question! "]
_CLOSERS = [" Hope this helps!", "\n\nLet me know if you need more.", " Thanks for asking."]


def _reformat(rec: dict[str, str], rng: np.random.Generator) -> dict[str, str]:
    """Case and whitespace changes only: the same text once normalised."""
    out = dict(rec)
    out["instruction"] = rec["instruction"].lower() if rng.random() < 0.5 \
        else "  " + rec["instruction"].upper()
    out["output"] = rec["output"].replace(" ", "  ", int(rng.integers(1, 4))) + "\n"
    return out


def _edit(rec: dict[str, str], rng: np.random.Generator) -> dict[str, str]:
    """A chatty opener or closer, and one word of the response dropped."""
    out = dict(rec)
    words = rec["output"].split(" ")
    if len(words) > 8:
        del words[int(rng.integers(1, len(words) - 1))]
    text = " ".join(words)
    if rng.random() < 0.5:
        text = _OPENERS[rng.integers(len(_OPENERS))] + text
    else:
        text = text + _CLOSERS[rng.integers(len(_CLOSERS))]
    out["output"] = text
    return out


@dataclass(frozen=True)
class DemoData:
    """Generated records and, per record, the index of the record it copies (-1 if none)."""

    records: list[dict[str, str]]
    copy_of: np.ndarray

    @property
    def n_copies(self) -> int:
        return int((self.copy_of >= 0).sum())


def demo_dataset(n: int = 2000, seed: int = 0, near_copies: float = 0.05) -> DemoData:
    """:func:`demo_records` with a share ``near_copies`` of them replaced by near copies.

    Each copy repeats an earlier record, either reformatted (case, whitespace) or lightly
    edited (an opener or closer added, one word dropped); ``copy_of`` says which. Records keep
    their positional ids, so a copy's id differs from its source's, as in scraped data.

    Example:
        >>> data = demo_dataset(200, seed=0, near_copies=0.1)
        >>> data.n_copies, len(data.records)
        (20, 200)
        >>> int(data.copy_of[data.copy_of >= 0].max()) < 200
        True
    """
    if not 0.0 <= near_copies < 1.0:
        raise ValueError(f"near_copies must be in [0, 1), got {near_copies}")
    records = demo_records(n, seed)
    copy_of = np.full(n, -1, dtype=np.int64)
    rng = np.random.default_rng([seed, 1])  # its own stream: the originals do not change
    k = min(int(round(near_copies * n)), max(n - 1, 0))
    for pos in np.sort(rng.choice(np.arange(1, n), size=k, replace=False)) if k else []:
        src = int(rng.integers(0, pos))
        change = _reformat if rng.random() < 0.4 else _edit
        records[pos] = {**change(records[src], rng), "id": records[pos]["id"]}
        copy_of[pos] = src
    return DemoData(records, copy_of)


# ----- a long chat history whose last question needs one early fact -----

_GREETINGS = ["thanks!", "ok", "great, thank you", "got it", "cool", "perfect, thanks"]
_REPLIES = ["You're welcome!", "Glad to help.", "Anytime!", "Happy to help."]


@dataclass(frozen=True)
class DemoChat:
    """A chat history (OpenAI messages) and the fact its last question asks for."""

    messages: list[dict[str, str]]
    fact: str


def demo_chat(turns: int = 40, seed: int = 0) -> DemoChat:
    """A support-style history of ``turns`` user turns, all but the last one answered.

    The second user turn states a project code; later turns ask for explanations and tips,
    say thanks, and re-ask an earlier question; the last one asks for the code again.

    Example:
        >>> chat = demo_chat(10, seed=0)
        >>> chat.messages[0]["role"], chat.messages[-1]["role"], len(chat.messages)
        ('system', 'user', 20)
        >>> any(chat.fact in m["content"] for m in chat.messages[1:5])
        True
    """
    if turns < 3:
        raise ValueError(f"turns must be >= 3 (greeting, fact, question), got {turns}")
    rng = np.random.default_rng([seed, 2])
    letters = "".join(chr(65 + int(c)) for c in rng.integers(0, 26, 2))
    fact = f"{letters}-{int(rng.integers(1000, 10000))}"
    msgs = [{"role": "system", "content": "You are a patient tutor. Answer clearly and "
                                          "keep track of what the user tells you."},
            {"role": "user", "content": "Hi! I have a few questions for my study group."},
            {"role": "assistant", "content": "Hello! Ask away, I'm happy to help."},
            {"role": "user", "content": f"First, for the record: our project code is {fact}. "
                                        "I'll need it later for the report."},
            {"role": "assistant", "content": f"Noted: your project code is {fact}."}]
    asked: list[str] = []
    for _ in range(turns - 3):
        kind = rng.random()
        if kind < 0.2:
            msgs += [{"role": "user", "content": _GREETINGS[rng.integers(len(_GREETINGS))]},
                     {"role": "assistant", "content": _REPLIES[rng.integers(len(_REPLIES))]}]
            continue
        if kind < 0.3 and asked:  # re-asked: the same question again, a few turns later
            question = asked[int(rng.integers(len(asked)))]
        elif kind < 0.5:
            question = f"Can you give me some tips for {ACTIVITIES[rng.integers(len(ACTIVITIES))]}?"
        else:
            topic, aud = TOPICS[rng.integers(len(TOPICS))], AUDIENCES[rng.integers(len(AUDIENCES))]
            question = f"How would you explain {topic} to {aud}?"
        asked.append(question)
        topic = question.split(" explain ")[-1].split(" to ")[0] if " explain " in question \
            else None
        answer = "\n\n".join(_paragraph(rng, int(rng.integers(2, 5)), topic)
                             for _ in range(int(rng.integers(1, 3))))
        msgs += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    msgs.append({"role": "user", "content": "Before I go: what was our project code again?"})
    return DemoChat(msgs, fact)
