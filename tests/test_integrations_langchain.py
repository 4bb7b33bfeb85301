"""The LangChain / LangGraph adapters against the real langchain-core classes."""

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from ctxkit import compress_chat, get_tokenizer
from ctxkit.errors import OptionError
from ctxkit.integrations.langchain import (
    CompressionHook,
    CtxkitDocumentCompressor,
    compress_messages,
)


def _chat(n):
    msgs = [SystemMessage("You answer from the notes.")]
    for i in range(n):
        msgs.append(HumanMessage(f"Note {i}: crate {i} holds {10 * i} bolts, stacked by the door."))
        msgs.append(AIMessage(f"Noted, crate {i} has {10 * i} bolts."))
    return msgs


def _tool_turn(call_id, crate):
    return [AIMessage("", tool_calls=[{"id": call_id, "name": "count", "args": {"crate": crate}},
                                      {"id": call_id + "b", "name": "weigh",
                                       "args": {"crate": crate}}]),
            ToolMessage(f"{10 * crate} bolts", tool_call_id=call_id),
            ToolMessage(f"{crate} kg", tool_call_id=call_id + "b")]


def test_compress_messages_keeps_tool_calls_with_their_results():
    msgs = _chat(6) + _tool_turn("c1", 2) + _chat(10)[1:] + [HumanMessage("Bolts in crate 2?")]
    out = compress_messages(msgs, 220, scorer="idf")
    ref = compress_chat(msgs, 220, scorer="idf")
    assert out == ref.messages and ref.compressed_tokens <= 220
    assert all(any(m is o for o in msgs) or m.content != o.content for m, o in
               zip(out, [msgs[k] for k in ref.kept]))
    ids = [id(m) for m in out]
    group = [id(m) for m in msgs[13:16]]
    assert all(g in ids for g in group) or not any(g in ids for g in group)
    assert not isinstance(out[1], ToolMessage) and out[-1] is msgs[-1]


def test_compress_messages_never_starts_with_a_tool_message():
    msgs = _tool_turn("c1", 2) + _chat(12)[1:] + [HumanMessage("Bolts in crate 11?")]
    out = compress_messages(msgs, 150, scorer="idf", keep_last=1)
    assert out and not isinstance(out[0], ToolMessage)
    assert out[-1].content == "Bolts in crate 11?"


def test_hook_returns_llm_input_messages_per_thread_and_leaves_the_state_alone():
    hook = CompressionHook(200, scorer="idf")
    history = _chat(20) + [HumanMessage("How many bolts in crate 3?")]
    state = {"messages": list(history)}
    update = hook(state, {"configurable": {"thread_id": "a"}})
    assert set(update) == {"llm_input_messages"} and state["messages"] == history
    window = update["llm_input_messages"]
    assert window == compress_messages(history, 200, scorer="idf")
    assert "crate 3 holds 30" in " ".join(m.content for m in window)
    # the next step of the thread adds to its memory; another thread has its own
    hook({"messages": history + [AIMessage("30.")]}, {"configurable": {"thread_id": "a"}})
    assert len(hook.memory("a")) == len(history) + 1
    hook({"messages": history[:3]}, {"configurable": {"thread_id": "b"}})
    assert len(hook.memory("b")) == 3 and len(hook.memory("a")) == len(history) + 1
    # an edited history (a message removed) starts the thread afresh
    hook({"messages": history[:2] + history[3:]}, {"configurable": {"thread_id": "a"}})
    assert len(hook.memory("a")) == len(history) - 1
    with pytest.raises(KeyError, match="thread 'c'"):
        hook.memory("c")


def test_hook_runs_as_a_runnable_with_its_config_and_on_state_objects():
    hook = CompressionHook(200, scorer="idf", prefix_cache=True)
    history = _chat(20)

    class State:  # a pydantic-style state schema: messages as an attribute
        def __init__(self, messages):
            self.messages = messages

    runnable = RunnableLambda(hook)
    for turn in range(4):
        history = history + [HumanMessage(f"How many bolts in crate {turn}?")]
        window = runnable.invoke(State(history), {"configurable": {"thread_id": "t"}})[
            "llm_input_messages"]
        assert window[-1] is history[-1]
        history = history + [AIMessage(f"{10 * turn}.")]
    acc = hook.cache_accounting("t")
    assert len(acc.turns) == 4 and acc.cached_tokens > 0


def test_hook_checks_its_options_when_built():
    with pytest.raises(OptionError, match="word_keep"):
        CompressionHook(100, word_keep=2.0)
    with pytest.raises(TypeError, match="keep_lats"):
        CompressionHook(100, keep_lats=1)


def _docs():
    return [
        Document("The Eiffel Tower is 330 metres tall. It was finished in 1889 for the "
                 "World's Fair. Gustave Eiffel's company built it.",
                 metadata={"source": "eiffel.txt", "page": 1}, id="d0"),
        Document("Bananas are berries. They grow in clusters called hands. Most exported "
                 "bananas are of the Cavendish variety.", metadata={"source": "banana.txt"},
                 id="d1"),
        Document("Paris hosts the Louvre. The tower in Paris draws seven million visitors a "
                 "year. The Seine crosses the city.", metadata={"source": "paris.txt"},
                 id="d2"),
    ]


def test_document_compressor_fits_the_budget_and_keeps_metadata():
    docs = _docs()
    tok = get_tokenizer("cl100k_base")
    comp = CtxkitDocumentCompressor(budget=40, scorer="idf")
    out = comp.compress_documents(docs, "How tall is the Eiffel Tower?")
    assert sum(tok.count(d.page_content) for d in out) <= 40
    assert out[0].id == "d0" and "330 metres" in out[0].page_content
    assert out[0].metadata["source"] == "eiffel.txt" and out[0].metadata["page"] == 1
    info = {d.id: d.metadata["ctxkit"] for d in out}
    dropped = info["d0"]["passages_dropped"]
    assert dropped and all(v["passages_dropped"] == dropped for v in info.values())
    # every document is in the output or named as dropped
    assert sorted([v["index"] for v in info.values()] + dropped) == [0, 1, 2]
    assert all(v["tokens_after"] <= v["tokens_before"] for v in info.values())
    assert docs[0].metadata == {"source": "eiffel.txt", "page": 1}  # inputs untouched
    shortened = [v for v in info.values() if v["action"] == "shortened"]
    assert shortened and all(v["units_dropped"] > 0 for v in shortened)


def test_document_compressor_keeps_everything_that_fits():
    docs = _docs()
    out = CtxkitDocumentCompressor(budget=1000, scorer="idf").compress_documents(docs, "tower")
    assert [d.page_content for d in out] == [d.page_content for d in docs]
    assert {d.metadata["ctxkit"]["action"] for d in out} == {"kept"}
    assert CtxkitDocumentCompressor(budget=10).compress_documents([], "q") == []


def test_document_compressor_in_a_compression_retriever():
    """What ContextualCompressionRetriever (in ``langchain``) does: retrieve, then compress."""

    class Retriever(BaseRetriever):
        docs: list
        compressor: CtxkitDocumentCompressor

        def _get_relevant_documents(self, query: str, *,
                                    run_manager: CallbackManagerForRetrieverRun):
            return list(self.compressor.compress_documents(self.docs, query))

    retriever = Retriever(docs=_docs(), compressor=CtxkitDocumentCompressor(
        budget=30, scorer="idf"))
    out = retriever.invoke("When was the Eiffel Tower finished?")
    assert "1889" in " ".join(d.page_content for d in out)
    assert all("ctxkit" in d.metadata for d in out)

