"""Pack instruction data for supervised fine-tuning: prompt tokens masked, no cross-talk.

Run: python examples/pack_for_sft.py
"""

import ctxkit
from ctxkit.demo import demo_records
from ctxkit.io.records import format_alpaca_prompt

tok = ctxkit.get_tokenizer("cl100k_base")
records = demo_records(200, seed=0)  # or ctxkit.read_records("data.jsonl", template="alpaca")

sequences, masks = [], []
for rec in records:
    prompt = tok.encode(format_alpaca_prompt(rec["instruction"], rec["input"]))
    answer = tok.encode(rec["output"])
    sequences.append(prompt + answer)
    masks.append([0] * len(prompt) + [1] * len(answer))  # loss only on the answer

batch = ctxkit.pack(sequences, capacity=2048, separator_id=tok.eos_id, completion_mask=masks,
                    overflow="truncate", seed=0)
print(f"{len(sequences)} examples -> {batch.n_windows} windows of 2048 "
      f"(lower bound {batch.lower_bound}, utilization {batch.utilization:.1%})")
tensors = batch.to_torch()  # input_ids, labels, position_ids, segment_ids
mask = batch.attention_mask(causal=True)  # block-diagonal [windows, 1, 2048, 2048], on demand
print({k: tuple(v.shape) for k, v in tensors.items() if hasattr(v, "shape")})
