"""The engine as one object (service.py) with its bounded caches and the killable compile
workers (compile_workers.py) that keep a pathological constraint from hurting other users."""
