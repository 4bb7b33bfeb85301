"""Remove exact and near-duplicate documents, and see why each one went.

Run: python examples/dedup_corpus.py
"""

import ctxkit

docs = [
    "The quick brown fox jumps over the lazy dog.",
    "the quick  brown fox jumps over the LAZY dog.",     # exact after case/space folding
    "The quick brown fox jumped over the lazy dog!",      # near-duplicate
    "Packing puts many short sequences into one context window.",
    "A completely different sentence about tokenizers.",
]
res = ctxkit.dedup(docs, method=["exact", "minhash"])
print("kept:", res.keep.tolist())
for i, rep in enumerate(res.duplicate_of):
    if rep >= 0:
        print(f"removed {i} ({res.method[i]}) as a duplicate of {rep} "
              f"(similarity {res.similarity[i]:.2f})")
