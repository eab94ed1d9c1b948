# The production image: one image for web (daphne), worker and beat; see compose.yaml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    AGENTOPS_VAR_DIR=/app/var \
    PATH="/app/.venv/bin:$PATH"

RUN pip install --no-cache-dir "uv>=0.8,<1" \
    && useradd --create-home --uid 10001 --user-group agentops

WORKDIR /app

# Dependencies first: this layer is reused until pyproject.toml or uv.lock change.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project

COPY . .
RUN uv sync --frozen --no-dev \
    # Static files are collected at build time (hashed names, compressed, served by WhiteNoise).
    # The key only lets settings load; no request is ever signed with it.
    && DEBUG=false SECRET_KEY=collectstatic-only-not-a-runtime-secret-0123456789abcdef \
       ALLOWED_HOSTS=localhost python manage.py collectstatic --noinput \
    && chown -R agentops:agentops /app/var

USER agentops
EXPOSE 8000

# No --proxy-headers: daphne would take the client's address from X-Forwarded-For as the client
# wrote it. Behind N reverse proxies set AXES_PROXY_COUNT=N instead (accounts/lockouts.py).
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "agentops.asgi:application"]
