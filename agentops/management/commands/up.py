"""`manage.py up [addr:port]`: the one command that runs agentops on one machine.

Migrates, builds the demo shop, creates the demo logins, then serves HTTP + WebSocket with
daphne. Embedded (no REDIS_URL) it also runs a Celery worker on the in-memory transport and
the periodic sweeps inside this process. With REDIS_URL it serves only, and the worker and
beat run as their own processes (or pass --with-worker to run a worker and the sweeps here
too, against Redis).
"""

import logging
import os
import re
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.management.commands.runserver import naiveip_re
from django.db import connections

from agentkit.logs import redact_secrets
from agentops import embedded
from demo import shop
from runs import events

from .seed_demo import describe_logins, ensure_demo_budgets, ensure_demo_users

log = logging.getLogger("agentops.up")
DEFAULT_ADDR = "127.0.0.1"
DEFAULT_PORT = 8000


# daphne's --websocket_connect_timeout; the README's production command gives the same.
WEBSOCKET_CONNECT_TIMEOUT_SECONDS = 30


class Command(BaseCommand):
    help = "Migrate, load the demo, start the worker (embedded mode) and serve HTTP + WebSocket."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "addrport", nargs="?", default=f"{DEFAULT_ADDR}:{DEFAULT_PORT}", help="[addr:]port"
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=int(os.environ.get("AGENTOPS_EMBEDDED_CONCURRENCY", "8")),
            help="threads of the in-process worker (default 8)",
        )
        parser.add_argument(
            "--with-worker",
            action="store_true",
            help="with REDIS_URL: also run a worker and the sweeps in this process",
        )
        parser.add_argument(
            "--shutdown-grace",
            type=float,
            default=5.0,
            help="seconds running tasks get to finish their time slice on shutdown",
        )

    def handle(self, *args, **options) -> None:
        addr, port = parse_addrport(options["addrport"])
        quiet = max(0, options["verbosity"] - 1)
        if not os.environ.get("AGENTOPS_PUBLIC_URL"):
            # Links this server hands out (one-tap e-mails, callback URLs, webhook answers)
            # point at where it listens, not at the default port.
            settings.AGENTOPS["PUBLIC_URL"] = public_url(addr, port)

        call_command("migrate", interactive=False, verbosity=quiet)
        shop.ensure()
        logins = ensure_demo_users()
        ensure_demo_budgets()
        if not settings.DEBUG:
            # DEBUG serves static files from the source folders (WhiteNoise finders).
            call_command("collectstatic", interactive=False, verbosity=quiet)

        run_worker = settings.EMBEDDED or options["with_worker"]
        # Requests and tasks run in their own threads; the main thread only runs the reactor.
        connections.close_all()
        try:
            if run_worker:
                embedded.start(concurrency=options["concurrency"])
            server = self._serve(addr, port, logins, run_worker, options)
        finally:
            stopped = embedded.stop(grace=options["shutdown_grace"])
        if not server.listening_addresses:
            raise CommandError(f"could not listen on {addr}:{port}")
        self._say("agentops stopped.")
        if not stopped:
            # Worker threads are still inside a task; their runs are checkpointed and resume
            # after the lease expires. Do not wait for them.
            if settings.LOG_FORMAT == "json":
                log.warning("Some tasks were still running; their runs resume on restart.")
            else:
                self.stderr.write("Some tasks were still running; their runs resume on restart.")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _serve(self, addr: str, port: int, logins, run_worker: bool, options):
        from channels.routing import get_default_application
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        # Imported here: importing twisted's reactor installs one, and daphne's Server must
        # install its own (asyncio) reactor first.
        from twisted.internet import reactor

        if settings.EMBEDDED:
            # The in-memory layer's queues live on this loop; worker threads hand their sends
            # to it (runs/events.py). Known up front, not only once a WebSocket connects.
            events.remember_server_loop(reactor._asyncioEventloop)

        def ready() -> None:
            host, bound = (
                server.listening_addresses[0] if server.listening_addresses else (addr, port)
            )
            self._say(self._banner(host, bound, logins, run_worker, options))
            sys.stdout.flush()

        server = Server(
            application=get_default_application(),
            endpoints=build_endpoint_description_strings(host=addr, port=port),
            signal_handlers=True,  # SIGINT/SIGTERM stop the reactor; we clean up after run()
            # With JSON the application writes the access lines (agentops/access_log.py).
            action_logger=(
                self._log_action
                if options["verbosity"] >= 2 and settings.LOG_FORMAT != "json"
                else None
            ),
            ready_callable=ready,
            # Sockets are accepted before their access check (runs/consumers.py `admit`), so
            # these bound only the handshake itself; 5 s (autobahn's opening handshake here,
            # both with daphne's command line) refused every socket of a reconnect storm on a
            # starved machine (bench/reconnect_storm.py). As `--websocket_connect_timeout 30`.
            websocket_connect_timeout=WEBSOCKET_CONNECT_TIMEOUT_SECONDS,
            websocket_handshake_timeout=WEBSOCKET_CONNECT_TIMEOUT_SECONDS,
        )
        server.run()
        return server

    def _banner(self, host: str, port: int, logins, run_worker: bool, options) -> str:
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
        if ":" in shown:
            shown = f"[{shown}]"
        db = settings.DATABASES["default"]
        lines = [
            "",
            f"agentops is up: http://{shown}:{port}/",
            "",
        ]
        if settings.EMBEDDED:
            lines.append(
                f"  embedded mode: {db['ENGINE'].rsplit('.', 1)[-1]} ({db['NAME']}), "
                f"in-process worker ({options['concurrency']} threads), in-memory channel layer"
            )
        else:
            lines.append(f"  Redis: {_redact(settings.REDIS_URL)}; database: {db['ENGINE']}")
            if run_worker:
                lines.append(
                    f"  in-process worker ({options['concurrency']} threads) and sweeps on Redis"
                )
            else:
                lines += [
                    "  this process serves HTTP + WebSocket only; start, with the same env:",
                    "    celery -A agentops worker --pool threads --concurrency 16",
                    "    celery -A agentops beat",
                    "  (or restart with --with-worker to run both in this process)",
                ]
        model = "Claude (ANTHROPIC_API_KEY)" if settings.ANTHROPIC_API_KEY else "scripted"
        lines += [
            f"  model: {model}",
            f"  links in e-mails and callbacks: {settings.AGENTOPS['PUBLIC_URL']}"
            + ("" if os.environ.get("AGENTOPS_PUBLIC_URL") else " (set AGENTOPS_PUBLIC_URL)"),
            "",
        ]
        if settings.SSO_ENABLED:
            name = settings.AGENTOPS_SSO["PROVIDER_NAME"]
            lines.append(f"  single sign-on: {name} ({settings.OIDC_ISSUER})")
        if settings.PASSWORD_LOGIN:
            lines += ["  demo logins:", describe_logins(logins)]
        else:
            lines.append("  password sign-in is off (AGENTOPS_PASSWORD_LOGIN=false)")
        lines += ["", "Quit with CONTROL-C.", ""]
        return "\n".join(lines)

    def _say(self, text: str) -> None:
        """A line for the person who started `up`; with LOG_FORMAT=json a log record like
        every other line, so each line of the output is JSON."""
        if settings.LOG_FORMAT == "json":
            log.info(text.strip())
        else:
            self.stdout.write(text)

    def _log_action(self, protocol: str, action: str, details: dict) -> None:
        # A one-tap link's path carries its token: never written out.
        path = redact_secrets(str(details.get("path", "")))
        if protocol == "http" and action == "complete":
            self._say(
                "HTTP {method} {path} {status} [{time_taken:.2f}, {client}]".format(
                    **{**details, "path": path}
                )
            )
        elif protocol == "websocket" and action in ("connected", "disconnected", "rejected"):
            self._say(f"WebSocket {action.upper()} {path} [{details['client']}]")


def public_url(addr: str, port: int) -> str:
    """The URL of a server bound to addr:port, for links (a wildcard address: this machine)."""
    host = "127.0.0.1" if addr in ("0.0.0.0", "", "::") else addr  # noqa: S104
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def parse_addrport(value: str) -> tuple[str, int]:
    """The same forms as runserver: "8000", "0.0.0.0:8000", "[::1]:8000", "localhost:8000"."""
    match = re.match(naiveip_re, value)
    if not match:
        raise CommandError(f'"{value}" is not a valid port number or address:port pair.')
    addr, _ipv4, ipv6, _fqdn, port = match.groups()
    if not port.isdigit():
        raise CommandError(f"{port!r} is not a valid port number.")
    if ipv6:
        addr = addr[1:-1]
    return addr or DEFAULT_ADDR, int(port)


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)
