"""An agent that asks agentops before paying an invoice, with the plain client.

AGENTOPS_TOKEN=aoa_… uv run python examples/plain_request_approval.py [amount]
"""

import os
import sys

from agentops_client import AgentopsClient


def main() -> None:
    client = AgentopsClient(
        os.environ.get("AGENTOPS_URL", "http://127.0.0.1:8000"), os.environ["AGENTOPS_TOKEN"]
    )
    session = client.session("plain example")
    print(f"session: {client.base_url}{session.run_url}")
    amount = float(sys.argv[1]) if len(sys.argv) > 1 else 900.0
    decision = session.request_approval(
        "pay_invoice",
        {"vendor": "acme", "amount": amount},
        hints={"reversible": False, "blast": "low"},
        summary=f"Paying acme's March invoice of {amount}",
    )
    if decision.approved:
        # Run exactly what was approved: an approver may have edited the arguments.
        print(f"PAY {decision.args} ({decision.status} by {decision.decided_by or 'policy'})")
        session.report(decision, result={"paid": decision.args["amount"]})
        session.close("succeeded", output="invoice paid")
    else:
        print(f"NOT PAID: {decision.status}: {decision.reason}")
        session.close("failed", detail=decision.reason)


if __name__ == "__main__":
    main()
