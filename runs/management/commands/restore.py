"""`manage.py restore FILE [--run ID ...]`: runs archived in FILE back into the database,
after the file verifies (runs/retention/archive.py)."""

from pathlib import Path
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError

from runs.retention import archive


class Command(BaseCommand):
    help = "Restore archived runs' timelines from an archive file."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file")
        parser.add_argument("--run", action="append", default=[], help="only this run (repeat)")

    def handle(self, *args, **options) -> None:
        try:
            wanted = {UUID(r) for r in options["run"]} or None
        except ValueError as exc:
            raise CommandError(f"not a run id: {exc}") from None
        try:
            restored = archive.restore(Path(options["file"]), run_ids=wanted)
        except archive.ArchiveError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"restored {len(restored)} run(s)")
