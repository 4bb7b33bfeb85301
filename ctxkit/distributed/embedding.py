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

from ctxkit.distributed.cluster import cluster_cpus, cluster_gpus, require_ray
from ctxkit.distributed.rows import ROW, index_rows

__all__ = ["embed"]


def _default_encoder(**kwargs: Any) -> Any:
    from ctxkit.embedding.encoder import PackedEncoder

    return PackedEncoder(**kwargs)


class _EmbedActor:
    """One encoder per actor process; ``__call__`` embeds one batch."""

    def __init__(
        self, factory: Callable[..., Any], encoder_kwargs: dict[str, Any], column: str,
        id_column: str, output_column: str, normalize: bool | None, threads: int | None,
    ) -> None:
        self.encoder = factory(**encoder_kwargs)
        if threads and "torch" in sys.modules:
            import torch

            torch.set_num_threads(threads)  # one actor per core group, no oversubscription
        self.column, self.id_column = column, id_column
        self.output_column, self.normalize = output_column, normalize

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = batch[self.column].tolist()
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                name = "row" if self.id_column == ROW else self.id_column
                raise ValueError(f"{name} {batch[self.id_column].tolist()[i]!r}: column "
                                 f"{self.column!r} must hold text, got {type(t).__name__}")
        kwargs = {} if self.normalize is None else {"normalize": self.normalize}
        vecs = np.asarray(self.encoder.encode(texts, **kwargs), dtype=np.float32)
        if vecs.shape[0] != len(texts):
            raise RuntimeError(f"encoder returned {vecs.shape[0]} vectors for {len(texts)} texts")
        return {self.id_column: batch[self.id_column], self.output_column: vecs}


def embed(
    ds: Any,
    column: str = "text",
    *,
    id_column: str | None = None,
    model: Any = None,
    device: str | None = None,
    encoder: Callable[..., Any] | None = None,
    encoder_kwargs: dict[str, Any] | None = None,
    batch_size: int = 1024,
    num_workers: int | None = None,
    num_gpus: int | None = None,
    cpus_per_worker: int = 1,
    normalize: bool | None = None,
    output_column: str = "embedding",
) -> Any:
    """Embed ``column`` of a Ray dataset; returns a dataset of ``(id, embedding)`` rows.

    ``id_column`` is carried through as the id; without it the id is the row number
    (``_row``, from one ordered numbering pass). ``encoder`` builds the encoder in each
    actor (default :class:`ctxkit.embed.PackedEncoder`, called as
    ``encoder(model=model, device=device, **encoder_kwargs)``); anything with
    ``encode(texts) -> [n, dim] array`` works. ``num_gpus`` defaults to the cluster's GPUs:
    then one actor per GPU; with none, ``num_workers`` CPU actors (default: CPUs //
    ``cpus_per_worker``). Embeddings are float32 of shape ``[dim]`` per row.

    Example:
        >>> out = embed(ray.data.from_items([{"text": "hello"}]))  # doctest: +SKIP
        >>> out.take(1)[0]["embedding"].shape                      # doctest: +SKIP
        (384,)
    """
    ray = require_ray()
    names = ds.columns() or []
    if column not in names:
        raise ValueError(f"column {column!r} is not in the dataset (columns: {names})")
    if id_column is not None and id_column not in names:
        raise ValueError(f"id_column {id_column!r} is not in the dataset (columns: {names})")
    if batch_size < 1 or cpus_per_worker < 1:
        raise ValueError("batch_size and cpus_per_worker must be positive")
    gpus = cluster_gpus() if num_gpus is None else int(num_gpus)
    if id_column is None:
        ds, _ = index_rows(ds)
        id_column = ROW
    ds = ds.select_columns([id_column, column])
    kwargs = dict(encoder_kwargs or {})
    if encoder is None:
        encoder = _default_encoder
        kwargs.setdefault("model", model)
        kwargs.setdefault("device", device or ("cuda" if gpus else "cpu"))
    if gpus > 0:
        size, resources, threads = num_workers or gpus, {"num_gpus": 1}, None
    else:
        size = num_workers or max(1, cluster_cpus() // cpus_per_worker)
        resources, threads = {"num_cpus": cpus_per_worker}, cpus_per_worker
    return ds.map_batches(
        _EmbedActor,
        fn_constructor_kwargs=dict(factory=encoder, encoder_kwargs=kwargs, column=column,
                                   id_column=id_column, output_column=output_column,
                                   normalize=normalize, threads=threads),
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=size),
        **resources,
    )
