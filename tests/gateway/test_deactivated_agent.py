"""An external agent switched off (`ExternalAgent.active = False`) is refused with 401 on
every gateway endpoint, its token otherwise unchanged; other agents go on. The endpoints are
walked from the gateway's router, so one added later is checked too."""

import re

import pytest
from django.test import Client

from gateway.api import router
from gateway.models import ExternalAgent

from .conftest import AgentClient, make_agent

pytestmark = pytest.mark.django_db

PARAM = re.compile(r"\{(?:\w+:)?(\w+)\}")


def endpoints(ids: dict[str, str]) -> list[tuple[str, str]]:
    """(method, URL) of every gateway operation, its path parameters filled from `ids`."""
    found = []
    for path, view in router.path_operations.items():
        names = PARAM.findall(path)
        missing = [name for name in names if name not in ids]
        assert not missing, f"{path}: give this test an id for {missing}"
        url = "/api" + PARAM.sub(lambda m: ids[m.group(1)], path)
        for operation in view.operations:
            for method in operation.methods:
                found.append((method, url))
                if method == "GET":
                    found.append((method, url + "?wait=5"))  # a long-poll
    return found


def send(client: Client, method: str, url: str):
    if method == "GET":
        return client.get(url)
    return client.generic(method, url, "{}", content_type="application/json")


@pytest.fixture
def agent_with_a_pending_call():
    agent, token = make_agent()
    bot = AgentClient(token)
    session = bot.session()
    body = bot.call(session, "delete_branch", {"name": "dev"}).json()
    assert body["status"] == "pending"
    return agent, token, {"session_id": session, "call_id": body["call"]}


def test_a_deactivated_agent_gets_401_on_every_endpoint(agent_with_a_pending_call):
    agent, token, ids = agent_with_a_pending_call
    walked = endpoints(ids)
    assert len({url for _, url in walked}) >= len(router.path_operations)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    # While active, the same requests get past authentication (whatever they then answer).
    for method, url in walked:
        # Not closing (it would end the session the others use), nor long-polling a call
        # that stays pending (it would wait out its time).
        if not url.endswith(("/close", "?wait=5")):
            assert send(client, method, url).status_code != 401, (method, url)

    ExternalAgent.objects.filter(pk=agent.pk).update(active=False)
    for method, url in walked:
        response = send(client, method, url)
        assert response.status_code == 401, (method, url, response.content)
    assert AgentClient(token).get(f"/calls/{ids['call_id']}").status_code == 401


def test_deactivating_one_agent_leaves_the_others_working(agent_with_a_pending_call):
    agent, token, _ = agent_with_a_pending_call
    _, other_token = make_agent("other-bot")
    ExternalAgent.objects.filter(pk=agent.pk).update(active=False)
    other = AgentClient(other_token)
    session = other.session()
    assert other.call(session, "read_file", {"path": "a"}).status_code == 200
    assert AgentClient(token).post("/sessions").status_code == 401


def test_reactivating_an_agent_lets_its_token_back_in(agent_with_a_pending_call):
    agent, token, ids = agent_with_a_pending_call
    ExternalAgent.objects.filter(pk=agent.pk).update(active=False)
    assert AgentClient(token).get(f"/calls/{ids['call_id']}").status_code == 401
    ExternalAgent.objects.filter(pk=agent.pk).update(active=True)
    response = AgentClient(token).get(f"/calls/{ids['call_id']}")
    assert (response.status_code, response.json()["status"]) == (200, "pending")
