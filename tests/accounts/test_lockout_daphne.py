"""The sign-in lockout through a real daphne, started as the production topology says: a forged
X-Forwarded-For never unlocks an account, and daphne's --proxy-headers (which believes the
header's leftmost entry) is refused unless proxies are declared (accounts/lockouts.py).

One SQLite database, migrated once for the module, with one person in it."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.livesupport import free_port

ROOT = Path(__file__).resolve().parents[2]
DAPHNE = Path(sys.executable).parent / "daphne"
LIMIT = 5
START_WITHIN = 180  # seconds: a loaded CI machine imports Django slowly

# The first test also waits for the module's migrate, which a loaded machine takes minutes over.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> dict:
    """The environment of a migrated install (its own SQLite file) with arthur in it."""
    var = tmp_path_factory.mktemp("daphne-lockout")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "AXES_PROXY_COUNT", "DJANGO_SETTINGS_MODULE")
    }
    env["AGENTOPS_VAR_DIR"] = str(var)
    for command in (
        ["migrate", "--noinput"],
        [
            "shell",
            "-c",
            "from accounts.models import User; User.objects.create_user('arthur', "
            "password='pw-arthur')",
        ],
    ):
        done = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return env


def start(env: dict, *flags: str, proxies: int = 0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), *flags, "agentops.asgi:application"],
        cwd=ROOT,
        env={**env, "AXES_PROXY_COUNT": str(proxies)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen, base: str) -> None:
    deadline = time.monotonic() + START_WITHIN
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if httpx.get(f"{base}/accounts/login/", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"daphne did not answer within {START_WITHIN} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sign_in(base: str, password: str, forwarded_for: str | None = None) -> int:
    with httpx.Client(base_url=base, timeout=60) as client:
        page = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        response = client.post(
            "/accounts/login/",
            data={"username": "arthur", "password": password, "csrfmiddlewaretoken": token[1]},
            headers=headers,
        )
        return response.status_code


def unlock(env: dict) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "axes_reset"], cwd=ROOT, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr


def test_daphne_exposed_directly_counts_forged_addresses_as_the_socket(install):
    proc, base = start(install)  # the production section's command: no --proxy-headers
    try:
        wait_ready(proc, base)
        codes = [sign_in(base, "guess", f"192.0.2.{n}") for n in range(LIMIT + 1)]
        assert codes == [200] * (LIMIT - 1) + [429, 429]
        for forged in ("192.0.2.44", "192.0.2.45, 10.0.0.1", None):
            assert sign_in(base, "pw-arthur", forged) == 429, forged
    finally:
        stop(proc)
        unlock(install)


def test_daphne_behind_one_declared_proxy_reads_what_the_proxy_saw(install):
    # The test is the proxy: it appends the client's address (198.51.100.7) to whatever
    # X-Forwarded-For the client sent. daphne's --proxy-headers is allowed here, and harmless.
    proc, base = start(install, "--proxy-headers", proxies=1)
    try:
        wait_ready(proc, base)
        codes = [sign_in(base, "guess", f"192.0.2.{n}, 198.51.100.7") for n in range(LIMIT)]
        assert codes == [200] * (LIMIT - 1) + [429]
        assert sign_in(base, "pw-arthur", "192.0.2.44, 198.51.100.7") == 429
        assert sign_in(base, "pw-arthur", "192.0.2.45, 10.0.0.1, 198.51.100.7") == 429
        # Another client behind the same proxy is not locked.
        assert sign_in(base, "pw-arthur", "203.0.113.9") == 302
    finally:
        stop(proc)
        unlock(install)


def test_daphne_with_proxy_headers_and_no_declared_proxy_refuses_to_start(install):
    proc, _ = start(install, "--proxy-headers")
    try:
        _, stderr = proc.communicate(timeout=START_WITHIN)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode != 0
    assert "start daphne without --proxy-headers" in stderr
