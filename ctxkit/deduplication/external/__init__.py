"""Out-of-core dedup: exact and MinHash dedup of corpora larger than memory, on one machine,
with exactly the in-memory decisions.

The stages, in order: :mod:`.scan` streams the records once into spill files (texts, ids
and locations, exact digests, line hashes); :mod:`.exact` groups digests a partition at a
time; :mod:`.boiler` counts template lines the same way; :mod:`.bands` signs the survivors
and writes one run of band keys per band; :mod:`.candidates` buckets each run a partition
at a time (a star around the hub in a large bucket) and makes the candidates unique a
range at a time; :mod:`.verify` estimates them from signature rows read back in windows and
scores the uncertain ones exactly from texts read back by offset; :mod:`.stage` links and
clusters as the in-memory stage does; :mod:`.outcome` chains the stages and yields the
report's entries. :mod:`.spill` holds the files, :mod:`.budget` the sizes. The job that
reads and writes files is :mod:`ctxkit.jobs.dedup_external`; costs and the projection to
larger corpora are in ``docs/dedup.md``.
"""
