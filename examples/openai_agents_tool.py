"""An OpenAI Agents SDK function tool that asks agentops before it runs.

With the SDK (pip install openai-agents), the tool is given to an agent as

    from agents import Agent, function_tool
    agent = Agent(name="payer", tools=[function_tool(gated(session, pay_invoice))])

`gated` keeps the function's name, docstring and signature (the tool's schema), asks agentops
before each call, and runs the function with exactly the approved (maybe edited) arguments;
a rejection is the tool's output, which the model reads. The tool is a coroutine function, so
the SDK's per-tool timeout applies to it. Offline, this script plays the model's part: it
awaits the tool as the SDK would, with the arguments the "model" chose.

    AGENTOPS_TOKEN=aoa_… uv run python examples/openai_agents_tool.py
"""

import asyncio
import os

from agentops_client import AgentopsClient
from agentops_client.openai_agents import gated


def pay_invoice(vendor: str, amount: float) -> str:
    """Pay a vendor's invoice."""
    return f"paid {amount} to {vendor}"


def main() -> None:
    client = AgentopsClient(
        os.environ.get("AGENTOPS_URL", "http://127.0.0.1:8000"), os.environ["AGENTOPS_TOKEN"]
    )
    session = client.session("openai agents sdk example")
    tool = gated(session, pay_invoice, hints={"reversible": False, "blast": "low"})
    # The scripted model's call: what Runner.run would invoke.
    print("TOOL OUTPUT:", asyncio.run(tool(vendor="acme", amount=900.0)))
    session.close()


if __name__ == "__main__":
    main()
