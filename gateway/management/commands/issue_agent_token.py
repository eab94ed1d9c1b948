"""`manage.py issue_agent_token <slug> [--title T] [--gates JSON] [--limits JSON]`: a token.

Creates the agent when it does not exist yet. Issuing a token rotates: the agent's previous
token stops working at once. Only its SHA-256 is stored, so the value is printed once.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from gateway.models import ExternalAgent, limits_from_json


class Command(BaseCommand):
    help = "Create or update an external agent and print a new token for it (shown once)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--title", default="", help="Shown in lists (default: the slug).")
        parser.add_argument(
            "--gates", default=None, help='Gate rules as JSON, e.g. \'{"always_gate": ["rm"]}\'.'
        )

        parser.add_argument(
            "--limits",
            default=None,
            help="Each session's limits as JSON, e.g. "
            '\'{"max_steps": 500, "max_seconds": 3600}\'.',
        )

    def handle(
        self, *args, slug: str, title: str, gates: str | None, limits: str | None, **options
    ) -> None:
        agent, created = ExternalAgent.objects.get_or_create(
            slug=slug, defaults={"title": title or slug}
        )
        if title:
            agent.title = title
        if gates is not None:
            try:
                agent.gates = json.loads(gates)
                agent.gate_rules()
            except ValueError as exc:
                raise CommandError(f"--gates: {exc}") from None
        if limits is not None:
            try:
                agent.limits = json.loads(limits)
                limits_from_json(agent.limits)
            except ValueError as exc:
                raise CommandError(f"--limits: {exc}") from None
        agent.full_clean()
        agent.save()
        raw = agent.issue_token()
        # The token alone on stdout, so scripts can capture it.
        self.stdout.write(raw)
        self.stderr.write(
            f"{'Created' if created else 'Updated'} external agent {slug!r}; its previous token "
            "(if any) no longer works. The new one is shown only once."
        )
