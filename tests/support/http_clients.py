"""The clients of a production-like topology (bench/chaos.py, tests/test_fleet.py): the API with
every answer recorded, and a browser's WebSocket on a run's live timeline that reconnects as the
page does, with `?after=<last seq>`."""

import asyncio
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tests.support.supervisor import NotUp

HUNG = -1  # a Hit's code when the request got no answer within the client's timeout
SEQ_RE = re.compile(r'class="step[^"]*"[^>]*data-seq="(\d+)"')


@dataclass
class Hit:
    at: float  # monotonic, when the answer (or the failure) came
    what: str
    code: int  # 0: no answer (refused, reset); HUNG: no answer within the timeout
    took: float = 0.0  # seconds from sending to `at`

    @property
    def sent(self) -> float:
        return self.at - self.took


class Client:
    def __init__(self, base: str):
        self.base = base
        self.hits: list[Hit] = []
        self.lock = threading.Lock()

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        body: dict | None = None,
        *,
        key: str | None = None,
    ) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if key:
            headers["Idempotency-Key"] = key
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        code, out = 0, {}
        sent = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                code, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        except TimeoutError:
            code, raw = HUNG, b""
        except urllib.error.URLError as exc:
            code, raw = (HUNG if isinstance(exc.reason, TimeoutError) else 0), b""
        except OSError:
            raw = b""
        try:
            out = json.loads(raw or b"{}")
        except ValueError:
            out = {"raw": raw[:200].decode(errors="replace")}
        what = f"{method} {re.sub(r'[0-9a-f-]{36}', '<id>', path.split('?')[0])}"
        now = time.monotonic()
        with self.lock:
            self.hits.append(Hit(now, what, code, now - sent))
        return code, out


def wait_http(
    client: Client, path: str, timeout: float, proc: subprocess.Popen | None = None
) -> None:
    """Until `path` answers 200; with `proc`, bounded by that process as wait_port is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.call("GET", path)[0] == 200:
            return
        if proc is not None and proc.poll() is not None:
            raise NotUp(f"{path}: the server exited ({proc.returncode}) before answering")
        time.sleep(0.25)
    raise NotUp(f"{path} did not answer 200 within {timeout:.0f} s")


class Watcher(threading.Thread):
    """A browser on one run: reconnects with ?after=<last seq> whenever the socket drops.
    `seen` holds every seq received, `arrivals` when each was (monotonic), `connects` the
    sockets opened."""

    def __init__(self, base: str, run_id: str, session_key: str):
        super().__init__(daemon=True)
        self.url = base.replace("http", "ws", 1) + f"/ws/runs/{run_id}/"
        self.headers = {"Cookie": f"sessionid={session_key}", "Origin": base}
        self.run_id = run_id
        self.seen: list[int] = []
        self.arrivals: list[float] = []
        self.connected_at: list[float] = []
        self.stop = threading.Event()

    @property
    def connects(self) -> int:
        return len(self.connected_at)

    @property
    def last(self) -> int:
        return self.seen[-1] if self.seen else 0

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        import websockets

        while not self.stop.is_set():
            try:
                url = f"{self.url}?after={self.last}"
                async with websockets.connect(
                    url, additional_headers=self.headers, open_timeout=5
                ) as ws:
                    self.connected_at.append(time.monotonic())
                    while not self.stop.is_set():
                        try:
                            message = await asyncio.wait_for(ws.recv(), 0.5)
                        except TimeoutError:
                            continue
                        seqs = [int(s) for s in SEQ_RE.findall(str(message))]
                        self.seen.extend(seqs)
                        self.arrivals.extend(time.monotonic() for _ in seqs)
            except Exception:  # refused while daphne is down, reset when it is killed
                await asyncio.sleep(0.5)
