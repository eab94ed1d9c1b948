from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from accounts import views as accounts_views
from agentops import health, monitoring
from agentops.api import api
from approvals.notify.slack.views import slack_actions

urlpatterns = [
    path("admin/", admin.site.urls),
    # Before django.contrib.auth's own: the same view, plus single sign-on.
    path("accounts/login/", accounts_views.login, name="login"),
    # And sign-out, which ends a single sign-on session at the provider too.
    path("accounts/logout/", accounts_views.logout, name="logout"),
    # Two-factor sign-in (TOTP) for password sign-ins.
    path("accounts/two-factor/", include("accounts.two_factor_urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", api.urls),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", monitoring.metrics_view, name="metrics"),
    path("metrics/processes", monitoring.process_metrics_view, name="metrics-processes"),
    path("metrics/state", monitoring.state_metrics_view, name="metrics-state"),
    path("approvals/", include("approvals.urls")),
    path("teams/", include("accounts.urls")),
    path("datasets/", include("evals.urls")),
    path("slack/actions", slack_actions, name="slack_actions"),
    path("", include("history.urls")),
    path("", include("triggers.urls")),
    path("", include("demo.urls")),
    path("", include("runs.urls")),
]

# The admin's own password form would skip the two-factor step (and, with passwords off, only
# fail): it sends people to the sign-in page, which also locks out (django-axes).
urlpatterns.insert(
    0, path("admin/login/", RedirectView.as_view(url=settings.LOGIN_URL, query_string=True))
)
if settings.SSO_ENABLED:
    from allauth.socialaccount import views as socialaccount_views

    # allauth's OpenID Connect login and callback (/accounts/oidc/<provider>/login/…), its
    # cancelled and error pages, and the sign-up form it falls back to when a first sign-in
    # cannot complete on its own; not its local sign-up, password, e-mail or connections pages.
    from accounts import oidc

    urlpatterns += [
        # Before allauth's own callback at the same path: the same view, keeping what
        # sign-out at the provider needs (accounts/provider_logout.py).
        path(
            "accounts/oidc/<str:provider_id>/login/callback/",
            oidc.callback,
            name="openid_connect_callback",
        ),
        path("accounts/", include("allauth.socialaccount.providers.openid_connect.urls")),
        path(
            "accounts/social/login/cancelled/",
            socialaccount_views.login_cancelled,
            name="socialaccount_login_cancelled",
        ),
        path(
            "accounts/social/login/error/",
            socialaccount_views.login_error,
            name="socialaccount_login_error",
        ),
        path("accounts/social/signup/", socialaccount_views.signup, name="socialaccount_signup"),
        path("accounts/login/", accounts_views.login, name="account_login"),
    ]
