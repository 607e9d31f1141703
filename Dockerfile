# The same environment as `make run`, built by the same script (scripts/setup.sh), so the
# two cannot drift. CPU by default; see docs/install.md for a CUDA image.
#
# Two stages: the build stage runs setup.sh, which installs gcc, libc6-dev and binutils on
# this glibc 2.36 base to patch llama.cpp's prebuilt libraries (scripts/llama_glibc_compat.py);
# the final image takes the finished /app (the .venv with the patched libraries) and only
# the packages it runs with, so no compiler is left in it. Same base in both stages, so the
# venv's interpreter path is the same.
FROM python:3.11-slim-bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive CFSM_CACHE_DIR=/data/cache HF_HUB_OFFLINE=1
WORKDIR /app
COPY pyproject.toml README.md Makefile ./
COPY scripts ./scripts
COPY engine ./engine
COPY cfsm ./cfsm
COPY viz ./viz
COPY app ./app
COPY assets ./assets
# chromium is only needed by the browser tests, not by the server
RUN CFSM_SKIP_CHROMIUM=1 bash scripts/setup.sh && rm -rf /root/.cache/pip
# read the embedded GGUF's tokenizer once at build time so the container starts in seconds
# (llama.cpp decodes the GGUF itself; --runtime transformers converts the weights on first use)
RUN .venv/bin/python -c "from engine.decoding.model import load_tokenizer; load_tokenizer()"

FROM python:3.11-slim-bookworm
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    CFSM_CACHE_DIR=/data/cache \
    HF_HUB_OFFLINE=1
# what the server runs with: Graphviz dot (the graphs), libgomp1 (llama.cpp's OpenMP), curl
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends graphviz libgomp1 curl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app /app
COPY --from=build /data/cache /data/cache
# the patched libraries load here too, or the server falls back to transformers and says so
RUN .venv/bin/python scripts/llama_glibc_compat.py
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD curl -fsS http://127.0.0.1:7860/ >/dev/null || exit 1
CMD [".venv/bin/python", "-m", "cfsm", "serve", "--host", "0.0.0.0", "--port", "7860"]
