"""`manage.py issue_token <username> [--name NAME]`: a new API token, printed once.

Only its SHA-256 is stored, so the printed value cannot be shown again; issue another one if
it is lost (and delete the old one in the admin).
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.models import ApiToken


class Command(BaseCommand):
    help = "Issue an API token for a user and print it once (Authorization: Bearer <token>)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name", default="cli", help="What the token is for (shown in the admin)."
        )

    def handle(self, *args, username: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive; its tokens would not work")
        name = name.strip()
        if not name or len(name) > ApiToken._meta.get_field("name").max_length:
            raise CommandError("--name must be 1 to 100 characters")
        _, raw = ApiToken.issue(user, name)
        # The token alone on stdout, so scripts can capture it: TOKEN=$(manage.py issue_token x)
        self.stdout.write(raw)
        self.stderr.write(
            f"Token {name!r} issued for {username}. It is shown only once; "
            "send it as `Authorization: Bearer <token>`."
        )
