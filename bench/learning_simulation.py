"""The learning gate policy's simulation at full size: thousands of gated calls decided by
scripted approvers through the real decision service, every promise checked from the record.

    uv run python bench/learning_simulation.py [--decisions 3000]

The suite runs the same test (tests/approvals/test_learning_simulation.py) with 450 decisions,
enough for every shift and every promise; this runs it at the size where rare paths (a rule
revoked by a late contradiction, a rule that expires mid-shift) happen many times. Prints the
test's summary line, the decisions per second and the machine's load.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/approvals/test_learning_simulation.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=3000)
    args = parser.parse_args()
    env = {**os.environ, "SIM_DECISIONS": str(args.decisions)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "--timeout=0", TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    summary = [line for line in proc.stdout.splitlines() if "decisions," in line]
    print(proc.stdout[-3000:] if proc.returncode else "\n".join(summary))
    print(f"{args.decisions} decisions in {took:.1f} s ({args.decisions / took:.1f}/s)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("all promises held" if proc.returncode == 0 else "FAILED: a promise did not hold")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
