"""`manage.py verify_decisions_export FILE [--key …]`: check a decisions export's chain and
signature. Reads no database: with the key (--key, AGENTOPS_EVIDENCE_KEY, or SECRET_KEY's
derived key) it checks a file anywhere. Exits 1 when the file was changed or is incomplete."""

import os

from django.core.management.base import BaseCommand, CommandError

from approvals.evidence.chain import verify_file
from approvals.evidence.export import signing_key


class Command(BaseCommand):
    help = (
        "Verify a decisions export (export_decisions, the audit page's download or the API): "
        "an edited, dropped, reordered or spliced line, a truncated file or a changed trailer "
        "fails with the line and the reason."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--key",
            default="",
            help="the signing key (AGENTOPS_EVIDENCE_KEY); default: this installation's key. "
            "Also read from the environment variable named by --key-env.",
        )
        parser.add_argument(
            "--key-env", default="", help="name of an environment variable holding the key"
        )

    def handle(self, *args, file: str, key: str, key_env: str, **_):
        if key_env:
            key = os.environ.get(key_env, "")
            if not key:
                raise CommandError(f"the environment variable {key_env} is empty or not set")
        result = verify_file(file, key=key.encode() if key else signing_key())
        if not result.ok:
            self.stderr.write(self.style.ERROR(str(result)))
            raise SystemExit(1)
        self.stdout.write(self.style.SUCCESS(str(result)))
