"""Requests to URLs an external agent gave (callback URLs), which must never reach inside.
Why and how: docs/design/modules.md."""

import http.client
import ipaddress
import socket
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class ForbiddenAddress(Exception):
    """The URL leads to an address callbacks may not reach (the message says which).
    Not an OSError, so urllib passes it up as it is instead of as a retryable URLError."""


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(n) for n in settings.AGENTOPS["CALLBACK_ALLOWED_NETWORKS"]]


def refusal(address: Address) -> str | None:
    """Why callbacks may not reach `address`, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in network for network in _allowed_networks()):
        return None
    if address.is_global and not address.is_multicast:
        return None
    return (
        f"{address} is a loopback, link-local, private or reserved address "
        "(AGENTOPS_CALLBACK_ALLOWED_NETWORKS lets chosen networks through)"
    )


def url_refusal(url: str) -> str | None:
    """What is wrong with a callback URL as given (before any lookup), or None. A name is
    checked again, resolved, when the callback is sent."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "callback_url is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "callback_url must be an http(s) URL with a host"
    if port == 0:
        return "callback_url has no valid port"
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        return f"callback_url: {host} is this machine"
    addresses = _numeric_addresses(host)
    if not addresses:
        return None  # a name: checked where it resolves, at connect time
    for address in addresses:
        why = refusal(address)
        if why:
            return f"callback_url: {why}"
    return None


def _numeric_addresses(host: str) -> list[Address]:
    """The addresses `host` stands for if it is an address, read as the resolver reads it
    at connect time, else []. The resolver takes IPv4 in inet_aton's forms as well as the
    dotted quad: `127.1`, `2130706433`, `0x7f000001` and `017700000001` are all 127.0.0.1,
    which ipaddress does not read as addresses at all."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return []  # not an address of any form: a name
    return [ipaddress.ip_address(sockaddr[0].split("%")[0]) for *_, sockaddr in infos]


def _connect(address: tuple[str, int], timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source=None):
    """socket.create_connection, to an address that passed `refusal` only."""
    host, port = address
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for *_, sockaddr in infos:
        why = refusal(ipaddress.ip_address(sockaddr[0].split("%")[0]))
        if why:
            raise ForbiddenAddress(f"{host} resolves to {why}")
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source:
                sock.bind(source)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"{host} did not resolve")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_GuardedHTTPConnection, req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_GuardedHTTPSConnection, req, context=self._context)


def opener() -> urllib.request.OpenerDirector:
    """An opener that speaks http(s) only, uses no proxy, follows redirects, and connects
    only to addresses that pass `refusal`."""
    director = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler({}),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
        _GuardedHTTPHandler(),
        _GuardedHTTPSHandler(),
    ):
        director.add_handler(handler)
    return director
