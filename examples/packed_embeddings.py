"""Embed many short texts with packed rows; same vectors as SentenceTransformer.encode.

Run: python examples/packed_embeddings.py
"""

import numpy as np

import ctxkit

texts = [f"Question {i}: how many apples are left if you eat {i} of them?" for i in range(200)]
encoder = ctxkit.PackedEncoder()  # bundled all-MiniLM-L6-v2, offline; device="auto"
vectors = encoder.encode(texts)
print(vectors.shape, encoder.last_stats.to_dict())

reference = encoder.backbone.model.encode(texts[:16])  # the same model, unpacked
cosine = (vectors[:16] * reference).sum(1) / (
    np.linalg.norm(vectors[:16], axis=1) * np.linalg.norm(reference, axis=1))
print(f"min cosine to SentenceTransformer.encode: {cosine.min():.7f}")
