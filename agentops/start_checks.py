"""The system checks every process runs before it serves or consumes anything.
Why and how: docs/design/modules.md."""

from django.core import checks


class Refused(SystemExit):
    """The process stops here: a SystemExit, so the server's or worker's start unwinds with
    the message on stderr and exit status 1, and no signal dispatcher swallows it (Celery's
    catches Exception)."""


def failures() -> list[checks.CheckMessage]:
    """The errors the system checks find now (silenced ones left out, as `check` does)."""
    return [m for m in checks.run_checks() if m.is_serious() and not m.is_silenced()]


def refuse_unsound(process: str) -> None:
    """Raise Refused, naming each failed check, when the configuration has an error;
    otherwise return. `process`: what refuses ("the web process", "the worker")."""
    found = failures()
    if not found:
        return
    lines = "\n".join(f"  {message}" for message in found)
    raise Refused(
        f"agentops: {process} refuses to start: {len(found)} system check(s) failed\n{lines}\n"
        "Nothing is served or executed until the configuration is fixed "
        "(`manage.py check` lists the same errors)."
    )
