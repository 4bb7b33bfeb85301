"""CompressionMiddleware in real LangChain 1.x ``create_agent`` agents (the chat model is a
scripted stand-in that records what it was sent; the agent graph, its state, tool loop and
middleware chain are LangChain's own)."""

import asyncio

import pytest
from agent_fakes import RecordingModel, count_bolts, crate_of, weigh
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxkit import compress_chat, count_chat_tokens
from ctxkit.integrations import langchain as lc
from ctxkit.integrations.langchain_middleware import CompressionMiddleware, _thread_id

PROMPT = "You answer from the notes and the tools."


class ScriptedModel(RecordingModel):
    """Calls ``count_bolts`` and ``weigh`` once per question, then answers from the tools'
    results."""

    def reply(self, messages: list) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            results = [m.content for m in messages if isinstance(m, ToolMessage)][-2:]
            return AIMessage("The tools say: " + " ".join(results))
        crate, n = crate_of(last.content), len(self.sent)
        return AIMessage("", tool_calls=[
            {"id": f"call{n}a", "name": "count_bolts", "args": {"crate": crate}},
            {"id": f"call{n}b", "name": "weigh", "args": {"crate": crate}}])


def _history(n: int) -> list:
    """Notes, every third one followed by an answered pair of tool calls."""
    out = []
    for i in range(n):
        out += [HumanMessage(f"Note {i}: the crate by door {i} is painted color {i * 7}."),
                AIMessage(f"Noted: door {i}, color {i * 7}.")]
        if i % 3 == 0:
            out += [AIMessage("", tool_calls=[
                        {"id": f"old{i}a", "name": "count_bolts", "args": {"crate": i}},
                        {"id": f"old{i}b", "name": "weigh", "args": {"crate": i}}]),
                    ToolMessage(f"Crate {i} holds {10 * i} bolts.", tool_call_id=f"old{i}a"),
                    ToolMessage(f"Crate {i} weighs {i + 2} kg.", tool_call_id=f"old{i}b"),
                    AIMessage(f"Crate {i}: {10 * i} bolts, {i + 2} kg.")]
    return out


def _paired(window: list) -> bool:
    """Every tool call in ``window`` has its results there, right after it, and every result
    its call."""
    for k, m in enumerate(window):
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = [c["id"] for c in m.tool_calls]
            after = window[k + 1:k + 1 + len(ids)]
            if [getattr(r, "tool_call_id", None) for r in after] != ids:
                return False
        if isinstance(m, ToolMessage) and not any(
                isinstance(a, AIMessage) and m.tool_call_id in [c["id"] for c in a.tool_calls]
                for a in window[:k]):
            return False
    return True


def test_middleware_fits_every_model_call_of_a_create_agent_run_into_the_budget():
    model = ScriptedModel(sent=[])
    middleware = CompressionMiddleware(300, scorer="idf", prefix_cache=True)
    agent = create_agent(model, [count_bolts, weigh], system_prompt=PROMPT,
                         middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "session-1"}}
    seed = _history(24)
    assert count_chat_tokens(seed) > 3 * 300
    for k, crate in enumerate((3, 8, 15)):
        turn = [HumanMessage(f"Bolts in crate {crate}?")]
        state = agent.invoke({"messages": (seed if k == 0 else []) + turn}, config)
        assert state["messages"][-1].content == (  # the agent completes each question
            f"The tools say: Crate {crate} holds {10 * crate} bolts. "
            f"Crate {crate} weighs {crate + 2} kg.")
    assert len(model.sent) == 6  # the tool calls and an answer per question
    for sent in model.sent:
        # every model call got the system prompt, whole, and a window within the budget
        assert count_chat_tokens(sent) <= 300
        assert isinstance(sent[0], SystemMessage) and sent[0].content == PROMPT
        assert not isinstance(sent[1], ToolMessage) and _paired(sent)
        assert len(sent) < len(seed)
    last = model.sent[-1]
    assert [type(m) for m in last[-3:]] == [AIMessage, ToolMessage, ToolMessage]
    assert last[-4].content == "Bolts in crate 15?"  # the question, then its tool loop
    # the state, and so the checkpoint, keeps the whole history unchanged
    kept = agent.get_state(config).values["messages"]
    assert kept == state["messages"] and len(kept) == len(seed) + 3 * 5
    assert [(type(m), m.content) for m in kept[:len(seed)]] == [
        (type(m), m.content) for m in seed]
    assert count_chat_tokens(kept) > 3 * 300
    # the thread's memory: the system prompt and every message before the last answer, each
    # added once; its accounting counts each window the model was sent, once
    assert len(middleware.memory("session-1")) == 1 + len(kept) - 1
    acc = middleware.cache_accounting("session-1")
    assert [t.messages for t in acc.turns] == [len(s) for s in model.sent]
    assert acc.cached_tokens > 0


def test_middleware_sends_compress_chats_window_per_thread_also_async():
    """Without a prefix cache the model gets exactly ``compress_chat``'s window of the system
    prompt and the state's messages; each thread has its memory; ``ainvoke`` takes the
    async hook."""
    model = ScriptedModel(sent=[])
    middleware = CompressionMiddleware(250, scorer="idf", keep_last=1)
    agent = create_agent(model, [count_bolts, weigh], system_prompt=PROMPT,
                         middleware=[middleware], checkpointer=InMemorySaver())

    async def run():
        for thread, n in (("a", 20), ("b", 12)):
            await agent.ainvoke({"messages": _history(n) + [HumanMessage("Bolts in crate 6?")]},
                                {"configurable": {"thread_id": thread}})

    asyncio.run(run())
    assert len(model.sent) == 4
    for thread, n in (("a", 20), ("b", 12)):
        state = agent.get_state({"configurable": {"thread_id": thread}}).values["messages"]
        assert len(state) == len(_history(n)) + 1 + 4  # the question, its loop and answer
        for call in range(2):  # the state's messages as they were at each model call
            history = [SystemMessage(PROMPT), *state[:len(state) - 4 + 3 * call]]
            sent = model.sent[2 * (thread == "b") + call]
            assert sent == compress_chat(history, 250, scorer="idf", keep_last=1).messages
            assert count_chat_tokens(history) > 250
        assert len(middleware.memory(thread)) == 1 + len(state) - 1
    assert all(count_chat_tokens(s) <= 250 and _paired(s) for s in model.sent)


def test_middleware_without_a_system_prompt_or_a_thread():
    model = ScriptedModel(sent=[])
    middleware = CompressionMiddleware(200, scorer="idf")
    agent = create_agent(model, [count_bolts, weigh], middleware=[middleware])
    history = _history(15) + [HumanMessage("Bolts in crate 4?")]
    state = agent.invoke({"messages": history})
    assert state["messages"][-1].content.startswith("The tools say: Crate 4 holds 40 bolts.")
    assert not any(isinstance(m, SystemMessage) for s in model.sent for m in s)
    assert model.sent[0] == compress_chat(state["messages"][:len(history)], 200,
                                          scorer="idf").messages
    assert len(middleware.memory()) == len(history) + 3  # runs without a thread_id: None


def test_middleware_is_importable_from_the_langchain_adapter_and_checks_its_options():
    assert lc.CompressionMiddleware is CompressionMiddleware
    assert "CompressionMiddleware" not in lc.__all__  # import * needs only langchain-core
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        lc.Nope  # noqa: B018
    with pytest.raises(TypeError, match="keep_lats"):
        CompressionMiddleware(100, keep_lats=1)
    assert _thread_id(None) is None  # no execution_info and no run in progress
