from django.contrib import admin
from django.urls import include, path

from agentops import health, monitoring
from agentops.api import api
from approvals.notify.slack.views import slack_actions

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", api.urls),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", monitoring.metrics_view, name="metrics"),
    path("approvals/", include("approvals.urls")),
    path("slack/actions", slack_actions, name="slack_actions"),
    path("", include("history.urls")),
    path("", include("triggers.urls")),
    path("", include("demo.urls")),
    path("", include("runs.urls")),
]
