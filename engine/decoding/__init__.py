"""Decoding: requests, model loading, one Sequence per request, the schedulers (one step,
continuous batching), the typed trace and output validation."""
