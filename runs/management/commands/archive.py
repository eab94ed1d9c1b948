"""`manage.py archive`: finished runs past their retention (runs/retention/policy.py) into
compressed archive files, verified, then out of the database; `--verify FILE` checks a file.

Run it as the role that owns the tables (the one migrations run as): removing an archived
run's steps turns the append-only trigger off for the transaction, which only the owner may.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.retention import archive, policy


class Command(BaseCommand):
    help = "Archive finished runs' timelines past their retention, or verify an archive file."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--verify", metavar="FILE", help="only verify this archive file")
        parser.add_argument(
            "--older-than-days",
            type=int,
            help="archive every finished run older than this, whatever its policy says",
        )
        parser.add_argument("--dir", help="where the files go (TIMELINE_ARCHIVE_DIR)")
        parser.add_argument("--batch", type=int, default=1000, help="runs per file")
        parser.add_argument("--dry-run", action="store_true", help="say what is due, only")

    def handle(self, *args, **options) -> None:
        if options["verify"]:
            self._verify(Path(options["verify"]))
            return
        now = timezone.now()
        due = policy.due(now=now, older_than_days=options["older_than_days"])
        if options["dry_run"]:
            self.stdout.write(f"{due.count()} run(s) due for archival")
            return
        directory = Path(options["dir"] or settings.AGENTOPS["TIMELINE_ARCHIVE_DIR"])
        batch, total, number = max(1, options["batch"]), 0, 0
        while runs := list(due.order_by("created_at", "id")[:batch]):
            number += 1
            path = directory / f"timeline-{now:%Y%m%dT%H%M%S}-{number:04d}.jsonl.zst"
            try:
                done = archive.archive(runs, path)
            except archive.ArchiveError as exc:
                raise CommandError(str(exc)) from None
            total += done.runs
            self.stdout.write(
                f"{path}: {done.runs} run(s), {done.steps} step(s), "
                f"{done.checkpoints} checkpoint(s)"
            )
        self.stdout.write(f"archived {total} run(s)")

    def _verify(self, path: Path) -> None:
        check = archive.verify(path)
        for problem in check.problems:
            self.stderr.write(problem)
        if not check.ok:
            raise CommandError(f"{path} does not verify ({len(check.problems)} problem(s))")
        steps = sum(len(r.steps) for r in check.runs)
        self.stdout.write(f"{path} verifies: {len(check.runs)} run(s), {steps} step(s)")
