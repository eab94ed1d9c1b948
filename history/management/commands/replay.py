"""`manage.py replay <run id>`: replay a recorded run and say whether it went the same way."""

import json
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError

from history.replay import DIVERGED, TOOL_CHANGED, replay
from runs.models import Run


class Command(BaseCommand):
    help = (
        "Re-run a recorded run with its recorded model turns, tool results and decisions (no "
        "model call, no side effect) and compare; exits 1 when the replay diverges, 2 when "
        "every step replays the same but a tool's code changed since the run."
    )

    def add_arguments(self, parser):
        parser.add_argument("run", help="the run's id")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, run: str, **options):
        try:
            recorded = Run.objects.get(pk=UUID(run))
        except (ValueError, Run.DoesNotExist):
            raise CommandError(f"no run {run!r} here") from None
        result = replay(recorded)
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict(), indent=2))
        else:
            for number, (want, got) in enumerate(
                zip(result.recorded, result.replayed, strict=False), start=1
            ):
                mark = "  " if want == got else "!="
                self.stdout.write(
                    f"{mark} #{number:<4} {want}" + ("" if want == got else f"  | {got}")
                )
            style = {DIVERGED: self.style.ERROR, TOOL_CHANGED: self.style.WARNING}.get(
                result.verdict, self.style.SUCCESS
            )
            self.stdout.write(style(result.summary))
        if result.verdict == DIVERGED:
            raise SystemExit(1)
        if result.verdict == TOOL_CHANGED:
            raise SystemExit(2)
