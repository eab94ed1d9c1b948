"""A live agentops for the client's tests, with an external agent and a way to decide."""

import json
import urllib.request

from tests.livesupport import UpServer, opener

AGENT_SETUP = """
from gateway.models import ExternalAgent, ExternalTool
agent, _ = ExternalAgent.objects.get_or_create(slug={slug!r}, defaults={{"title": {slug!r}}})
agent.gates = {gates!r}
agent.save()
ExternalTool.objects.get_or_create(
    agent=agent, name="read_file", defaults={{"reversible": True, "blast": "none"}}
)
ExternalTool.objects.get_or_create(
    agent=agent, name="Read", defaults={{"reversible": True, "blast": "none"}}
)
ExternalTool.objects.get_or_create(
    agent=agent, name="pay_invoice",
    defaults={{"reversible": False, "blast": "low", "input_schema": {{
        "type": "object",
        "properties": {{"vendor": {{"type": "string"}}, "amount": {{"type": "number"}}}},
        "required": ["vendor", "amount"]}}}},
)
print(agent.issue_token())
"""

GATES = {"always_gate": ["delete_branch", "Bash"], "thresholds": {"pay_invoice": {"amount": 500}}}


def external_agent(up: UpServer, slug: str = "ext-bot", gates: dict | None = None) -> str:
    """The agent's token (the agent is made if needed)."""
    return up.manage(AGENT_SETUP.format(slug=slug, gates=gates or GATES)).strip().splitlines()[-1]


class Approver:
    """The demo approver, deciding over the approvals API with a token of their own."""

    def __init__(self, up: UpServer):
        self.up = up
        token = up.manage(
            "from accounts.models import ApiToken, User; "
            "print(ApiToken.issue(User.objects.get(username='approver'), 'tests')[1])"
        )
        self.token = token.strip().splitlines()[-1]

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            self.up.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with opener().open(request, timeout=10) as response:
            return json.loads(response.read())

    def pending(self, agent: str = "") -> list[str]:
        """The pending approvals (of one agent's runs), oldest first."""
        query = f"/api/approvals?status=pending&agent={agent}" if agent else "/api/approvals"
        return [a["id"] for a in self._request("GET", query)["items"]]

    def decide(self, approval: str, decision: str = "approve", *, arguments=None, reason=""):
        shown = self._request("GET", f"/api/approvals/{approval}")["arguments_hash"]
        body = {"decision": decision, "reason": reason, "shown_args_hash": shown}
        if arguments is not None:
            body["arguments"] = arguments
        return self._request("POST", f"/api/approvals/{approval}/decision", body)["status"]
