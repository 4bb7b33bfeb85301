"""Summaries of evicted turns: compress_chat / ChatMemory / prefix-cache plumbing and the
shipped summarizers (extractive, SmolLM2, OpenAI-compatible endpoint)."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest

from ctxkit.chat.memory import ChatMemory
from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
from ctxkit.chat.summarizers import ExtractiveSummarizer, openai_summarizer
from ctxkit.chat.summary_placement import SUMMARY_HEADER, SummaryOptions
from ctxkit.errors import InputError, OptionError


def _chat(n: int = 40) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "You are a warehouse assistant."}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant",
                     "content": f"Note {i}: crate {i} holds {10 * i} bolts from supplier "
                                f"Vendor{i}."})
    return msgs


class Recorder:
    """A summarizer that records its calls and lists the message numbers it saw."""

    def __init__(self, words: int = 1):
        self.calls: list[tuple[int, str | None]] = []
        self.words = words

    def __call__(self, evicted, previous):
        self.calls.append((len(evicted), previous))
        seen = " ".join(m["content"].split(":")[0] for m in evicted)
        return ((previous + " ") if previous else "") + seen + " pad" * self.words


def test_compress_chat_summary_in_budget_after_system_with_ledger():
    msgs = _chat()
    out = compress_chat(msgs, 300, scorer="idf", summarize=Recorder(),
                        summary_options=SummaryOptions(share=0.2))
    assert out.compressed_tokens <= 300
    assert out.compressed_tokens == count_chat_tokens(out.messages)
    assert out.messages[0] == msgs[0]
    summary = out.messages[1]
    assert summary["role"] == "user" and summary["content"].startswith(SUMMARY_HEADER)
    assert out.summary.position == 1 and out.summary.text == summary["content"]
    summarized = [c.index for c in out.ledger if c.action == "summarized"]
    assert summarized and summarized == out.summary.covers
    assert all(c.code == "summarized" and "summary" in c.reason for c in out.ledger
               if c.action == "summarized")
    assert not set(summarized) & set(out.kept)  # the summary is not a history message
    assert len(out.messages) == len(out.kept) + 1
    assert out.to_dict()["summary"]["covers"] == summarized


def test_long_summary_is_cut_to_fit_and_a_roomless_one_left_out():
    msgs = _chat()
    out = compress_chat(msgs, 300, scorer="idf", summarize=Recorder(words=500))
    assert out.summary.truncated and out.compressed_tokens <= 300
    tiny = compress_chat(msgs, 300, scorer="idf", summarize=Recorder(),
                         summary_options=SummaryOptions(share=0.01))
    assert tiny.summary is None and tiny.compressed_tokens <= 300
    assert any("summary left out" in c.reason for c in tiny.ledger)
    assert not any(c.action == "summarized" for c in tiny.ledger)


def test_nothing_evicted_means_no_summary_call():
    rec = Recorder()
    out = compress_chat(_chat(4), 4000, scorer="idf", summarize=rec)
    assert out.summary is None and not rec.calls
    # a history that fits the budget but not the budget less the summary's share: sent whole
    msgs = _chat(12)
    total = count_chat_tokens(msgs)
    out = compress_chat(msgs, total, scorer="idf", summarize=rec,
                        summary_options=SummaryOptions(share=0.3))
    assert out.summary is None and not rec.calls and len(out.messages) == len(msgs)


def test_summary_in_the_input_format():
    msgs = _chat()
    anthropic = [m for m in msgs[1:]]
    out = compress_chat(anthropic, 300, scorer="idf", system=msgs[0]["content"],
                        summarize=Recorder(), summary_options=SummaryOptions(role="system"))
    assert out.format == "openai" or out.format == "anthropic"
    assert out.messages[0]["content"].startswith(SUMMARY_HEADER)
    assert out.summary.position == 0
    assert min(out.summary.covers) >= 0 and out.kept[0] >= 0
    lc = pytest.importorskip("langchain_core.messages")
    lc_msgs = [lc.SystemMessage(msgs[0]["content"])] + [
        (lc.HumanMessage if m["role"] == "user" else lc.AIMessage)(m["content"])
        for m in msgs[1:]]
    out = compress_chat(lc_msgs, 300, scorer="idf", summarize=Recorder())
    assert isinstance(out.messages[1], lc.HumanMessage)
    assert out.messages[1].content.startswith(SUMMARY_HEADER)
    assert out.messages[0] is lc_msgs[0]


def test_bad_summarizer_is_an_option_error():
    with pytest.raises(OptionError, match="summarize"):
        compress_chat(_chat(), 300, summarize="extractive")
    with pytest.raises(OptionError, match="share"):
        SummaryOptions(share=1.5)
    with pytest.raises(InputError, match="not str"):
        compress_chat(_chat(), 300, scorer="idf", summarize=lambda e, p: None)


def test_chat_memory_running_summary_refresh_and_peek():
    rec = Recorder()
    mem = ChatMemory(300, scorer="idf", summarize=rec,
                     summary_options=SummaryOptions(share=0.2, refresh=0.2))
    windows = []
    for m in _chat():
        mem.add(m)
        windows.append(mem.compress())
    assert all(w.compressed_tokens <= 300 for w in windows)
    assert rec.calls and rec.calls[0][1] is None
    assert all(prev is not None for _, prev in rec.calls[1:])  # folded into the previous
    # refresh: not one call per turn once evictions start
    evicting = sum(1 for w in windows if any(c.code in ("over_budget", "summarized")
                                             for c in w.ledger))
    assert len(rec.calls) < evicting
    calls = len(rec.calls)
    mem.add({"role": "user", "content": "Note 99: crate 99 holds 990 bolts, Vendor99."})
    state = mem.summary_state
    peeked = mem.peek()
    assert mem.summary_state == state and len(mem.cache_accounting().turns) == len(windows)
    assert peeked.messages == mem.compress().messages
    assert len(rec.calls) >= calls
    back = ChatMemory.from_dict(json.loads(json.dumps(mem.to_dict())), summarize=rec)
    assert back.summary_state == mem.summary_state


def test_prefix_cache_summary_changes_only_at_compaction():
    rec = Recorder()
    mem = ChatMemory(300, scorer="idf", prefix_cache=True, summarize=rec,
                     summary_options=SummaryOptions(share=0.2))
    seen = []
    for m in _chat(60):
        mem.add(m)
        w = mem.compress()
        assert w.compressed_tokens <= 300
        seen.append((mem._window.compactions, w.summary.text if w.summary else None))
    texts_per_compaction: dict[int, set] = {}
    for compactions, text in seen:
        texts_per_compaction.setdefault(compactions, set()).add(text)
    assert all(len(t) == 1 for t in texts_per_compaction.values())
    assert len(rec.calls) <= mem._window.compactions and len(rec.calls) >= 2
    last = mem.compress()
    assert last.messages[0]["role"] == "system"
    assert last.messages[1]["content"].startswith(SUMMARY_HEADER)
    # between compactions the summary sits in the cached prefix
    turns = mem.cache_accounting().turns
    assert turns[-1].cached_messages >= 2


def test_extractive_summarizer_keeps_facts_within_budget():
    s = ExtractiveSummarizer(max_tokens=30)
    evicted = [{"role": "user", "content": "Well, okay then. My flight to Reykjavik leaves "
                                           "at 06:40 on 14 March."},
               {"role": "assistant", "content": "Sure, that sounds really nice and fun."}]
    out = s(evicted, None)
    assert "Reykjavik" in out and "06:40" in out
    from ctxkit.io.tokenizers import get_tokenizer

    assert get_tokenizer("cl100k_base").count(out) <= 30
    again = s([{"role": "user", "content": "The gate is B22."}], out)
    assert "B22" in again
    with pytest.raises(OptionError, match="max_tokens"):
        ExtractiveSummarizer(max_tokens=0)


# --- the OpenAI-compatible endpoint, served on 127.0.0.1 by the test itself


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict] = []
    status = 200

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body,
                                    "auth": self.headers.get("Authorization")})
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": "model not loaded"}')
            return
        reply = {"choices": [{"message": {"role": "assistant",
                                          "content": " Ana moved to Porto in 2021. "}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    _Handler.requests, _Handler.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_summarizer_against_a_local_server(endpoint):
    s = openai_summarizer(endpoint, model="tiny", api_key="k", timeout=10)
    text = s([{"role": "user", "content": "I moved to Porto in 2021. I am Ana."}], "Old.")
    assert text == "Ana moved to Porto in 2021."
    req = _Handler.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k"
    assert req["body"]["model"] == "tiny" and req["body"]["temperature"] == 0
    assert "Old." in req["body"]["messages"][1]["content"]
    assert "user: I moved to Porto" in req["body"]["messages"][1]["content"]
    out = compress_chat(_chat(), 300, scorer="idf", summarize=s)
    assert "Porto" in out.messages[1]["content"] and out.compressed_tokens <= 300


def test_openai_summarizer_errors_name_the_endpoint(endpoint):
    _Handler.status = 503
    s = openai_summarizer(endpoint, model="tiny", timeout=10)
    with pytest.raises(InputError, match=r"summarizer endpoint .*: HTTP 503"):
        s([{"role": "user", "content": "hi"}], None)
    with pytest.raises(OptionError, match="base_url"):
        openai_summarizer("localhost:8000", model="tiny")
    closed = openai_summarizer("http://127.0.0.1:9/v1", model="tiny", timeout=5)
    with pytest.raises(InputError, match="did not answer"):
        closed([{"role": "user", "content": "hi"}], None)


@contextmanager
def _serve(handler):
    """``handler`` served on 127.0.0.1 in a thread; yields the base URL, stops on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _redirecting(location):
    seen = []

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(302)
            self.send_header("Location", location(self.path))
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args):
            pass

    return Redirect, seen


def test_openai_summarizer_never_sends_the_key_to_another_origin(endpoint):
    other = endpoint.replace("/v1", "")  # the completion server: another port, another origin
    handler, seen = _redirecting(lambda path: other + path)
    with _serve(handler) as first:
        s = openai_summarizer(first + "/v1", model="tiny", api_key="secret", timeout=5)
        with pytest.raises(InputError, match=r"redirected to another origin \(http://127"):
            s([{"role": "user", "content": "hi"}], None)
    assert seen == [("/v1/chat/completions", "Bearer secret")]
    assert _Handler.requests == []  # the other origin saw nothing, key or not


def test_openai_summarizer_follows_a_redirect_within_its_origin():
    class Moved(_Handler):
        def do_POST(self):  # noqa: N802
            if not self.path.startswith("/old"):
                return super().do_POST()
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(307)  # keeps the method and the body
            self.send_header("Location", self.path.replace("/old", ""))
            self.send_header("Content-Length", "0")
            self.end_headers()

    _Handler.requests, _Handler.status = [], 200
    with _serve(Moved) as base:
        s = openai_summarizer(base + "/old/v1", model="tiny", api_key="k", timeout=5)
        assert s([{"role": "user", "content": "hi"}], None) == "Ana moved to Porto in 2021."
    assert _Handler.requests[-1]["path"] == "/v1/chat/completions"
    assert _Handler.requests[-1]["auth"] == "Bearer k"


class _Trickle(BaseHTTPRequestHandler):
    """Answers one byte every 0.2 s: each read is quick, the whole reply takes 20 s."""

    in_headers = False

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" \
               b"Content-Length: 100\r\n\r\n"
        body = json.dumps({"choices": [{"message": {"content": "x" * 58}}]}).encode()
        if not type(self).in_headers:
            self.wfile.write(head)
            head = b""
        try:
            for byte in head + body[:100]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:  # the client hung up: done
            pass

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("in_headers", [False, True])
def test_openai_summarizer_timeout_is_a_deadline(in_headers):
    _Trickle.in_headers = in_headers
    with _serve(_Trickle) as base:
        s = openai_summarizer(base + "/v1", model="tiny", timeout=1)
        start = time.monotonic()
        with pytest.raises(InputError, match=r"did not answer within 1 s"):
            s([{"role": "user", "content": "hi"}], None)
        assert time.monotonic() - start < 2.5


# --- SmolLM2: the [lm] extra, run as the lm scorer tests are (opt-in, model installed)


@pytest.mark.skipif(not os.environ.get("CTXKIT_TEST_LM"),
                    reason="set CTXKIT_TEST_LM=1 to run the SmolLM2 tests")
def test_smollm2_summarizer():
    from ctxkit.chat.summarizers import SmolLM2Summarizer

    try:  # the model comes from the [lm] extra; without it there is nothing to test
        s = SmolLM2Summarizer(max_tokens=48)
    except ImportError as exc:
        pytest.skip(str(exc))
    text = s([{"role": "user", "content": "My name is Ana and I moved to Porto in 2021."},
              {"role": "assistant", "content": "Porto is lovely. How is the new job?"}], None)
    assert isinstance(text, str) and text.strip() and s.calls == 1
    out = compress_chat(_chat(), 300, scorer="idf", summarize=s)
    assert out.compressed_tokens <= 300 and out.summary is not None
