"""The Claude Agent SDK's permission hook, decided in agentops.

With the SDK (pip install claude-agent-sdk) and Claude Code, an agent gets the hook as

    options = ClaudeAgentOptions(can_use_tool=can_use_tool(session, hints=HINTS))
    async with ClaudeSDKClient(options=options) as claude: ...

Offline, this script plays the SDK's part with a scripted model: it calls the hook exactly as
the SDK does (tool name, input, context) for each tool use the "model" proposes, and runs the
tool with the input the hook allows.

    AGENTOPS_TOKEN=aoa_… uv run python examples/claude_agent_sdk_hook.py
"""

import asyncio
import os

from agentops_client import AgentopsClient
from agentops_client.claude import can_use_tool

# Hints can only raise a tool's risk: Read runs at once only where an admin registered it
# as reversible with no blast radius (the tests do); otherwise a person decides it too.
HINTS = {"Bash": {"reversible": False, "blast": "high"}}
# The scripted model's tool uses, in order.
SCRIPT = [("Read", {"file_path": "README.md"}), ("Bash", {"command": "git branch -D old-feature"})]


async def main() -> None:
    client = AgentopsClient(
        os.environ.get("AGENTOPS_URL", "http://127.0.0.1:8000"), os.environ["AGENTOPS_TOKEN"]
    )
    session = client.session("claude agent sdk example")
    hook = can_use_tool(
        session, hints=HINTS, summary=lambda tool, args: f"Cleaning up: {tool} {args}"
    )
    for tool_name, tool_input in SCRIPT:
        result = await hook(tool_name, tool_input, None)  # what the SDK calls before a tool
        if result.behavior == "allow":
            print(f"RUN {tool_name} {result.updated_input}")
        else:
            print(f"DENIED {tool_name}: {result.message}")
    session.close()


if __name__ == "__main__":
    asyncio.run(main())
