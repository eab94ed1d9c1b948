"""WebSocket routes. Consumers live with their app (runs/consumers.py)."""

from django.urls import path

from runs import consumers

websocket_urlpatterns = [
    path("ws/runs/<uuid:run_id>/", consumers.RunConsumer.as_asgi()),
    path("ws/runs/", consumers.DashboardConsumer.as_asgi()),
    path("ws/approvals/", consumers.ApprovalsConsumer.as_asgi()),
]
