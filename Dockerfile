# ToolLens app image: the package, its migrations and examples.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /srv/toollens
COPY pyproject.toml setup.py README.md ./
COPY app ./app
COPY migrations ./migrations
COPY examples ./examples
COPY templates ./templates
COPY static ./static
# gcc only while installing: setup.py compiles the scoring path with mypyc.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install 'setuptools>=77' 'mypy==2.4.1' \
    && TOOLLENS_COMPILE=1 pip install --no-build-isolation -e . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /srv/toollens toollens
USER toollens

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=5 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/api/health', timeout=2).status == 200 else 1)"

# Migrations first, then the server.
CMD ["sh", "-c", "toollens db upgrade && toollens serve --host 0.0.0.0 --port 8000"]
