"""Scale-out adapters on Ray Data: the same stages as the single-machine API, on a cluster.

Optional: needs the ``ray`` extra (``pip install 'ctxkit[ray]'``). Importing this package
does not import Ray; the first stage you call does, and says how to install it if missing.

- :func:`minhash_dedup` (``ray.data.Dataset`` of texts -> kept rows + duplicate report),
  identical to ``ctxkit.dedup(texts, method="minhash")`` on the same rows and seed;
- :func:`embed` (texts -> vectors with their ids, an actor pool of ``PackedEncoder``);
- :func:`pack` (token sequences -> packed windows, per block or with a global plan);
- :func:`init_ray` / :func:`local_cluster`; :func:`run_command` backs ``ctxkit ... --ray``.

Example:
    >>> import ray, ctxkit.distributed as cd                     # doctest: +SKIP
    >>> cd.init_ray("auto")                                        # doctest: +SKIP
    >>> out = cd.minhash_dedup(ray.data.read_parquet("s3://bucket/docs/"))  # doctest: +SKIP
    >>> out.kept.write_parquet("s3://bucket/dedup/")               # doctest: +SKIP
"""

from __future__ import annotations

from ctxkit._lazy import lazy_exports

_EXPORTS = {
    "RayMissingError": "ctxkit.distributed.cluster",
    "require_ray": "ctxkit.distributed.cluster",
    "init_ray": "ctxkit.distributed.cluster",
    "local_cluster": "ctxkit.distributed.cluster",
    "cluster_gpus": "ctxkit.distributed.cluster",
    "with_row_index": "ctxkit.distributed.rows",
    "minhash_dedup": "ctxkit.distributed.minhash",
    "DistributedDedup": "ctxkit.distributed.minhash",
    "pair_similarity": "ctxkit.distributed.minhash",
    "embed": "ctxkit.distributed.embedding",
    "pack": "ctxkit.distributed.packing",
    "window_utilization": "ctxkit.distributed.packing",
    "run_command": "ctxkit.distributed.command",
    "WorkerInputError": "ctxkit.distributed.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("ctxkit.distributed", _EXPORTS, globals())
