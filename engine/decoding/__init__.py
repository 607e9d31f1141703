"""Decoding: requests, model loading (model.py; the runtimes' registry in model_runtimes.py,
model files in model_files.py), one Sequence per request, the schedulers (one step,
continuous batching), the typed trace and output validation."""
