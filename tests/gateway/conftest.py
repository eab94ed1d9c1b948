"""An external agent with a token, and helpers to call the gateway API as it."""

import pytest
from django.test import Client

from gateway.models import ExternalAgent, ExternalTool

INVOICE_LIMIT_ARGS = {"vendor": "acme", "amount": 900}  # over pay_invoice's threshold: gated
GATES = {
    "always_gate": ["delete_branch"],
    "thresholds": {"pay_invoice": {"amount": 500}},
    "four_eyes_from": "high",
    "approval_timeout_seconds": 600,
}


def make_agent(slug: str = "ci-bot", gates: dict | None = None) -> tuple[ExternalAgent, str]:
    agent = ExternalAgent.objects.create(
        slug=slug, title=slug, gates=GATES if gates is None else gates
    )
    ExternalTool.objects.create(
        agent=agent,
        name="pay_invoice",
        reversible=False,
        blast="low",
        input_schema={
            "type": "object",
            "properties": {"vendor": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["vendor", "amount"],
            "additionalProperties": False,
        },
    )
    ExternalTool.objects.create(agent=agent, name="read_file", reversible=True, blast="none")
    return agent, agent.issue_token()


class AgentClient:
    """The gateway API as one agent calls it."""

    def __init__(self, token: str):
        self.http = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def post(self, path: str, body: dict | None = None):
        return self.http.post(f"/api/external{path}", body or {}, content_type="application/json")

    def get(self, path: str):
        return self.http.get(f"/api/external{path}")

    def session(self, **body) -> str:
        response = self.post("/sessions", body)
        assert response.status_code == 201, response.content
        return response.json()["session"]

    def call(self, session: str, tool: str, args: dict, **more):
        return self.post(f"/sessions/{session}/calls", {"tool": tool, "args": args, **more})


@pytest.fixture
def agent(db):
    return make_agent()


@pytest.fixture
def bot(agent) -> AgentClient:
    return AgentClient(agent[1])


@pytest.fixture(scope="package")
def up(tmp_path_factory):
    """One live `manage.py up` for the modules that drive agentops over HTTP (the client,
    the adapters): starting one costs seconds of CI."""
    from tests.livesupport import kill_up, start_up, stop_up

    server = start_up(tmp_path_factory.mktemp("gateway-live-var"))
    try:
        yield server
        stop_up(server)
    finally:
        kill_up(server)


@pytest.fixture(scope="package")
def live_approver(up):
    """The demo approver of the live agentops, deciding over its API."""
    from .live_agentops import Approver

    return Approver(up)
