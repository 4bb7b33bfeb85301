"""The LlamaIndex adapters against the real llama-index-core classes (MockLLM and
MockEmbedding are llama-index-core's offline model stand-ins)."""

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.memory import BaseMemory
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from ctxkit import compress_chat, get_tokenizer
from ctxkit.chat.prefix_window import RECALL_HEADER
from ctxkit.integrations.llamaindex import CtxkitMemory, CtxkitNodePostprocessor

TEXTS = [
    "The Eiffel Tower is 330 metres tall. It was finished in 1889 for the World's Fair. "
    "Gustave Eiffel's company built it.",
    "Bananas are berries. They grow in clusters called hands. Most exported bananas are of "
    "the Cavendish variety.",
    "Paris hosts the Louvre. The tower in Paris draws seven million visitors a year. The "
    "Seine crosses the city.",
]


def _nodes():
    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"source": f"{i}.txt"}),
                          score=1.0 - i / 10) for i, t in enumerate(TEXTS)]


def test_postprocessor_fits_the_budget_and_keeps_ids_metadata_and_scores():
    nodes = _nodes()
    tok = get_tokenizer("cl100k_base")
    post = CtxkitNodePostprocessor(budget=40, scorer="idf")
    out = post.postprocess_nodes(nodes, query_str="How tall is the Eiffel Tower?")
    assert sum(tok.count(n.node.get_content()) for n in out) <= 40
    by_id = {n.node.node_id: n for n in nodes}
    for n in out:
        src = by_id[n.node.node_id]
        assert n.score == src.score
        assert n.node.metadata["source"] == src.node.metadata["source"]
        info = n.node.metadata["ctxkit"]
        assert info["tokens_after"] == tok.count(n.node.get_content())
        # the ledger is for the program, not the model or the embedder
        assert "ctxkit" not in n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "ctxkit" not in n.node.get_content(metadata_mode=MetadataMode.EMBED)
    kept = [n.node.metadata["ctxkit"]["index"] for n in out]
    dropped = out[0].node.metadata["ctxkit"]["passages_dropped"]
    assert dropped and sorted(kept + dropped) == [0, 1, 2]
    assert "330 metres" in out[0].node.get_content()
    assert nodes[0].node.metadata == {"source": "0.txt"}  # inputs untouched
    assert nodes[0].node.get_content() == TEXTS[0]


def test_postprocessor_without_a_query_and_with_room_for_all():
    out = CtxkitNodePostprocessor(budget=1000, scorer="idf").postprocess_nodes(_nodes())
    assert [n.node.get_content() for n in out] == TEXTS
    assert {n.node.metadata["ctxkit"]["action"] for n in out} == {"kept"}
    with pytest.raises(ValueError):
        CtxkitNodePostprocessor(budget=0)


def test_postprocessor_in_a_query_engine():
    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS],
                                            embed_model=MockEmbedding(embed_dim=8))
    engine = index.as_query_engine(llm=MockLLM(max_tokens=4), similarity_top_k=3,
                                   node_postprocessors=[CtxkitNodePostprocessor(
                                       budget=30, scorer="idf")])
    response = engine.query("When was the Eiffel Tower finished?")
    sources = response.source_nodes
    assert sources and all("ctxkit" in n.node.metadata for n in sources)
    assert "1889" in " ".join(n.node.get_content() for n in sources)


def _engine(memory, handler):
    llm = MockLLM(max_tokens=4, callback_manager=CallbackManager([handler]))
    return SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt="Be brief.")


def _prompt(handler):
    """The prompt the LLM got last (MockLLM renders the chat messages into one prompt)."""
    return handler.get_llm_inputs_outputs()[-1][0].payload[EventPayload.PROMPT]


def test_memory_in_a_simple_chat_engine_sends_the_window():
    assert issubclass(CtxkitMemory, BaseMemory)
    handler = LlamaDebugHandler()
    memory = CtxkitMemory.from_defaults(budget=150, scorer="idf")
    engine = _engine(memory, handler)
    for i in range(12):
        engine.chat(f"Note {i}: crate {i} holds {10 * i} bolts, stacked by the door.")
    engine.chat("How many bolts are in crate 3?")
    history = memory.get_all()
    assert len(history) == 26 and all(isinstance(m, ChatMessage) for m in history)
    prompt = _prompt(handler)
    assert prompt.startswith("system: Be brief.")
    assert "Note 3: crate 3 holds 30 bolts, stacked by the door." in prompt  # whole
    tok = get_tokenizer("cl100k_base")
    window = compress_chat(history[:-1], 150 - tok.count("Be brief."), scorer="idf")
    assert [m.content for m in window.messages] == [
        line.split(": ", 1)[1] for line in prompt.splitlines()[1:-1]]


def test_memory_with_prefix_cache_in_an_engine_built_by_memory_cls():
    handler = LlamaDebugHandler()
    llm = MockLLM(max_tokens=4, callback_manager=CallbackManager([handler]))
    engine = SimpleChatEngine.from_defaults(llm=llm, memory_cls=CtxkitMemory)
    assert engine._memory.budget == llm.metadata.context_window - 256  # as engines size it
    memory = CtxkitMemory.from_defaults(budget=300, scorer="idf", prefix_cache=True)
    engine = _engine(memory, handler)
    for i in range(30):
        engine.chat(f"Note {i}: crate {i} holds {10 * i} bolts, stacked by the door.")
    engine.chat("How many bolts are in crate 2?")
    prompt = _prompt(handler)
    assert RECALL_HEADER in prompt and "crate 2 holds 20" in prompt
    acc = memory.cache_accounting()
    assert len(acc.turns) == 31 and acc.cached_tokens > acc.uncached_tokens


def test_memory_set_reset_and_bad_options():
    memory = CtxkitMemory.from_defaults(
        chat_history=[ChatMessage(role="user", content="hi")], budget=50, scorer="idf")
    assert [m.content for m in memory.get()] == ["hi"]
    memory.set([ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")])
    assert [m.content for m in memory.get_all()] == ["a", "b"]
    memory.reset()
    assert memory.get_all() == [] and memory.get() == []
    with pytest.raises(ValueError, match="leaves no room"):
        memory.get(initial_token_count=50)
    with pytest.raises(TypeError, match="keep_lats"):
        CtxkitMemory.from_defaults(budget=50, keep_lats=1)

