# The coordinator image used by docker-compose.yml.
FROM python:3.11-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless maven \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY events ./events
COPY coordinator ./coordinator
COPY streaming ./streaming
RUN pip install --no-cache-dir . && segcoord jars fetch
CMD ["segcoord", "--help"]
