"""Fork and replay from the run page and the API; import over the API. Roles and CSRF hold,
bad input is a clear 4xx, model text is shown escaped."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from history.transfer import import_run
from runs.models import Run, Step
from tests.history.test_transfer import rehomed

pytestmark = pytest.mark.django_db


def logged_in(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def bearer(user) -> Client:
    _, raw = ApiToken.issue(user, "history-tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def lookup_seq(run: Run) -> int:
    return run.steps.get(kind=Step.Kind.TOOL, data__tool="lookup_order").seq


def test_the_run_page_offers_fork_and_replay_to_operators(refunded, operator, viewer):
    page = logged_in(operator).get(reverse("runs:detail", args=[refunded.pk])).content.decode()
    assert reverse("history:fork", args=[refunded.pk, refunded.last_seq]) in page
    assert reverse("history:replay", args=[refunded.pk]) in page
    page = logged_in(viewer).get(reverse("runs:detail", args=[refunded.pk])).content.decode()
    assert reverse("history:fork", args=[refunded.pk, refunded.last_seq]) not in page


def test_forking_from_the_page_launches_a_linked_run(refunded, operator, no_enqueue):
    url = reverse("history:fork", args=[refunded.pk, lookup_seq(refunded)])
    client = logged_in(operator)
    page = client.get(url)
    assert page.status_code == 200
    response = client.post(url, {"instruction": "Refund only half."})
    child = Run.objects.get(trigger=Run.Trigger.FORK)
    assert response.status_code == 302 and response["Location"] == f"/runs/{child.pk}/"
    assert child.steps.get(seq=1).data["instruction"] == "Refund only half."
    origin_page = client.get(reverse("runs:detail", args=[refunded.pk])).content.decode()
    child_page = client.get(reverse("runs:detail", args=[child.pk])).content.decode()
    assert f'href="/runs/{child.pk}/"' in origin_page
    assert f'href="/runs/{refunded.pk}/"' in child_page
    assert f"at checkpoint #{lookup_seq(refunded)}" in child_page


def test_a_fork_that_cannot_be_made_says_why_and_launches_nothing(refunded, operator):
    url = reverse("history:fork", args=[refunded.pk, refunded.last_seq])
    response = logged_in(operator).post(url, {"instruction": "  "})
    assert response.status_code == 422
    assert b"add an instruction" in response.content
    assert not Run.objects.filter(trigger=Run.Trigger.FORK).exists()
    missing = reverse("history:fork", args=[refunded.pk, 999])
    assert logged_in(operator).get(missing).status_code == 404


def test_fork_and_replay_need_the_operator_role_and_csrf(refunded, operator, viewer):
    fork_url = reverse("history:fork", args=[refunded.pk, lookup_seq(refunded)])
    replay_url = reverse("history:replay", args=[refunded.pk])
    for url in (fork_url, replay_url):
        assert logged_in(viewer).get(url).status_code == 403
        assert logged_in(viewer).post(url).status_code == 403
        assert logged_in(operator, csrf=True).post(url).status_code == 403
        assert Client().get(url).status_code == 302  # to the login page
    assert not Run.objects.filter(trigger=Run.Trigger.FORK).exists()


def test_the_fork_page_shows_tool_output_escaped(refunded, operator):
    seq = lookup_seq(refunded)
    export = logged_in(operator).get(reverse("runs:export", args=[refunded.pk, "json"]))
    doc = json.loads(export.getvalue().decode())
    for step in doc["steps"]:
        if step["seq"] == seq:
            step["data"]["result"] = {"note": "<script>alert(1)</script>"}
    copy = import_run(json.dumps(rehomed(doc)))
    page = logged_in(operator).get(reverse("history:fork", args=[copy.pk, seq])).content
    assert b"<script>alert(1)</script>" not in page
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_replay_page_compares_step_by_step(refunded, operator):
    url = reverse("history:replay", args=[refunded.pk])
    client = logged_in(operator)
    assert b"Replay now" in client.get(url).content
    page = client.post(url).content.decode()
    assert 'data-identical="true"' in page
    assert page.count("<tr>") - 1 == refunded.last_seq  # a row per step, none marked


def test_the_api_forks_replays_and_imports(refunded, operator, viewer, admin_user, no_enqueue):
    response = bearer(operator).post(
        f"/api/runs/{refunded.pk}/fork",
        {"seq": lookup_seq(refunded), "instruction": "Go on."},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["trigger"], body["parent_id"]) == ("fork", str(refunded.pk))

    response = bearer(operator).post(
        f"/api/runs/{refunded.pk}/fork", {"seq": 999}, content_type="application/json"
    )
    assert response.status_code == 422 and "no checkpoint" in response.json()["detail"]
    response = bearer(operator).post(
        f"/api/runs/{refunded.pk}/fork", {"seq": 0}, content_type="application/json"
    )
    assert response.status_code == 422
    assert bearer(viewer).post(f"/api/runs/{refunded.pk}/replay").status_code == 403

    replayed = bearer(operator).post(f"/api/runs/{refunded.pk}/replay").json()
    assert replayed["identical"] is True and replayed["compared"] == refunded.last_seq

    export = logged_in(operator).get(reverse("runs:export", args=[refunded.pk, "json"]))
    doc = rehomed(json.loads(export.getvalue().decode()))
    text = "\n".join(json.dumps(line) for line in [{"run": doc["run"]}, *doc["steps"]])
    assert bearer(operator).post("/api/imports", text, content_type="text/plain").status_code == 403
    response = bearer(admin_user).post("/api/imports", text, content_type="text/plain")
    assert response.status_code == 201, response.content
    assert response.json()["id"] == doc["run"]["id"]
    again = bearer(admin_user).post("/api/imports", text, content_type="text/plain")
    assert again.status_code == 422 and "is here already" in again.json()["detail"]
    garbage = bearer(admin_user).post("/api/imports", b"\xff\xfe", content_type="text/plain")
    assert garbage.status_code == 422
