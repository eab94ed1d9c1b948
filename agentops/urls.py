from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from accounts import views as accounts_views
from agentops import health, monitoring
from agentops.api import api
from approvals.notify.slack.views import slack_actions

urlpatterns = [
    path("admin/", admin.site.urls),
    # Before django.contrib.auth's own: the same view, plus single sign-on.
    path("accounts/login/", accounts_views.login, name="login"),
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

if settings.SSO_ENABLED:
    # allauth's OpenID Connect login and callback (/accounts/oidc/<provider>/login/…) and its
    # error and cancelled pages; not its local sign-up, password or e-mail pages.
    urlpatterns += [
        path("accounts/", include("allauth.socialaccount.providers.openid_connect.urls")),
        path("accounts/social/", include("allauth.socialaccount.urls")),
        path("accounts/login/", accounts_views.login, name="account_login"),
    ]
