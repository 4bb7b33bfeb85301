"""Embedding a Ray dataset of texts with :class:`~ctxkit.embedding.encoder.PackedEncoder` in actors.

Each actor loads the encoder once and embeds batches of ``batch_size`` texts (the encoder
packs them into token-sized rows itself). On a cluster with GPUs there is one actor per GPU
(``num_gpus=1`` each, so Ray pins each actor to its own device); otherwise CPU actors with
``cpus_per_worker`` cores each (torch's intra-op threads set to match), as many as the CPUs
allow. Vectors come out next to their ids, so the output can be written in any order.

Example:
    >>> docs = ray.data.read_json("docs.jsonl", lines=True)    # doctest: +SKIP
    >>> vecs = embed(docs, column="text", id_column="id")       # doctest: +SKIP
    >>> vecs.write_parquet("vectors/")                           # doctest: +SKIP
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ctxkit.distributed.blocks import set_shuffle
from ctxkit.distributed.cluster import cluster_cpus, cluster_gpus, require_ray
from ctxkit.distributed.errors import WorkerInputError, raise_worker_errors
from ctxkit.distributed.rows import ROW, index_rows
from ctxkit.embedding.options import EmbedOptions
from ctxkit.errors import InputError, OptionError
from ctxkit.options import bad_option

__all__ = ["embed"]

_CHUNK = "_chunk"  # row // chunk_size: the texts one encode() call gets, as on one machine
_D = EmbedOptions()


def _default_encoder(**kwargs: Any) -> Any:
    from ctxkit.embedding.encoder import PackedEncoder

    return PackedEncoder(**kwargs)


class _EmbedActor:
    """One encoder per actor process; ``__call__`` embeds whole chunks of rows."""

    def __init__(
        self, factory: Callable[..., Any], encoder_kwargs: dict[str, Any], column: str,
        id_column: str, output_column: str, normalize: bool | None, threads: int | None,
        carry_columns: list[str] = (),
    ) -> None:
        self.encoder = factory(**encoder_kwargs)
        if threads and "torch" in sys.modules:
            import torch

            torch.set_num_threads(threads)  # one actor per core group, no oversubscription
        self.column, self.id_column = column, id_column
        self.output_column, self.normalize = output_column, normalize
        self.carry = list(carry_columns)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = batch[self.column].tolist()
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                name = "row" if self.id_column == ROW else self.id_column
                rid = batch[self.id_column].tolist()[i]
                raise WorkerInputError(f"{name} {rid!r}: column {self.column!r} must hold "
                                       f"text, got {type(t).__name__}", rid)
        kwargs = {} if self.normalize is None else {"normalize": self.normalize}
        # rows in input order, one encode() per chunk (the block holds whole chunks)
        order = np.argsort(np.asarray(batch[ROW]), kind="stable")
        cuts = np.flatnonzero(np.diff(np.asarray(batch[_CHUNK])[order])) + 1
        groups = np.split(order, cuts) if order.size else []
        parts = [np.asarray(self.encoder.encode([texts[i] for i in g], **kwargs), np.float32)
                 for g in groups if len(g)]
        vecs = np.concatenate(parts) if parts else np.zeros((0, getattr(
            self.encoder, "dim", 0)), np.float32)
        if vecs.shape[0] != len(texts):
            raise RuntimeError(f"encoder returned {vecs.shape[0]} vectors for {len(texts)} texts")
        out = {c: np.asarray(batch[c])[order] for c in (self.id_column, *self.carry)}
        out[self.output_column] = vecs
        return out


def embed(
    ds: Any,
    column: str = "text",
    *,
    id_column: str | None = None,
    model: Any = _D.model,
    device: str | None = None,
    dtype: str = _D.dtype,
    batch_tokens: int | None = _D.batch_tokens,
    chunk_size: int | None = None,
    normalize: bool | None = _D.normalize,
    options: EmbedOptions | None = None,
    encoder: Callable[..., Any] | None = None,
    encoder_kwargs: dict[str, Any] | None = None,
    num_workers: int | None = None,
    num_gpus: int | None = None,
    cpus_per_worker: int = 1,
    output_column: str = "embedding",
    carry_columns: list[str] = (),
) -> Any:
    """Embed ``column`` of a Ray dataset; returns a dataset of ``(id, embedding)`` rows.

    The options are :class:`~ctxkit.embedding.options.EmbedOptions` (keywords or
    ``options``), as for :class:`~ctxkit.embedding.encoder.PackedEncoder`. Rows are cut into
    chunks of ``chunk_size`` in input order and each chunk is one ``encode`` call, as
    ``ctxkit embed`` does on one machine, so the vectors are the same bits where torch runs
    on as many threads on both sides: a CPU actor runs ``cpus_per_worker`` threads, and on
    some CPUs another thread count changes the last bits, about 1e-6. ``device`` defaults to
    ``cuda`` on a cluster with GPUs, else ``cpu``.

    ``id_column`` is carried through as the id; without it the id is the row number
    (``_row``, from one ordered numbering pass). ``encoder`` builds another encoder in each
    actor (called as ``encoder(model=model, device=device, **encoder_kwargs)``); anything
    with ``encode(texts) -> [n, dim] array`` works. ``num_gpus`` defaults to the cluster's
    GPUs: then one actor per GPU; with none, ``num_workers`` CPU actors (default: CPUs //
    ``cpus_per_worker``). Embeddings are float32 of shape ``[dim]`` per row; the
    ``carry_columns`` are copied next to them.

    Example:
        >>> out = embed(ray.data.from_items([{"text": "hello"}]))  # doctest: +SKIP
        >>> out.take(1)[0]["embedding"].shape                      # doctest: +SKIP
        (384,)
    """
    ray = require_ray()
    gpus = cluster_gpus() if num_gpus is None else int(num_gpus)
    opts = EmbedOptions.resolve(
        options, model=model, dtype=dtype, batch_tokens=batch_tokens,
        chunk_size=_D.chunk_size if chunk_size is None else chunk_size, normalize=normalize,
        **({} if device is None else {"device": device}))
    if encoder is None and encoder_kwargs:  # options of the default encoder by name
        opts = opts.replace(**encoder_kwargs)
    if opts.device == "auto":
        opts = opts.replace(device="cuda" if gpus else "cpu")
    if opts.model is not None and not isinstance(opts.model, str):
        raise OptionError("model", "on Ray, model must be a directory every node can read, "
                          "not a loaded model object")
    names = ds.columns() or []
    if column not in names:
        raise InputError(f"column {column!r} is not in the dataset (columns: {names})")
    for name, col in [("id_column", id_column)] + [("carry_columns", c) for c in carry_columns]:
        if col is not None and col not in names:
            raise InputError(f"{name} {col!r} is not in the dataset (columns: {names})")
    if cpus_per_worker < 1:
        raise bad_option("cpus_per_worker", f" must be positive, got {cpus_per_worker}")
    keep = list(dict.fromkeys(c for c in (id_column, column, *carry_columns) if c))
    if id_column == ROW:  # already numbered (ctxkit embed --ray): keep those numbers
        indexed, n = ds.select_columns(keep), ds.count()
    else:
        indexed, n = index_rows(ds.select_columns(keep))
    raise_worker_errors(indexed)
    set_shuffle(indexed, "auto", n)
    id_column = id_column or ROW
    chunked = indexed.map_batches(_chunk_of, fn_kwargs={"size": opts.chunk_size},
                                  batch_format="numpy")
    if encoder is None:
        factory, kwargs = _default_encoder, {"options": opts}
    else:
        factory = encoder
        kwargs = {"model": opts.model, "device": opts.device, **(encoder_kwargs or {})}
    if gpus > 0:
        size, resources, threads = num_workers or gpus, {"num_gpus": 1}, None
    else:
        size = num_workers or max(1, cluster_cpus() // cpus_per_worker)
        resources, threads = {"num_cpus": cpus_per_worker}, cpus_per_worker
    if num_workers is None:  # an actor starts by loading the model: give each 2+ chunks
        size = max(1, min(size, -(-n // (2 * opts.chunk_size))))
    # Whole chunks per block: a range-partitioned sort on the chunk number. It runs to the
    # end first, so the actors (which may hold every CPU) never wait on shuffle tasks.
    grouped = chunked.sort(_CHUNK).materialize()
    return grouped.map_batches(
        _EmbedActor,
        fn_constructor_kwargs=dict(factory=factory, encoder_kwargs=kwargs, column=column,
                                   id_column=id_column, output_column=output_column,
                                   normalize=opts.normalize, threads=threads,
                                   carry_columns=list(carry_columns)),
        batch_size=None,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=size),
        **resources,
    )

def _chunk_of(batch: dict[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
    return {**batch, _CHUNK: np.asarray(batch[ROW], np.int64) // size}
