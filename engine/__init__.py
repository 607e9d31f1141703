"""The engine: compilation, grammar backends, decoding, runtimes, serving, analysis.
Knows nothing of the UI; its output is a plain, JSON-serializable trace."""
