"""CompressionHook as the pre_model_hook of a real LangGraph ReAct agent (the chat model is a
scripted stand-in that records what it was sent; the graph, its state and tool loop are
LangGraph's own)."""

import pytest
from agent_fakes import RecordingModel, count_bolts, crate_of
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from ctxkit import count_chat_tokens
from ctxkit.integrations.langchain import CompressionHook


class ScriptedModel(RecordingModel):
    """Calls ``count_bolts`` once per question, then answers from the tool's result."""

    def reply(self, messages: list) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"The tool says: {last.content}")
        return AIMessage("", tool_calls=[{"id": f"call{len(self.sent)}", "name": "count_bolts",
                                          "args": {"crate": crate_of(last.content)}}])


def _notes(n: int) -> list:
    out = [SystemMessage("You answer from the notes and the tools.")]
    for i in range(n):
        out.append(HumanMessage(f"Note {i}: the crate by door {i} is painted color {i * 7}."))
        out.append(AIMessage(f"Noted: door {i}, color {i * 7}."))
    return out


# create_react_agent is LangGraph's documented home of pre_model_hook; its v1 deprecation notice
# points to langchain.agents, a package ctxkit does not need
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_hook_fits_every_model_call_of_a_langgraph_agent_into_the_budget():
    model = ScriptedModel(sent=[])
    hook = CompressionHook(300, scorer="idf", prefix_cache=True)
    agent = create_react_agent(model, [count_bolts], pre_model_hook=hook,
                               checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "session-1"}}
    agent.invoke({"messages": _notes(25)}, config)  # the seeded history, answered once
    for crate in (3, 8):
        state = agent.invoke({"messages": [HumanMessage(f"Bolts in crate {crate}?")]}, config)
    # the graph's state holds the whole history; every model call got a window under budget
    assert count_chat_tokens(state["messages"]) > 300
    assert len(model.sent) == 6  # a tool call and an answer per invoke
    assert all(count_chat_tokens(sent) <= 300 for sent in model.sent)
    assert state["messages"][-1].content == "The tool says: Crate 8 holds 80 bolts."
    last = model.sent[-1]
    assert isinstance(last[-1], ToolMessage) and last[-2].tool_calls  # the loop kept whole
    # the thread's memory saw every message once and billed the tool loop from the cache
    acc = hook.cache_accounting("session-1")
    assert len(acc.turns) == 6 and acc.turns[-1].cached_messages == len(model.sent[-2])
