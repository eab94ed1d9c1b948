"""The browser script's reconnect delay (static/js/app.js), computed by node from the script as
served: browsers that lost their server together must not come back together."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")


@pytest.fixture(scope="module")
def delays() -> dict[int, list[float]]:
    if NODE is None:
        pytest.skip("node is not installed (the browser tests check the same in Chromium)")
    out = subprocess.run(
        [NODE, str(ROOT / "tests/js/reconnect_delay.js"), str(ROOT / "static/js/app.js"), "2000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {int(retry): values for retry, values in json.loads(out.stdout).items()}


def test_a_fleet_reconnects_spread_over_seconds_not_in_one_wave(delays):
    first = delays[0]
    # 2 000 browsers back from the same restart: spread over most of 0.25-3 s.
    assert min(first) < 500 and max(first) > 2500
    # No second of the window gets much more than its share (uniform: 1/2.75 of them).
    per_half_second = [sum(a <= d < a + 500 for d in first) for a in range(250, 2750, 500)]
    assert max(per_half_second) < 0.25 * len(first), per_half_second


def test_every_retry_comes_within_a_few_seconds(delays):
    for retry, values in delays.items():
        assert all(250 <= d <= 4000 for d in values), retry
        assert max(values) - min(values) > 2500, retry  # still jittered after many tries
