"""A small OpenID Connect provider for tests: the part of Keycloak / Okta / Entra that a
sign-in touches, on a local port.

Discovery (/.well-known/openid-configuration), an authorize page where the person types who
they are (no password: the test decides who exists), the token endpoint (authorization code
+ PKCE S256, client secret by POST or HTTP Basic) answering with an RS256-signed ID token,
its JWKS, userinfo, and RP-initiated logout (`end_session_endpoint`: checks the
`id_token_hint` it issued and the client, records the logout in `logouts`, and sends the
browser back to `post_logout_redirect_uri`). `users` maps a username to its claims; a test
edits a user's `groups` between sign-ins, as an administrator would at the provider, and
turns `offers_logout` off to be a provider without an end-session endpoint.
"""

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

KID = "test-key-1"


@dataclass
class OidcProvider:
    client_id: str
    client_secret: str
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # access token -> username
    issuer: str = ""
    offers_logout: bool = True
    logouts: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> "OidcProvider":
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                provider.handle(self, "GET")

            def do_POST(self) -> None:
                provider.handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}/realms/test"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- the endpoints ----------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(req.path)
        path = url.path.removeprefix(urlsplit(self.issuer).path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        form: dict[str, str] = {}
        if method == "POST":
            length = int(req.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(req.rfile.read(length).decode()).items()}
        routes = {
            ("GET", "/.well-known/openid-configuration"): self.discovery,
            ("GET", "/authorize"): self.authorize_page,
            ("POST", "/authorize"): self.authorize,
            ("POST", "/token"): self.token,
            ("GET", "/jwks"): self.jwks,
            ("GET", "/userinfo"): self.userinfo,
            ("GET", "/logout"): self.end_session,
        }
        route = routes.get((method, path))
        if route is None:
            return self._send(req, 404, {"error": "not_found"})
        status, body, headers = route(req, {**query, **form})
        self._send(req, status, body, headers)

    def discovery(self, req, params):
        logout = {"end_session_endpoint": self.issuer + "/logout"} if self.offers_logout else {}
        return (
            200,
            {
                **logout,
                "issuer": self.issuer,
                "authorization_endpoint": self.issuer + "/authorize",
                "token_endpoint": self.issuer + "/token",
                "userinfo_endpoint": self.issuer + "/userinfo",
                "jwks_uri": self.issuer + "/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_post",
                    "client_secret_basic",
                ],
                "code_challenge_methods_supported": ["S256"],
            },
            {},
        )

    def authorize_page(self, req, params):
        if params.get("client_id") != self.client_id or params.get("response_type") != "code":
            return 400, {"error": "invalid_request"}, {}
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in params.items()
        )
        page = (
            "<!doctype html><title>Test identity provider</title><h1>Test identity provider</h1>"
            f'<form method="post">{hidden}<label for="username">Username</label>'
            '<input id="username" name="username"><button type="submit">Continue</button></form>'
        )
        return 200, page, {}

    def authorize(self, req, params):
        username = params.get("username", "")
        if username not in self.users:
            # As real providers do: back to the client, with the error instead of a code.
            answer = urlencode({"error": "access_denied", "state": params.get("state", "")})
            return 302, "", {"Location": f"{params['redirect_uri']}?{answer}"}
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "username": username,
            "redirect_uri": params["redirect_uri"],
            "nonce": params.get("nonce"),
            "code_challenge": params.get("code_challenge"),
        }
        answer = urlencode({"code": code, "state": params["state"]})
        location = f"{params['redirect_uri']}?{answer}"
        return 302, "", {"Location": location}

    def token(self, req, params):
        client_id, secret = params.get("client_id"), params.get("client_secret")
        auth = req.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        if client_id != self.client_id or secret != self.client_secret:
            return 401, {"error": "invalid_client"}, {}
        grant = self.codes.pop(params.get("code", ""), None)
        if grant is None or grant["redirect_uri"] != params.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}, {}
        if grant["code_challenge"]:
            verifier = params.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if digest.decode() != grant["code_challenge"]:
                return 400, {"error": "invalid_grant", "error_description": "PKCE"}, {}
        access = secrets.token_urlsafe(24)
        self.tokens[access] = grant["username"]
        now = int(time.time())
        claims = {
            **self.claims_of(grant["username"]),
            "iss": self.issuer,
            "aud": self.client_id,
            "iat": now,
            "exp": now + 300,
        }
        if grant["nonce"]:
            claims["nonce"] = grant["nonce"]
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})
        return (
            200,
            {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": id_token,
            },
            {},
        )

    def end_session(self, req, params):
        if not self.offers_logout:
            return 404, {"error": "not_found"}, {}
        try:
            # An expired ID token is still a valid hint (the spec says so); ours, for this client.
            claims = jwt.decode(
                params.get("id_token_hint", ""),
                self.key.public_key(),
                algorithms=["RS256"],
                audience=self.client_id,
                issuer=self.issuer,
                options={"verify_exp": False},
            )
        except jwt.PyJWTError as exc:
            return 400, {"error": "invalid_request", "error_description": str(exc)}, {}
        if params.get("client_id", self.client_id) != self.client_id:
            return 400, {"error": "invalid_request", "error_description": "client_id"}, {}
        back = params.get("post_logout_redirect_uri", "")
        self.logouts.append({"sub": claims["sub"], "post_logout_redirect_uri": back})
        if not back:
            return 200, "<!doctype html><title>Signed out</title><h1>Signed out</h1>", {}
        return 302, "", {"Location": back}

    def jwks(self, req, params):
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return 200, {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]}, {}

    def userinfo(self, req, params):
        auth = req.headers.get("Authorization", "")
        username = self.tokens.get(auth.removeprefix("Bearer "))
        if username is None:
            return 401, {"error": "invalid_token"}, {}
        return 200, self.claims_of(username), {}

    def claims_of(self, username: str) -> dict[str, Any]:
        user = self.users[username]
        return {
            "sub": f"sub-{username}",
            "preferred_username": username,
            "email": f"{username}@idp.example",
            "email_verified": True,
            **user,
        }

    @staticmethod
    def _send(
        req: BaseHTTPRequestHandler, status: int, body: Any, headers: dict | None = None
    ) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req.send_response(status)
        kind = "text/html" if isinstance(body, str) else "application/json"
        req.send_header("Content-Type", f"{kind}; charset=utf-8")
        req.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            req.send_header(name, value)
        req.end_headers()
        req.wfile.write(data)
