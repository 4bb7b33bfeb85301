"""Summarizers for ``compress_chat(summarize=...)`` and ``ChatMemory(summarize=...)``.

Each is a callable ``(evicted_messages, previous_summary) -> str`` that folds the newly evicted
messages into the running summary (:mod:`ctxkit.chat.summary_placement` places it in the window):

- :class:`ExtractiveSummarizer`: no model. It keeps the most informative sentences of the
  evicted turns and of the previous summary (self-information per token as the ``idf`` scorer
  counts it, with a bonus for numbers and capitalised names, the facts a later question asks
  for) up to ``max_tokens``, in conversation order. Fast and deterministic: the benchmark's
  default.
- :class:`SmolLM2Summarizer`: an abstractive summary written by SmolLM2-135M-Instruct, the
  model the ``lm`` scorer loads (``ctxkit[lm]``; converted once from the wheel's GGUF file,
  never downloaded), greedy decoding on CPU. Long evictions are folded in chunks of
  ``chunk_tokens``, each refining the summary so far.
- :func:`openai_summarizer`: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM,
  llama.cpp server, Ollama, hosted APIs), called with the standard library's ``urllib``;
  a failed call is an :class:`~ctxkit.errors.InputError` naming the endpoint. A redirect to
  another origin is refused (the API key never leaves the endpoint's origin) and ``timeout``
  bounds the whole request, so a server that trickles its reply cannot hang a chat.

Example:
    >>> s = ExtractiveSummarizer(max_tokens=13)
    >>> s([{"role": "user", "content": "Hi there. I moved to Porto in May 2021."}], None)
    'user: I moved to Porto in May 2021.'
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.text.units import split_units
from ctxkit.errors import InputError
from ctxkit.io.messages import USER_ROLES, message_text, raw_role
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import bad_option

__all__ = ["ExtractiveSummarizer", "OpenAISummarizer", "SmolLM2Summarizer",
           "openai_summarizer", "summary_prompt"]

_FACT = re.compile(r"\d+|(?<=\s)[A-Z][a-z]")  # numbers, and capitalised words inside a sentence
SUMMARY_INSTRUCTIONS = (
    "You keep a running summary of a conversation. Fold the new turns into the summary. "
    "Keep every name, date, number, place and stated fact; drop greetings and small talk. "
    "Answer with the summary only, at most {words} words.")


def _check_tokens(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_option(name, f" must be an integer >= 1, got {value!r}")
    return value


def _speaker(m: Mapping[str, Any]) -> str:
    return "user" if raw_role(m) in USER_ROLES else raw_role(m)


def _transcript(evicted: Sequence[Mapping[str, Any]]) -> list[str]:
    """One ``role: text`` line per message with text."""
    lines = []
    for i, m in enumerate(evicted):
        text = " ".join(message_text(m, i).split())
        if text:
            lines.append(f"{_speaker(m)}: {text}")
    return lines


class ExtractiveSummarizer:
    """The most informative sentences of the evicted turns and of the previous summary, within
    ``max_tokens`` (counted with ``tokenizer``), one ``role: sentences`` line per message.

    Example:
        >>> s = ExtractiveSummarizer(max_tokens=18)
        >>> s([{"role": "assistant", "content": "Sure. The code is 4417."}], "user: Ana, 31.")
        'user: Ana, 31.\\nassistant: The code is 4417.'
    """

    def __init__(self, max_tokens: int = 256, *, tokenizer: str | Tokenizer = "cl100k_base",
                 fact_weight: float = 0.5):
        self.max_tokens = _check_tokens(max_tokens, "max_tokens")
        self.tok = resolve_tokenizer(tokenizer)
        self.fact_weight = float(fact_weight)
        self.scorer = IdfScorer()

    def __call__(self, evicted: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        # units: (line, speaker, sentence); previous summary lines stay whole
        units: list[tuple[int, str, str]] = []
        lines = [ln for ln in (previous or "").splitlines() if ln.strip()]
        for n, ln in enumerate(lines):
            units.append((n, "", ln))
        for n, m in enumerate(evicted, start=len(lines)):
            text = " ".join(message_text(m, n).split())
            units += [(n, _speaker(m), u) for u, _ in split_units(text) if u.strip()]
        if not units:
            return previous or ""
        texts = [u for _, _, u in units]
        tokens = np.array([max(1, self.tok.count(t)) for t in texts], dtype=np.float64)
        bits = np.array([b.sum() for b in self.scorer.information(texts)])
        facts = np.array([len(_FACT.findall(t)) for t in texts], dtype=np.float64)
        score = bits / tokens * (1.0 + self.fact_weight * np.minimum(facts / tokens * 4, 1.0))
        chosen, left = set(), self.max_tokens
        for k in np.argsort(-score, kind="stable"):
            # the role prefix and line break of a new line cost about 3 tokens
            need = tokens[k] + (3 if units[k][1] else 1)
            if need <= left:
                chosen.add(int(k))
                left -= int(need)
        out: dict[int, list[str]] = {}
        speaker = {n: who for n, who, _ in units}
        for k in sorted(chosen):
            out.setdefault(units[k][0], []).append(texts[k])
        return "\n".join((f"{speaker[n]}: " if speaker[n] else "") + " ".join(parts)
                         for n, parts in sorted(out.items()))


def summary_prompt(evicted: Sequence[Mapping[str, Any]], previous: str | None, *,
                   words: int = 150) -> list[dict[str, str]]:
    """The chat messages asking a model to fold ``evicted`` into ``previous``.

    Example:
        >>> p = summary_prompt([{"role": "user", "content": "I am Ana."}], None, words=50)
        >>> p[1]["content"].splitlines()[-1]
        'user: I am Ana.'
    """
    system = SUMMARY_INSTRUCTIONS.format(words=words)
    head = f"Summary so far:\n{previous}\n\n" if previous else ""
    return [{"role": "system", "content": system},
            {"role": "user", "content": head + "New turns:\n" + "\n".join(_transcript(evicted))}]


def _chunks(evicted: Sequence[Mapping[str, Any]], limit: int, count) -> list[list[Any]]:
    """``evicted`` in consecutive runs of at most ``limit`` tokens (a longer message alone)."""
    out: list[list[Any]] = [[]]
    used = 0
    for i, m in enumerate(evicted):
        n = count(message_text(m, i))
        if out[-1] and used + n > limit:
            out.append([])
            used = 0
        out[-1].append(m)
        used += n
    return [c for c in out if c]


class SmolLM2Summarizer:
    """A running summary written by SmolLM2-135M-Instruct (``ctxkit[lm]``) or any local
    transformers causal-LM directory given as ``model``; at most ``max_tokens`` new tokens,
    greedy. Evicted turns past ``chunk_tokens`` are folded in chunk by chunk.

    Example:
        >>> s = SmolLM2Summarizer(max_tokens=64)  # doctest: +SKIP
        >>> s([{"role": "user", "content": "I moved to Porto in 2021."}], None)  # doctest: +SKIP
    """

    def __init__(self, max_tokens: int = 128, *, model: str | Path | None = None,
                 device: str = "cpu", chunk_tokens: int = 1024):
        from ctxkit.compression.scoring.smollm2 import smollm2_dir

        self.max_tokens = _check_tokens(max_tokens, "max_tokens")
        self.chunk_tokens = _check_tokens(chunk_tokens, "chunk_tokens")
        self.model_dir = Path(model) if model is not None else smollm2_dir()
        self.device = device
        self.calls = 0  # generations run, for cost reports

    def __call__(self, evicted: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        import torch

        from ctxkit.compression.scoring.lm import _load_causal_lm

        model, tok = _load_causal_lm(str(self.model_dir), self.device)
        summary = previous
        for chunk in _chunks(evicted, self.chunk_tokens, lambda t: len(tok.encode(t))):
            prompt = tok.apply_chat_template(
                summary_prompt(chunk, summary, words=int(self.max_tokens * 0.7)),
                add_generation_prompt=True, tokenize=False)
            ids = tok(prompt, return_tensors="pt", add_special_tokens=False).to(self.device)
            with torch.no_grad():
                out = model.generate(**ids, max_new_tokens=self.max_tokens, do_sample=False,
                                     pad_token_id=tok.eos_token_id)
            self.calls += 1
            text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
            summary = text.strip() or summary
        return summary or ""


def _origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port of ``url`` (the default port when none is written)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80,
                                                                  "https": 443}.get(scheme)


class _CrossOrigin(Exception):
    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within the request's origin (scheme, host and port): a 307 or 308
    resends the POST with its body, others as ``urllib`` does. A redirect to another origin
    raises :class:`_CrossOrigin`, so the ``Authorization`` header is never sent elsewhere."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            raise _CrossOrigin(newurl)
        if code in (307, 308) and req.get_method() == "POST":
            return urllib.request.Request(newurl, data=req.data, headers=dict(req.header_items()),
                                          origin_req_host=req.origin_req_host, unverifiable=True,
                                          method="POST")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Deadline:
    """A total time limit for one request: when it passes, every socket the request opened
    is shut down, which ends a blocked read at once (a socket timeout bounds only one read,
    and a server sending a byte a second never trips it)."""

    def __init__(self, seconds: float):
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self.expired:
                sock.close()
                raise TimeoutError("deadline passed")
            self._socks.append(sock.dup())  # a dup outlives the TLS wrapper's detach

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._socks:
                sock.close()
            self._socks.clear()


def _watched(base: type, deadline: _Deadline) -> type:
    """``base`` (an ``http.client`` connection class) registering its socket with
    ``deadline`` as soon as it is connected."""

    class Connection(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            create = self._create_connection

            def created(*a: Any, **kw: Any) -> socket.socket:
                sock = create(*a, **kw)
                deadline.watch(sock)
                return sock

            self._create_connection = created

    return Connection


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    http_conn = _watched(http.client.HTTPConnection, deadline)

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(http_conn, req)

    handlers: list[Any] = [_SameOriginRedirects(), HTTP()]
    if hasattr(http.client, "HTTPSConnection"):
        https_conn = _watched(http.client.HTTPSConnection, deadline)

        class HTTPS(urllib.request.HTTPSHandler):
            def https_open(self, req: Any) -> Any:
                return self.do_open(https_conn, req, context=self._context)

        handlers.append(HTTPS())
    return urllib.request.build_opener(*handlers)


class OpenAISummarizer:
    """A running summary from an OpenAI-compatible chat endpoint (see :func:`openai_summarizer`).
    """

    def __init__(self, base_url: str, *, model: str, api_key: str | None = None,
                 max_tokens: int = 256, timeout: float = 60.0, chunk_tokens: int = 6000):
        if not isinstance(base_url, str) or not re.match(r"https?://", base_url):
            raise bad_option("base_url", f" must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise bad_option("model", f" must be a model name, got {model!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise bad_option("timeout", f" must be a positive number of seconds, got {timeout!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, float(timeout)
        self.max_tokens = _check_tokens(max_tokens, "max_tokens")
        self.chunk_tokens = _check_tokens(chunk_tokens, "chunk_tokens")
        self.tok = resolve_tokenizer("cl100k_base")

    def __call__(self, evicted: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        summary = previous
        for chunk in _chunks(evicted, self.chunk_tokens, self.tok.count):
            summary = self._complete(summary_prompt(chunk, summary,
                                                    words=int(self.max_tokens * 0.7)))
        return summary or ""

    def _complete(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.model, "messages": messages,
                           "max_tokens": self.max_tokens, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        where = f"summarizer endpoint {self.url}"
        deadline = _Deadline(self.timeout)
        try:
            with deadline, _opener(deadline).open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except _CrossOrigin as exc:
            raise InputError(f"{where} redirected to another origin ({exc.url}); not followed, "
                             "so the API key stays with the endpoint: give the final URL as "
                             "base_url") from None
        except urllib.error.HTTPError as exc:
            if deadline.expired:
                raise InputError(f"{where} did not answer within {self.timeout:g} s") from None
            detail = exc.read()[:200].decode("utf-8", "replace").replace("\n", " ")
            raise InputError(f"{where}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            if deadline.expired:
                raise InputError(f"{where} did not answer within {self.timeout:g} s") from None
            reason = getattr(exc, "reason", exc)
            raise InputError(f"{where} did not answer: {reason}") from None
        try:
            text = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise InputError(f"{where}: not a chat completion: {raw[:200]!r}") from None
        if not isinstance(text, str):
            raise InputError(f"{where}: the completion has no text content")
        return text.strip()


def openai_summarizer(base_url: str, *, model: str, api_key: str | None = None,
                      max_tokens: int = 256, timeout: float = 60.0) -> OpenAISummarizer:
    """A summarizer calling ``POST {base_url}/chat/completions`` of any OpenAI-compatible
    server: vLLM or SGLang (``http://host:8000/v1``), llama.cpp's server, Ollama
    (``http://localhost:11434/v1``) or a hosted API (with ``api_key``). Greedy, at most
    ``max_tokens`` per call. ``timeout`` is a deadline in seconds for each whole request
    (connect, send, headers and body), not for one socket read: a server that trickles its
    reply is cut off when it passes. Redirects are followed only within the endpoint's origin
    (scheme, host and port); a redirect elsewhere is an error, so ``api_key`` is only ever
    sent to that origin. An HTTP error, a missed deadline, a cross-origin redirect or a
    reply that is not a chat completion raises :class:`~ctxkit.errors.InputError` naming the
    endpoint.

    Example:
        >>> s = openai_summarizer("http://localhost:11434/v1", model="llama3.2")
        >>> s.url
        'http://localhost:11434/v1/chat/completions'
    """
    return OpenAISummarizer(base_url, model=model, api_key=api_key, max_tokens=max_tokens,
                            timeout=timeout)


def summarizer_from_spec(spec: str, *, model: str | None = None) -> Any:
    """The summarizer a command line names: ``extractive`` (no model), ``smollm2`` (the
    ``[lm]`` extra's offline model) or the base URL of an OpenAI-compatible server (with
    ``model``, the served model's name).

    Example:
        >>> type(summarizer_from_spec("extractive")).__name__
        'ExtractiveSummarizer'
        >>> summarizer_from_spec("http://localhost:8000/v1", model="qwen").url
        'http://localhost:8000/v1/chat/completions'
    """
    if spec == "extractive":
        return ExtractiveSummarizer()
    if spec == "smollm2":
        return SmolLM2Summarizer()
    if spec.startswith(("http://", "https://")):
        if not model:
            raise bad_option("summary_model", " is needed with an endpoint URL: the name of "
                                              "the model the server runs")
        return openai_summarizer(spec, model=model)
    raise bad_option("summarize", f" must be extractive, smollm2 or an http(s):// endpoint "
                                  f"URL, got {spec!r}")
