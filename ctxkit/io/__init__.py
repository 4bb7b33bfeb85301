"""Input and output at the edges: records (JSONL/JSON/Parquet), tokenizers, chat messages."""
