"""`manage.py import_run <file>`: store a run exported from another installation here."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from history.replay import replay
from history.transfer import ImportRefused, import_run


class Command(BaseCommand):
    help = (
        "Import a run's export (JSON Lines or JSON, from the run page's Export buttons) after "
        "checking its hash chain; --replay replays it at once."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file; - reads standard input")
        parser.add_argument("--replay", action="store_true", help="replay it once imported")

    def handle(self, *args, file: str, **options):
        try:
            text = self.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None
        try:
            run = import_run(text)
        except ImportRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"imported run {run.pk} ({run.agent}, {run.last_seq} steps, {run.status})"
        )
        if options["replay"]:
            result = replay(run)
            style = self.style.SUCCESS if result.identical else self.style.ERROR
            self.stdout.write(style(result.summary))
            if not result.identical:
                raise SystemExit(1)
