from django.apps import AppConfig
from django.conf import settings


class AccountsConfig(AppConfig):
    name = "accounts"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from . import lockouts, security_events, sso

        # Every lockout leaves an audit line.
        user_locked_out.connect(lockouts.on_locked_out, dispatch_uid="accounts.on_locked_out")
        security_events.connect()  # sign-ins and failed sign-ins
        if settings.SSO_ENABLED:
            # A mistake in the claim mapping stops start-up, not the first sign-in.
            sso.configured_mapping()
