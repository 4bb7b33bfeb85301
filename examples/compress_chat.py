"""Fit a long chat history into a token budget, keeping what the last question needs.

Run: python examples/compress_chat.py
"""

import ctxkit

messages = [{"role": "system", "content": "You are a helpful travel assistant."}]
for day in range(1, 30):
    messages.append({"role": "user", "content": f"Day {day}: any ideas for a walk nearby?"})
    messages.append({"role": "assistant", "content": f"On day {day} try the river path; "
                     "it is flat, shaded and about five kilometres long."})
    messages.append({"role": "user", "content": "thanks!"})
messages.insert(20, {"role": "user", "content": "My hotel booking code is QX-4471."})
messages.append({"role": "user", "content": "What was my hotel booking code again?"})

out = ctxkit.compress_chat(messages, budget=300)
print(f"{out.original_tokens} -> {out.compressed_tokens} tokens (budget 300)")
print("kept the booking code:", any("QX-4471" in m["content"] for m in out.messages))
print("ledger entries:", len(out.ledger))
