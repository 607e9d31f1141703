"""The token side: token bytes per tokenizer family, re-tokenization of continuations,
the lazy per-state token index (the vocabulary split once per process: vocab_split.py),
and per-tokenizer tables for trigger texts."""
