"""A LlamaIndex chat engine's memory kept under a token budget, prompt-cache friendly (offline).

`CtxkitMemory` is a LlamaIndex `BaseMemory`:

    from llama_index.core.chat_engine import SimpleChatEngine
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=CtxkitMemory.from_defaults(
        budget=500, prefix_cache=True))

Here no model is called: the script puts and gets messages as a chat engine does each turn and
prints the window the model would get, its tokens and what a provider's prompt cache would bill
over the conversation.

Run: python examples/llamaindex_chat_memory.py   (needs `pip install 'ctxkit[llamaindex]'`)
"""

from llama_index.core.base.llms.types import ChatMessage

import ctxkit
from ctxkit.integrations.llamaindex import CtxkitMemory

# scorer="idf" ranks turns without a model, to keep the example fast; the default
# ("embedding", the bundled MiniLM fused with BM25) ranks them better
memory = CtxkitMemory.from_defaults(budget=500, prefix_cache=True, scorer="idf")
system = [ChatMessage(role="system", content="You are a gardening assistant.")]
prefix_tokens = len(memory.tokenizer_fn(system[0].content))  # the engine counts it apart

turns = [("I planted tomatoes on 12 April in bed C, next to the basil.", "Noted.")]
turns += [(f"Week {w}: the leaves of the courgettes look pale, what should I do?",
           f"Week {w}: water at the base in the morning and add compost.") for w in range(1, 30)]
turns += [("When did I plant the tomatoes, and where?", None)]
for question, answer in turns:  # what a chat engine does each turn
    memory.put(ChatMessage(role="user", content=question))
    window = system + memory.get(initial_token_count=prefix_tokens)  # sent to the model
    if answer is not None:
        memory.put(ChatMessage(role="assistant", content=answer))

history = system + memory.get_all()
print(f"history: {len(history)} messages, {ctxkit.count_chat_tokens(history)} tokens")
print(f"window:  {len(window)} messages, {ctxkit.count_chat_tokens(window)} tokens (budget 500)")
for m in window[:3] + window[-3:]:
    print(f"  {m.role.value:9} {m.content[:70]!r}")
print("kept the planting date:", any("12 April" in m.content for m in window))
acc = memory.cache_accounting()
print(f"{len(acc.turns)} model calls: {acc.tokens} input tokens, {acc.hit_share:.0%} served "
      f"from the prompt cache; billed {acc.billed(0.1):.0f} (cached at 0.1 of the price) or "
      f"{acc.billed(0.5):.0f} (at 0.5)")
