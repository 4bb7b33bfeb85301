"""A LangGraph agent's history kept under a token budget, prompt-cache friendly (offline).

`CompressionHook` is a LangGraph `pre_model_hook`:

    from langgraph.prebuilt import create_react_agent
    agent = create_react_agent(model, tools, pre_model_hook=CompressionHook(600, ...))

Here no model is called: the script feeds the hook the state LangGraph would pass before each
model call and prints the window the model would get, its tokens and what a provider's prompt
cache would bill over the run.

Run: python examples/langchain_agent_memory.py   (needs `pip install 'ctxkit[langchain]'`)
"""

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import ctxkit
from ctxkit.integrations.langchain import CompressionHook

# scorer="idf" ranks turns without a model, to keep the example fast; the default
# ("embedding", the bundled MiniLM fused with BM25) ranks them better
hook = CompressionHook(600, prefix_cache=True, scorer="idf")
config = {"configurable": {"thread_id": "trip-42"}}  # one memory per conversation thread
state = {"messages": [SystemMessage("You are a travel agent. Use the tools.")]}


def model_step(question: str, answer: str, tool: tuple[str, dict, str] | None = None) -> None:
    """One user turn: the hook runs before each model call, as in a LangGraph agent."""
    state["messages"].append(HumanMessage(question))
    hook(state, config)
    if tool is not None:  # the model calls a tool, the tool answers, the model is called again
        name, args, result = tool
        call_id = f"call_{len(state['messages'])}"
        state["messages"] += [AIMessage("", tool_calls=[{"id": call_id, "name": name,
                                                          "args": args}]),
                              ToolMessage(result, tool_call_id=call_id)]
        hook(state, config)
    state["messages"].append(AIMessage(answer))


model_step("My booking code is QX-4471, for the Lisbon hotel.", "Noted: QX-4471.")
for day in range(1, 25):
    model_step(f"Day {day}: what is the weather in Lisbon?", f"Day {day}: sunny, 24 C.",
               ("weather", {"city": "Lisbon", "day": day}, f"sunny, 24 C, wind {day % 5} m/s"))
state["messages"].append(HumanMessage("What was my booking code again?"))
window = hook(state, config)["llm_input_messages"]  # what the model would be sent

print(f"history: {len(state['messages'])} messages, "
      f"{ctxkit.count_chat_tokens(state['messages'])} tokens")
print(f"window:  {len(window)} messages, {ctxkit.count_chat_tokens(window)} tokens (budget 600)")
for m in window[:3] + window[-3:]:
    print(f"  {type(m).__name__:14} {str(m.content)[:70]!r}")
print("kept the booking code:", any("QX-4471" in str(m.content) for m in window))
acc = hook.cache_accounting("trip-42")
print(f"{len(acc.turns)} model calls: {acc.tokens} input tokens, {acc.hit_share:.0%} served "
      f"from the prompt cache; billed {acc.billed(0.1):.0f} (cached at 0.1 of the price) or "
      f"{acc.billed(0.5):.0f} (at 0.5)")
