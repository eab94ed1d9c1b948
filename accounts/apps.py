from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from . import lockouts

        # Every lockout leaves an audit line.
        user_locked_out.connect(lockouts.on_locked_out, dispatch_uid="accounts.on_locked_out")
