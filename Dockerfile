# The same environment as `make run`, built by the same script (scripts/setup.sh), so the
# two cannot drift. CPU by default; see README for a CUDA image.
FROM python:3.11-slim-bookworm

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    CFSM_CACHE_DIR=/data/cache \
    HF_HUB_OFFLINE=1

# gcc and binutils: scripts/llama_glibc_compat.py builds a small shim for llama.cpp's libraries
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends make curl gcc libc6-dev binutils && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md Makefile ./
COPY scripts ./scripts
COPY engine ./engine
COPY cfsm ./cfsm
COPY viz ./viz
COPY app ./app
COPY assets ./assets

# chromium is only needed by the browser tests, not by the server
RUN CFSM_SKIP_CHROMIUM=1 bash scripts/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip
# read the embedded GGUF's tokenizer once at build time so the container starts in seconds
# (llama.cpp decodes the GGUF itself; --runtime transformers converts the weights on first use)
RUN .venv/bin/python -c "from engine.decoding.model import load_tokenizer; load_tokenizer()"

EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD curl -fsS http://127.0.0.1:7860/ >/dev/null || exit 1
CMD [".venv/bin/python", "-m", "cfsm", "serve", "--host", "0.0.0.0", "--port", "7860"]
