# Mismatch Monitor server (API + dashboard). The collectors are installed in training jobs instead.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md MANIFEST.in ./
COPY server ./server
COPY dashboard ./dashboard
COPY collectors ./collectors
COPY migrations ./migrations
# The collectors are their own distribution, pinned by the server's: both from this copy.
RUN pip install ./collectors '.[postgres]'
RUN useradd --create-home monitor && mkdir -p /data && chown monitor /data
USER monitor
VOLUME /data
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz')"
ENTRYPOINT ["mismatch"]
CMD ["serve", "--db", "/data/mismatch.duckdb", "--host", "0.0.0.0", "--port", "8765"]
