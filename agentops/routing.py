"""WebSocket routes. Consumers live with their app (runs/consumers.py, approvals/consumers.py)."""

from django.urls import path

from approvals.consumers import ApprovalsConsumer
from runs.consumers import DashboardConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<uuid:run_id>/", RunConsumer.as_asgi()),
    path("ws/runs/", DashboardConsumer.as_asgi()),
    path("ws/approvals/", ApprovalsConsumer.as_asgi()),
]
