"""Runtimes that run a model's forward passes behind one `Runner` contract (base.py):
PyTorch through transformers (CPU or CUDA) and llama.cpp (GGUF on the CPU)."""

# which runtimes there are, and which one `auto` picks: engine/decoding/model_runtimes.py
