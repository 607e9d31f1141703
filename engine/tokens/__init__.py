"""The token side: token bytes per tokenizer family, re-tokenization of continuations,
the lazy per-state token index, and per-tokenizer tables for trigger texts."""
