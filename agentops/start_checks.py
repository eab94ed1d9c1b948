"""The system checks every process runs before it serves or consumes anything.

`manage.py check`, `migrate` and `up` run Django's system checks and refuse to go on when one
fails (among them approvals.E001: a gate rule that names a tool, argument or approver group
the agent does not have, and so gates nothing). daphne and a Celery worker run no command:
started without them, they would serve and execute such an agent's calls ungated. The ASGI
application (agentops/asgi.py) and the worker's start (agentops/celery.py) call `refuse_unsound`
so that every process kind fails closed the same way, with the same messages.

The checks are those `runserver` runs at start: every registered check but the deployment
and database ones. Only errors refuse; warnings are the operator's to read in `check`.
"""

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
