"""`manage.py export_decisions --since … --until … --format csv|jsonl [--team slug]`: the signed
compliance export of the decisions of a period (approvals/evidence/export.py), of every agent
or one team's."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from approvals.evidence.export import ExportError, checked_request, export_lines


class Command(BaseCommand):
    help = (
        "Write every decision on a gated call settled in [since, until) as a hash-chained, "
        "signed CSV or JSONL file (check it with verify_decisions_export)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", required=True, help="ISO date or date-time (UTC if naive)")
        parser.add_argument(
            "--until", required=True, help="ISO date (that whole day included) or date-time"
        )
        parser.add_argument("--format", default="jsonl", help="csv or jsonl (default jsonl)")
        parser.add_argument("--agent", default="", help="only this agent's decisions")
        parser.add_argument("--team", default="", help="only the decisions on this team's agents")
        parser.add_argument("--output", "-o", default="-", help="file to write; - is stdout")

    def handle(
        self, *args, since: str, until: str, format: str, agent: str, team: str, output: str, **_
    ):
        try:
            start, end, fmt, agent = checked_request(since, until, format, agent)
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        team = team.strip()
        agents = None
        if team:
            chosen = Team.objects.filter(slug=team[:50]).first()
            if chosen is None:
                raise CommandError(f"no team has the slug {team[:64]!r}")
            agents = list(chosen.agents.values_list("agent", flat=True))
        lines = export_lines(since=start, until=end, fmt=fmt, agent=agent, agents=agents, team=team)
        if output == "-":
            for line in lines:
                self.stdout.write(line, ending="")
            return
        path = Path(output)
        try:
            with path.open("w", encoding="utf-8", newline="") as handle:
                handle.writelines(lines)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc}") from None
        self.stderr.write(f"decisions export written to {path}")
