"""Soak the production topology: N runs through daphne + Celery workers + beat, decided over
the API like an operator would, then the exactly-once and integrity checks.

Start the topology yourself (docs/operations/topology.md; `manage.py seed_demo` for the
operator and approver users, `manage.py issue_token operator|approver` for the tokens), then,
with the same environment (DATABASE_URL, REDIS_URL, SECRET_KEY...) so the checks read the same
database:

    uv run python bench/soak.py --base http://127.0.0.1:8611 --runs 30 \\
        --operator-token "$(cat op.tok)" --approver-token "$(cat ap.tok)"

What it does:
1. launches --runs runs, alternating refund-desk (one order each, gated refund above 500) and
   sql-analyst (half report to an off-allow-list address, so the e-mail is gated);
2. cancels every --cancel-every-th run right after launch;
3. decides every pending approval in turn: approve, edit-and-approve (a smaller refund, another
   subject), reject;
4. watches one run over `/ws/runs/<id>/?after=0` (a session made for the operator) and checks
   each seq arrives once and in order;
5. waits (at most --timeout seconds) until every run is finished, then checks: termination
   reason matches the decisions, hash chain verifies, seq contiguous, one Refund per approved
   refund, one e-mail per approved/ungated send, no run left queued/running.
Prints throughput (runs/min), step latency p50/p99 (time between consecutive steps written by
a worker, excluding time waiting for people) and each check's result; exits 1 on a failure.
"""

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

TERMINAL = {"succeeded", "failed", "cancelled"}


def api(
    base: str, token: str, method: str, path: str, body: dict | None = None
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def watch(base: str, run_id: str, session_key: str, seen: list[int], stop: threading.Event):
    """Collect the seqs the run's WebSocket delivers (HTML fragments carry data-seq)."""
    import websockets

    url = base.replace("http", "ws", 1) + f"/ws/runs/{run_id}/?after=0"
    headers = {"Cookie": f"sessionid={session_key}", "Origin": base}

    async def main():
        async with websockets.connect(url, additional_headers=headers) as ws:
            while not stop.is_set():
                try:
                    message = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                seen.extend(
                    int(s) for s in re.findall(r'class="step[^"]*"[^>]*data-seq="(\d+)"', message)
                )

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cancel-every", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=300)
    # Each refund-desk run gets its own order (the shop has 400): customer e-mails are counted
    # per order, so use a fresh range on a database that has soaked before.
    parser.add_argument("--first-order", type=int, default=1)
    parser.add_argument("--operator-token", required=True)
    parser.add_argument("--approver-token", required=True)
    args = parser.parse_args()

    import django

    django.setup()
    from django.db.models import Count

    from approvals.models import Approval
    from demo.models import OutboxEmail, Refund
    from runs.models import Run, SideEffect
    from tests.support.topology_setup import session_for

    base, op, ap = args.base, args.operator_token, args.approver_token
    # Effects are counted per order: an order a previous soak touched would count twice.
    orders = [args.first_order + i for i in range(0, args.runs, 2)]
    if Refund.objects.filter(order_id__in=orders).exists() or max(orders) > 400:
        print(f"orders {orders[0]}..{orders[-1]} were refunded before (or beyond the shop's 400)")
        print("pass a fresh --first-order, or use a fresh database")
        return 2
    started = time.monotonic()
    runs: dict[str, dict] = {}
    for i in range(args.runs):
        if i % 2 == 0:
            order = args.first_order + i
            body = {"agent": "refund-desk", "input": {"order_id": order, "reason": "soak"}}
        else:
            to = "analytics@example.com" if i % 4 == 1 else f"boss{i}@example.com"
            body = {
                "agent": "sql-analyst",
                "input": {"question": f"Revenue {i} at {started:.0f}?", "report_to": to},
            }
        status, out = api(base, op, "POST", "/api/runs", body)
        assert status == 201, (status, out)
        runs[out["id"]] = {"body": body, "decisions": [], "asked": [], "cancelled": False}
        if args.cancel_every and i % args.cancel_every == args.cancel_every - 1:
            status, _ = api(base, op, "POST", f"/api/runs/{out['id']}/cancel", {})
            runs[out["id"]]["cancelled"] = status == 200

    # Watch the first refund run live.
    watched = next(iter(runs))
    session_key = session_for("operator")
    seen: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(base, watched, session_key, seen, stop))
    watcher.start()

    deadline = time.monotonic() + args.timeout
    turn = 0
    while time.monotonic() < deadline:
        status, page = api(base, ap, "GET", "/api/approvals?status=pending&limit=100")
        for item in page.get("items", []):
            if str(item["run"]) not in runs or not item["can_decide"]:
                continue
            choice = ("approve", "edit", "reject")[turn % 3]
            turn += 1
            body: dict = {"decision": "approve"}
            if choice == "edit":
                edited = dict(item["arguments"])
                if item["tool"] == "issue_refund":
                    half = Decimal(str(edited["amount"])) / 2
                    edited["amount"] = str(half.quantize(Decimal("0.01")))
                else:
                    edited["subject"] = "Edited by the soak"
                body = {"decision": "approve", "arguments": edited}
            elif choice == "reject":
                body = {"decision": "reject", "reason": "soak says no"}
            code, out = api(base, ap, "POST", f"/api/approvals/{item['id']}/decision", body)
            runs[str(item["run"])]["decisions"].append((item["tool"], choice, code))
            runs[str(item["run"])]["asked"].append((item["tool"], item["arguments"]))
        statuses = dict(Run.objects.filter(pk__in=runs).values_list("pk", "status"))
        if all(s in TERMINAL for s in statuses.values()):
            break
        time.sleep(0.3)
    elapsed = time.monotonic() - started
    time.sleep(1)
    stop.set()
    watcher.join()

    failures: list[str] = []
    gaps: list[float] = []
    for run in Run.objects.filter(pk__in=runs):
        info = runs[str(run.pk)]
        where = f"run {run.pk} ({run.agent})"
        if run.status not in TERMINAL:
            failures.append(f"{where}: still {run.status}")
            continue
        ok, bad_seq = run.verify_chain()
        if not ok:
            failures.append(f"{where}: chain breaks at seq {bad_seq}")
        steps = list(run.steps.order_by("seq").values_list("seq", "kind", "created_at"))
        if [s for s, _, _ in steps] != list(range(1, len(steps) + 1)):
            failures.append(f"{where}: seq not contiguous")
        for (_, kind, at), (_, _, before) in zip(steps[1:], steps):
            if kind in ("llm", "tool"):
                gaps.append((at - before).total_seconds())
        # A rejection goes back to the agent, which finishes without the call: "completed".
        expect = "cancelled" if info["cancelled"] else "completed"
        if run.termination_reason != expect:
            failures.append(f"{where}: {run.termination_reason or run.status}, expected {expect}")
        decided = {t: c for t, c, code in info["decisions"] if code == 200}
        if len(decided) != len([d for d in info["decisions"] if d[2] == 200]):
            failures.append(f"{where}: two decisions applied to one tool: {info['decisions']}")
        committed = dict(
            SideEffect.objects.filter(run=run, status="committed")
            .values_list("tool")
            .annotate(n=Count("pk"))
        )
        agent_input = info["body"]["input"]
        if run.agent == "refund-desk":
            refunds = list(Refund.objects.filter(run_id=run.pk))
            # The body names the order; an edit may have changed the subject.
            mails = OutboxEmail.objects.filter(
                body__endswith=f" for order {agent_input['order_id']}."
            ).count()
            effects = {"issue_refund": len(refunds), "send_customer_email": mails}
            if expect == "completed":
                want_refund = 0 if decided.get("issue_refund") == "reject" else 1
                want_mail = (
                    0 if not want_refund or decided.get("send_customer_email") == "reject" else 1
                )
                if (len(refunds), mails) != (want_refund, want_mail):
                    failures.append(
                        f"{where}: {len(refunds)} refunds, {mails} e-mails, decisions {decided}"
                    )
            gate_args = {t: a for t, a in info["asked"]}
            if decided.get("issue_refund") == "edit" and refunds:
                half = (Decimal(str(gate_args["issue_refund"]["amount"])) / 2).quantize(
                    Decimal("0.01")
                )
                if refunds[0].amount != half:
                    failures.append(
                        f"{where}: edited refund applied as {refunds[0].amount}, not {half}"
                    )
        else:
            sent = list(
                OutboxEmail.objects.filter(
                    body__startswith=f"Question: {agent_input['question']}\n"
                )
            )
            effects = {"email_report": len(sent)}
            want = 0 if decided.get("email_report") == "reject" else 1
            if expect == "completed" and len(sent) != want:
                failures.append(f"{where}: {len(sent)} report e-mails, decisions {decided}")
            if (
                decided.get("email_report") == "edit"
                and sent
                and sent[0].subject != "Edited by the soak"
            ):
                failures.append(f"{where}: edited report sent as {sent[0].subject!r}")
        for tool, count in effects.items():
            if count > 1 or count != committed.get(tool, 0):
                failures.append(
                    f"{where}: {tool} happened {count} times, ledger says {committed.get(tool, 0)}"
                )

    watched_run = Run.objects.get(pk=watched)
    if seen != list(range(1, watched_run.last_seq + 1)):
        failures.append(f"websocket of {watched}: got seqs {seen}, run has {watched_run.last_seq}")
    left = Run.objects.filter(status__in=["queued", "running"], pk__in=runs).count()
    reasons: dict[str, int] = {}
    for r in Run.objects.filter(pk__in=runs).values_list("termination_reason", flat=True):
        reasons[r or "-"] = reasons.get(r or "-", 0) + 1
    pending = Approval.objects.filter(run__in=runs, status="pending").count()

    print(f"runs: {len(runs)} in {elapsed:.1f} s = {len(runs) / elapsed * 60:.1f} runs/min")
    print(
        f"termination reasons: {reasons}; left queued/running: {left}; pending approvals: {pending}"
    )
    if gaps:
        print(
            f"step latency (llm/tool step after the previous one), n={len(gaps)}: "
            f"p50 {percentile(gaps, 50) * 1000:.0f} ms, p99 {percentile(gaps, 99) * 1000:.0f} ms, "
            f"mean {statistics.mean(gaps) * 1000:.0f} ms"
        )
    in_order = seen == sorted(set(seen))
    print(f"websocket watched {watched}: {len(seen)} steps, once each and in order: {in_order}")
    for failure in failures:
        print("FAIL", failure)
    print("OK" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
