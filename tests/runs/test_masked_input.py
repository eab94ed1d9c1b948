"""A run's input under its agent's PII policy is shown as the timeline keeps it, masked: the
run page's header, the runs list and audit list, the runs API (list and detail), exports,
and the approval card and API's run context. The run itself keeps the raw input (its model
works from it); an agent without a policy shows its input as given."""

import dataclasses
import json

import pytest

from agentkit.llm.scripted import text, tool_use
from agentkit.pii import PiiPolicy
from approvals.models import Approval
from runs import engine
from runs.models import Run

pytestmark = pytest.mark.django_db

CARD = "4242 4242 4242 4242"
MASKED = "**** **** **** 4242"
TASK = f"Refund the card {CARD} please"


@pytest.fixture
def launch(test_agent, no_enqueue, script):
    def make(policy: PiiPolicy | None) -> Run:
        script([[text("Asking."), tool_use("t_gated", n=1)], [text("Done.")]])
        agent = dataclasses.replace(test_agent, pii=policy)
        run = engine.launch(agent=agent, input={"task": TASK, "script": ""}, provider="scripted")
        assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
        run.refresh_from_db()
        return run

    return make


def body(response) -> str:
    assert response.status_code == 200, response
    return (b"".join(response) if response.streaming else response.content).decode()


def test_the_input_is_masked_on_every_surface(launch, viewer, approver, client):
    run = launch(PiiPolicy(on_tool_args="gate"))
    assert run.input["task"] == TASK  # kept raw: the run works from it
    assert MASKED in run.input_summary and CARD not in run.input_summary

    client.force_login(viewer)
    page = body(client.get(f"/runs/{run.pk}/"))
    header = page[page.index('id="run-header"') : page.index('id="timeline"')]
    assert f"task Refund the card {MASKED} please" in header
    for name, url in {
        "runs list": "/runs/",
        "audit": "/audit/",
        "runs API": "/api/runs",
        "run API": f"/api/runs/{run.pk}",
        "export JSON": f"/runs/{run.pk}/export.json",
        "export JSONL": f"/runs/{run.pk}/export.jsonl",
        "run page": f"/runs/{run.pk}/",
    }.items():
        shown = body(client.get(url))
        assert CARD not in shown, name
        assert MASKED in shown, name
    detail = client.get(f"/api/runs/{run.pk}").json()
    assert detail["input"] == {"task": f"Refund the card {MASKED} please", "script": ""}
    assert detail["input_summary"] == run.input_summary

    client.force_login(approver)
    approval = Approval.objects.get(run=run)
    card = body(client.get(f"/approvals/{approval.pk}/"))
    assert CARD not in card and MASKED in card
    context = client.get(f"/api/approvals/{approval.pk}").json()["run_context"]
    assert context["input"]["task"] == f"Refund the card {MASKED} please"


def test_without_a_policy_the_input_is_shown_as_given(launch, viewer, client):
    run = launch(None)
    client.force_login(viewer)
    assert CARD in run.input_summary
    assert client.get(f"/api/runs/{run.pk}").json()["input"]["task"] == TASK
    assert CARD in body(client.get("/runs/"))


def test_the_output_in_the_run_api_is_masked_like_the_export(launch, viewer, client):
    run = launch(PiiPolicy(on_tool_args="gate"))  # the output itself is not guarded
    Run.objects.filter(pk=run.pk).update(output=f"Charged {CARD}.")
    client.force_login(viewer)
    assert client.get(f"/api/runs/{run.pk}").json()["output"] == f"Charged {MASKED}."
    exported = json.loads(body(client.get(f"/runs/{run.pk}/export.json")))
    assert exported["run"]["output"] == f"Charged {MASKED}."


def test_an_operators_instruction_is_masked_where_it_is_shown(launch, operator, client):
    run = launch(PiiPolicy(on_tool_args="gate"))
    client.force_login(operator)
    typed = f"Refund to the card {CARD} instead"
    response = client.post(
        f"/runs/{run.pk}/instructions/",
        {"text": typed, "key": "pii-1"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="run-steer",
    )
    assert response.status_code == 200
    assert run.instructions.get().text == typed  # the agent gets it as typed
    for name, shown in {
        "the instruct answer": body(response),
        "run page": body(client.get(f"/runs/{run.pk}/")),
        "steer API": json.dumps(client.get(f"/api/runs/{run.pk}/steer").json()),
    }.items():
        assert CARD not in shown, name
        assert f"Refund to the card {MASKED} instead" in shown, name
