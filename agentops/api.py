"""The JSON API (django-ninja; OpenAPI at /api/docs)."""

from ninja import NinjaAPI

api = NinjaAPI(title="agentops", version="1")
