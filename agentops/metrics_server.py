"""A worker's own /metrics, for a pod (or host) that runs workers and no web process: the
counters of the processes that share its PROMETHEUS_MULTIPROC_DIR, on METRICS_PORT, behind
the same bearer token as the web's. The state series (database, broker) are left to the
web's /metrics/state, so that they are scraped once, not once per pod.

A WSGI server from the standard library on a daemon thread of the worker's main process: a
scrape every few seconds needs nothing more, and it never holds up the worker's shutdown.
"""

import logging
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery.signals import worker_init, worker_process_shutdown
from django.conf import settings

from agentkit import metrics

from . import monitoring

log = logging.getLogger("agentops.monitoring")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # one line per scrape is noise
        pass


def app(environ: dict, start_response) -> list[bytes]:
    if environ.get("PATH_INFO") not in ("/metrics", "/metrics/processes"):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: GET /metrics\n"]
    if environ.get("REQUEST_METHOD") != "GET":
        start_response("405 Method Not Allowed", [("Allow", "GET")])
        return [b"GET only\n"]
    refused = monitoring.refusal(environ.get("HTTP_AUTHORIZATION", ""))
    if refused is not None:
        status, message = refused
        reason = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}[status]
        headers = [("Content-Type", "text/plain")]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="metrics"'))
        start_response(f"{status} {reason}", headers)
        return [message.encode()]
    body = monitoring.exposition(processes=True, state=False)
    start_response("200 OK", [("Content-Type", monitoring.CONTENT_TYPE)])
    return [body]


def start(port: int, host: str = "0.0.0.0") -> WSGIServer:  # noqa: S104 (scraped from the pod network)
    server = make_server(host, port, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    log.info("worker metrics on :%d/metrics", server.server_port)
    return server


def connect_worker_signals() -> None:
    worker_init.connect(_serve_worker_metrics, weak=False)
    worker_process_shutdown.connect(_forget_live_gauges, weak=False)


def _serve_worker_metrics(**kwargs) -> None:
    if settings.METRICS_PORT:
        start(settings.METRICS_PORT)


def _forget_live_gauges(**kwargs) -> None:
    # A prefork pool child ends with os._exit, which runs no atexit handler.
    metrics.mark_this_process_dead()
