"""Chat histories: :func:`ctxkit.compress_chat` (``pipeline``; its steps in ``selection``, its
result in ``result``, per-message ``features``), :class:`ctxkit.ChatMemory` (``memory``) and
the message formats it keeps (``history``), the prefix-cache window (``prefix_window``),
prompt-cache billing (``billing``), and summaries of evicted turns: where they go
(``summary_placement``) and who writes them (``summarizers``)."""
