import json
import re

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from runs.models import Run, Step, canonical_json
from tests.html_checks import assert_payload_inert

from .factories import XSS, add_steps, make_run
from .harness import tamper

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(operator, no_enqueue):
    """Here, a running run with its launched step only (tests add what they show)."""
    return make_run(operator, status=Run.Status.RUNNING)


# --- access -----------------------------------------------------------------
PAGES = ["runs:dashboard", "runs:list", "runs:audit"]


@pytest.mark.parametrize("name", PAGES)
def test_pages_require_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("name", PAGES)
def test_a_user_without_a_role_is_refused(client, django_user_model, name):
    client.force_login(django_user_model.objects.create_user("nobody", password="x"))
    assert client.get(reverse(name)).status_code == 403


@pytest.mark.parametrize("name", PAGES)
def test_a_viewer_reads_every_page(client, viewer, name):
    client.force_login(viewer)
    assert client.get(reverse(name)).status_code == 200


def test_run_pages_need_a_role_too(client, django_user_model, run):
    client.force_login(django_user_model.objects.create_user("nobody", password="x"))
    for url in (
        reverse("runs:detail", args=[run.pk]),
        reverse("runs:export", args=[run.pk, "json"]),
        reverse("runs:audit_run", args=[run.pk]),
        reverse("runs:step", args=[run.pk, 1]),
    ):
        assert client.get(url).status_code == 403, url


def test_unknown_run_is_404(client, viewer):
    client.force_login(viewer)
    url = reverse("runs:detail", args=["00000000-0000-0000-0000-000000000000"])
    assert client.get(url).status_code == 404


def test_post_to_a_read_only_page_is_refused(client, operator):
    client.force_login(operator)
    assert client.post(reverse("runs:list")).status_code == 405
    assert client.post(reverse("runs:dashboard")).status_code == 405


# --- dashboard -----------------------------------------------------------------
def test_dashboard_shows_runs_in_flight_counts_failures_and_charts(
    client, viewer, operator, no_enqueue
):
    running = make_run(operator, status=Run.Status.RUNNING)
    failed = make_run(
        operator, status=Run.Status.FAILED, termination_reason="max_cost", status_detail="spent it"
    )
    client.force_login(viewer)
    html = client.get(reverse("runs:dashboard")).content.decode()
    assert f'id="inflight-{running.pk}"' in html
    assert f'id="inflight-{failed.pk}"' not in html
    assert "max cost reached" in html and "spent it" in html
    assert html.count("<svg") == 3
    assert 'ws-connect="/ws/runs/"' in html


def test_dashboard_stats_fragment_for_htmx_polling(client, viewer):
    client.force_login(viewer)
    response = client.get(
        reverse("runs:dashboard"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="dashboard-stats"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="dashboard-stats"')
    assert "<nav" not in html


def test_dashboard_counts_runs_in_flight_of_any_age_and_finished_ones_of_a_day(
    client, viewer, operator, no_enqueue
):
    from datetime import timedelta

    from django.utils import timezone

    old = [
        make_run(operator, status=Run.Status.WAITING),
        make_run(operator, status=Run.Status.FAILED),
    ]
    Run.objects.filter(pk__in=[r.pk for r in old]).update(
        created_at=timezone.now() - timedelta(days=3)
    )
    make_run(operator, status=Run.Status.FAILED)
    make_run(operator, status=Run.Status.SUCCEEDED)
    make_run(operator)
    client.force_login(viewer)
    response = client.get(reverse("runs:dashboard"))
    assert response.context["in_flight_counts"] == {"queued": 1, "running": 0, "waiting": 1}
    assert response.context["finished_counts"] == {"succeeded": 1, "failed": 1, "cancelled": 0}
    assert "in 24 h" in response.content.decode()


def test_the_stats_refresh_reads_no_runs_in_flight(
    client, viewer, operator, no_enqueue, monkeypatch
):
    from runs import rendering

    make_run(operator, status=Run.Status.RUNNING)
    shown = []
    run_context = rendering.run_context
    monkeypatch.setattr(rendering, "run_context", lambda run: shown.append(run) or run_context(run))
    client.force_login(viewer)
    response = client.get(
        reverse("runs:dashboard"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="dashboard-stats"
    )
    assert "Runs by status" in response.content.decode()
    assert shown == []
    client.get(reverse("runs:dashboard"))
    assert len(shown) == 1


def test_dashboard_queries_do_not_grow_with_runs(
    client, viewer, operator, no_enqueue, django_assert_max_num_queries
):
    for _ in range(3):
        make_run(operator, status=Run.Status.RUNNING)
    client.force_login(viewer)
    client.get(reverse("runs:dashboard"))
    for _ in range(20):
        make_run(operator, status=Run.Status.RUNNING)
        make_run(operator, status=Run.Status.FAILED)
    # 14, and the drift flags' three (runs/drift.py).
    with django_assert_max_num_queries(17):
        assert client.get(reverse("runs:dashboard")).status_code == 200


# --- runs list -----------------------------------------------------------------
def test_run_list_rows_carry_the_contract_hooks(client, viewer, run):
    client.force_login(viewer)
    html = client.get(reverse("runs:list")).content.decode()
    assert f'class="run-row" data-run-id="{run.pk}" data-status="running"' in html
    assert 'id="run-rows-live"' in html  # unfiltered first page takes pushed new runs


def test_run_list_filters(client, viewer, operator, approver, no_enqueue):
    a = make_run(operator, status=Run.Status.SUCCEEDED, output="total revenue 42")
    b = make_run(approver, agent="refund-desk", status=Run.Status.FAILED)
    client.force_login(viewer)

    def ids(**params):
        html = client.get(reverse("runs:list"), params).content.decode()
        return {str(r.pk) for r in (a, b) if f'data-run-id="{r.pk}"' in html}

    assert ids() == {str(a.pk), str(b.pk)}
    assert ids(status="failed") == {str(b.pk)}
    assert ids(agent="sql-analyst") == {str(a.pk)}
    assert ids(launched_by="arthur") == {str(b.pk)}
    assert ids(q="revenue 42") == {str(a.pk)}  # output
    assert ids(q="boss@example") == {str(a.pk)}  # input
    assert ids(trigger="api") == set()
    assert ids(date_from="2000-01-01", date_to="2000-01-02") == set()
    html = client.get(reverse("runs:list"), {"status": "failed"}).content.decode()
    assert 'id="run-rows"' in html and "run-rows-live" not in html


def test_run_list_bad_filter_is_a_form_error_not_a_500(client, viewer):
    client.force_login(viewer)
    response = client.get(reverse("runs:list"), {"status": "nope", "date_from": "yesterday"})
    assert response.status_code == 200
    assert "field-error" in response.content.decode()


def _rows(html: str) -> list[str]:
    return re.findall(r'class="run-row" data-run-id="([^"]+)"', html)


def _link(html: str, name: str) -> str | None:
    """The pager's `name` (after / before) link's query, unescaped."""
    found = re.search(rf'href="\?([^"]*{name}=[^"]+)"', html)
    return found and found.group(1).replace("&amp;", "&")


def test_run_list_pages_by_keyset_with_constant_queries(
    client, viewer, operator, no_enqueue, django_assert_max_num_queries, monkeypatch
):
    from runs import views

    monkeypatch.setattr(views, "RUNS_PER_PAGE", 10)
    made = [str(make_run(operator).pk) for _ in range(25)][::-1]  # newest first
    client.force_login(viewer)
    with django_assert_max_num_queries(8):
        first = client.get(reverse("runs:list")).content.decode()
    assert _rows(first) == made[:10] and _link(first, "before") is None
    assert "25 runs" in first and 'id="run-rows-live"' in first
    with django_assert_max_num_queries(8):
        second = client.get(f"{reverse('runs:list')}?{_link(first, 'after')}").content.decode()
    assert _rows(second) == made[10:20]
    assert 'id="run-rows-live"' not in second  # new runs are not pushed into a later page
    third = client.get(f"{reverse('runs:list')}?{_link(second, 'after')}").content.decode()
    assert _rows(third) == made[20:] and _link(third, "after") is None
    back = client.get(f"{reverse('runs:list')}?{_link(third, 'before')}").content.decode()
    assert _rows(back) == made[10:20]


def test_run_list_pages_stay_put_when_runs_arrive_between_loads(
    client, viewer, operator, no_enqueue, monkeypatch
):
    from runs import views

    monkeypatch.setattr(views, "RUNS_PER_PAGE", 5)
    made = [str(make_run(operator).pk) for _ in range(12)][::-1]
    client.force_login(viewer)
    first = client.get(reverse("runs:list")).content.decode()
    arrived = [str(make_run(operator).pk) for _ in range(3)][::-1]
    # The older page follows on from what the reader saw: no row twice, none skipped.
    second = client.get(f"{reverse('runs:list')}?{_link(first, 'after')}").content.decode()
    assert _rows(second) == made[5:10]
    # Newer from there: the page the reader came from, and a link to the runs that arrived.
    newer = client.get(f"{reverse('runs:list')}?{_link(second, 'before')}").content.decode()
    assert _rows(newer) == made[:5]
    top = client.get(f"{reverse('runs:list')}?{_link(newer, 'before')}").content.decode()
    # Fewer than a page newer: the first page, filled up, new runs pushed into it live.
    assert _rows(top) == [*arrived, *made[:2]] and 'id="run-rows-live"' in top


def test_run_list_pager_keeps_the_filters_and_ignores_a_bad_cursor(
    client, viewer, operator, no_enqueue, monkeypatch
):
    from runs import views

    monkeypatch.setattr(views, "RUNS_PER_PAGE", 2)
    failed = [str(make_run(operator, status=Run.Status.FAILED).pk) for _ in range(3)][::-1]
    make_run(operator)
    client.force_login(viewer)
    first = client.get(reverse("runs:list"), {"status": "failed"}).content.decode()
    assert _rows(first) == failed[:2] and "3 runs" in first
    older = _link(first, "after")
    assert "status=failed" in older
    assert _rows(client.get(f"{reverse('runs:list')}?{older}").content.decode()) == failed[2:]
    for bad in ("x", "1.2", "99999999999999999999.00", "1." + "z" * 32, ""):
        response = client.get(reverse("runs:list"), {"after": bad, "before": bad})
        assert response.status_code == 200
        assert len(_rows(response.content.decode())) == 2
    audit = client.get(reverse("runs:audit"), {"status": "failed"}).content.decode()
    assert "after=" in audit


# --- launch -----------------------------------------------------------------
def test_only_operators_may_launch(client, viewer, approver):
    for user in (viewer, approver):
        client.force_login(user)
        assert client.get(reverse("runs:new")).status_code == 403
        assert client.post(reverse("runs:new"), {"agent": "sql-analyst"}).status_code == 403


def test_launch_form_swaps_the_agents_fields(client, operator):
    client.force_login(operator)
    html = client.get(reverse("runs:new")).content.decode()
    assert 'select name="agent"' in html and 'id="launch-form-fields"' in html
    assert 'button type="submit" id="launch"' in html
    response = client.get(
        reverse("runs:new"),
        {"agent": "refund-desk"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="launch-form-fields",
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="launch-form-fields">')
    assert 'name="order_id"' in html and 'name="question"' not in html
    assert 'name="limit_max_steps"' in html and 'name="limit_max_cost_usd"' in html


def test_launch_creates_a_form_run_and_redirects_to_it(
    client, operator, no_enqueue, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("runs:new"),
            {
                "agent": "sql-analyst",
                "question": "Top customers?",
                "report_to": "analytics@example.com",
                "limit_max_steps": "5",
                "limit_max_cost_usd": "0.25",
            },
        )
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    assert run.trigger == Run.Trigger.FORM and run.launched_by == operator
    assert run.source == "launch form"
    assert run.input == {"question": "Top customers?", "report_to": "analytics@example.com"}
    assert run.max_steps == 5 and str(run.max_cost_usd) == "0.2500"
    assert run.max_seconds == 300  # the agent's default
    assert no_enqueue == [str(run.pk)]


def test_launch_errors_are_shown_inline(client, operator, no_enqueue):
    client.force_login(operator)
    response = client.post(
        reverse("runs:new"),
        {
            "agent": "sql-analyst",
            "question": "",
            "report_to": "not-an-email",
            "limit_max_steps": "100000",
        },
    )
    html = response.content.decode()
    assert response.status_code == 422
    assert "This field is required." in html
    assert "Enter a valid email address." in html
    assert not Run.objects.exists()
    response = client.post(
        reverse("runs:new"),
        {
            "agent": "sql-analyst",
            "question": "q",
            "report_to": "a@example.com",
            "limit_max_steps": "100000",
        },
    )
    assert response.status_code == 422
    assert "must be at most 200" in response.content.decode()
    assert not Run.objects.exists()


def test_launch_with_an_unknown_agent_is_a_form_error(client, operator):
    client.force_login(operator)
    response = client.post(reverse("runs:new"), {"agent": "nope"})
    assert response.status_code == 422
    assert "Select a valid choice" in response.content.decode()


# --- run page -----------------------------------------------------------------
def test_run_page_has_header_timeline_and_live_socket(client, viewer, run):
    add_steps(run, 3)
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="run-header"' in html
    assert 'id="run-status" class="status status-running" data-status="running"' in html
    assert "scripted model" in html
    assert f'ws-connect="/ws/runs/{run.pk}/?after=4"' in html
    for seq, kind in [(1, "status"), (2, "llm"), (3, "tool"), (4, "llm")]:
        assert f'id="step-{seq}" data-seq="{seq}" data-kind="{kind}"' in html
    assert "$0.00120" in html  # cost per step
    assert 'id="cancel-run"' not in html  # viewers cannot cancel


def test_a_step_committed_after_the_header_was_read_comes_over_the_socket(
    client, viewer, run, monkeypatch
):
    """The run pauses between the page's read of the run and its read of the steps: the page
    shows the steps its header goes with, and the socket resumes before the pause, so the
    pause arrives with the header that says "waiting" (it used to show the paused step under
    a "running" header that nothing would ever update)."""
    from runs import views

    add_steps(run, 3)
    read = views._get_run_for_user

    def read_then_pause(request, pk, write=False):
        snapshot = read(request, pk, write)
        with transaction.atomic():
            paused = Run.locked(pk)
            paused.park("waiting for 1 decision(s)", reason="waiting for a human")
        return snapshot

    monkeypatch.setattr(views, "_get_run_for_user", read_then_pause)
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'data-status="running"' in html
    assert 'id="step-4"' in html and 'id="step-5"' not in html
    assert f'ws-connect="/ws/runs/{run.pk}/?after=4"' in html
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING


def test_run_page_shows_the_latest_steps_and_loads_older_ones(
    client, viewer, run, django_assert_max_num_queries
):
    add_steps(run, 120)
    client.force_login(viewer)
    # 11: with the viewer's teams (accounts/teams.py) and the run's waiting instructions
    # (runs/steering/models.py), one read each; none grows with the steps.
    with django_assert_max_num_queries(11):
        html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert html.count('class="step ') == 50
    assert 'id="step-121"' in html and 'id="step-71"' not in html
    assert "?after=121" in html
    assert "before=72" in html
    with django_assert_max_num_queries(8):
        html = client.get(
            reverse("runs:steps", args=[run.pk]), {"before": 72}, HTTP_HX_REQUEST="true"
        ).content.decode()
    assert html.count('class="step ') == 50
    assert 'id="step-22"' in html and 'id="step-71"' in html and 'id="step-72"' not in html
    assert 'id="load-older" hx-swap-oob="true"' in html and "before=22" in html
    assert client.get(reverse("runs:steps", args=[run.pk]), {"before": "x"}).status_code == 400


def test_long_output_is_truncated_with_a_link_to_the_full_step(client, viewer, run):
    with __import__("django").db.transaction.atomic():
        locked = Run.locked(run.pk)
        locked.append_step(
            Step.Kind.TOOL,
            {
                "tool_use_id": "t",
                "tool": "run_query",
                "args": {},
                "is_error": False,
                "attempts": 1,
                "result": "A" * 5000 + "TAIL",
            },
        )
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "TAIL" not in html
    assert f'href="/runs/{run.pk}/steps/2/"' in html
    full = client.get(reverse("runs:step", args=[run.pk, 2])).content.decode()
    assert "A" * 5000 + "TAIL" in full


def test_errors_are_highlighted(client, viewer, run):
    with __import__("django").db.transaction.atomic():
        Run.locked(run.pk).append_step(
            Step.Kind.TOOL,
            {
                "tool_use_id": "t",
                "tool": "run_query",
                "args": {},
                "is_error": True,
                "attempts": 3,
                "error": "database is locked",
            },
        )
    client.force_login(viewer)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "step-error" in html and "database is locked" in html


def test_untrusted_text_is_escaped_inside_hx_disable(client, viewer, run):
    with __import__("django").db.transaction.atomic():
        locked = Run.locked(run.pk)
        locked.append_step(
            Step.Kind.LLM,
            {
                "model": "m",
                "content": [
                    {"type": "text", "text": XSS},
                    {"type": "tool_use", "id": "t1", "name": XSS, "input": {"sql": XSS}},
                ],
                "usage": {},
            },
        )
        locked.append_step(
            Step.Kind.TOOL,
            {
                "tool_use_id": "t1",
                "tool": "run_query",
                "args": {"sql": XSS},
                "is_error": False,
                "attempts": 1,
                "result": {"rows": [[XSS]]},
            },
        )
    Run.objects.filter(pk=run.pk).update(output=XSS, status_detail=XSS)
    client.force_login(viewer)
    for url in (
        reverse("runs:detail", args=[run.pk]),
        reverse("runs:audit_run", args=[run.pk]),
        reverse("runs:step", args=[run.pk, 2]),
    ):
        html = client.get(url).content.decode()
        assert "<script>window" not in html, url
        assert "<img src=x" not in html
        assert '<button hx-post="/runs/new/"' not in html
        assert '<div id="nav-pending-count" hx-swap-oob' not in html
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
        assert "&lt;button hx-post=&quot;/runs/new/&quot; hx-trigger=&quot;load&quot;&gt;" in html
        assert_payload_inert(html)


# --- cancel -----------------------------------------------------------------
def test_operator_cancels_a_running_run(client, operator, run):
    client.force_login(operator)
    html = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="cancel-run"' in html
    response = client.post(reverse("runs:cancel", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert 'data-status="cancelled"' in response.content.decode()
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.steps.last().data["by"] == "olivia"


def test_cancel_needs_post_and_the_operator_role(client, viewer, operator, run):
    client.force_login(operator)
    assert client.get(reverse("runs:cancel", args=[run.pk])).status_code == 405
    client.force_login(viewer)
    assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_cancel_needs_the_csrf_token(operator, run):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_cancel_of_a_finished_run_changes_nothing(client, operator, no_enqueue):
    done = make_run(operator, status=Run.Status.SUCCEEDED)
    client.force_login(operator)
    html = client.get(reverse("runs:detail", args=[done.pk])).content.decode()
    assert 'id="cancel-run"' not in html
    response = client.post(reverse("runs:cancel", args=[done.pk]))
    assert response.status_code == 302
    done.refresh_from_db()
    assert done.status == Run.Status.SUCCEEDED


# --- export -----------------------------------------------------------------
def test_export_json_and_jsonl(client, viewer, run):
    add_steps(run, 4)
    client.force_login(viewer)
    response = client.get(reverse("runs:export", args=[run.pk, "json"]))
    assert response["Content-Type"] == "application/json"
    doc = json.loads(b"".join(response.streaming_content))
    assert doc["run"]["id"] == str(run.pk)
    assert [s["seq"] for s in doc["steps"]] == [1, 2, 3, 4, 5]
    assert doc["steps"][1]["prev_hash"] == doc["steps"][0]["hash"]
    assert [c["seq"] for c in doc["checkpoints"]] == list(
        run.checkpoints.order_by("seq").values_list("seq", flat=True)
    )
    response = client.get(reverse("runs:export", args=[run.pk, "jsonl"]))
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0]["run"]["agent"] == "sql-analyst"
    assert [line["seq"] for line in lines[1:] if "seq" in line] == [1, 2, 3, 4, 5]
    assert [line["checkpoint"]["seq"] for line in lines[1:] if "checkpoint" in line] == [
        c["seq"] for c in doc["checkpoints"]
    ]
    assert client.get(reverse("runs:export", args=[run.pk, "xml"])).status_code == 404


def to_millisecond(value):
    """Exported times as the API writes them (DjangoJSONEncoder: milliseconds, Z for UTC)."""
    if isinstance(value, dict):
        return {k: to_millisecond(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_millisecond(v) for v in value]
    if isinstance(value, str) and (moment := parse_datetime(value)) and "T" in value:
        return DjangoJSONEncoder().default(moment)
    return value


def test_export_records_are_the_apis_plus_the_launch_snapshot(client, viewer, run):
    add_steps(run, 2)
    client.force_login(viewer)
    response = client.get(reverse("runs:export", args=[run.pk, "json"]))
    doc = json.loads(b"".join(response.streaming_content))
    exported = doc["run"]
    # Every field the export has always had is still there.
    assert {
        "id",
        "agent",
        "status",
        "termination_reason",
        "status_detail",
        "trigger",
        "provider",
        "launched_by",
        "input",
        "output",
        "limits",
        "usage",
        "created_at",
        "started_at",
        "finished_at",
        "agent_config",
    } <= set(exported)
    assert set(exported["limits"]) == {
        "max_steps",
        "max_cost_usd",
        "max_seconds",
        "max_consecutive_errors",
    }
    assert exported["usage"] == {
        "steps": run.step_count,
        "errors": run.error_count,
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost_usd": str(run.cost_usd),
    }
    assert exported["launched_by"] == run.launched_by.username
    assert exported["agent_config"] == run.agent_config
    # One serialiser: the API says the same about the run and its steps, but for the times,
    # which the export gives to the microsecond (a step's hash covers them) and the API to
    # the millisecond.
    api_run = client.get(f"/api/runs/{run.pk}").json()
    assert to_millisecond(
        {k: v for k, v in exported.items() if k not in ("agent_config", "usage")}
    ) == {k: v for k, v in api_run.items() if k != "usage"}
    api_steps = client.get(f"/api/runs/{run.pk}/steps").json()["items"]
    assert to_millisecond(doc["steps"]) == api_steps
    assert doc["steps"][0]["created_at"] == run.steps.get(seq=1).created_at.isoformat()


# --- audit -----------------------------------------------------------------
def test_audit_verifies_the_chain(client, viewer, run):
    add_steps(run, 3)
    client.force_login(viewer)
    html = client.get(reverse("runs:audit_run", args=[run.pk])).content.decode()
    assert 'id="chain-status" class="alert ok" data-ok="true"' in html


def test_audit_alerts_when_a_step_was_tampered_with(client, viewer, run):
    add_steps(run, 3)
    step = Step.objects.get(run=run, seq=3)
    forged = canonical_json({**step.data, "result": "forged"})
    tamper("UPDATE runs_step SET data = %s WHERE id = %s", [forged, step.pk])
    client.force_login(viewer)
    html = client.get(reverse("runs:audit_run", args=[run.pk])).content.decode()
    assert 'data-ok="false"' in html
    assert "breaks at step #3" in html


def test_audit_search_lists_matching_runs(client, viewer, operator, no_enqueue):
    a = make_run(operator, status=Run.Status.SUCCEEDED, output="the answer")
    make_run(operator, status=Run.Status.SUCCEEDED, output="other")
    client.force_login(viewer)
    html = client.get(reverse("runs:audit"), {"q": "answer"}).content.decode()
    assert html.count('class="audit-row"') == 1
    assert f"/audit/runs/{a.pk}/" in html


# --- page shell: vendored htmx, its config, CSP ------------------------------------------
def test_pages_use_vendored_htmx_configured_for_safety(client, operator, run):
    from django.conf import settings

    from tests.html_checks import elements

    client.force_login(operator)
    for url in (
        reverse("runs:dashboard"),
        reverse("runs:list"),
        reverse("runs:new"),
        reverse("runs:detail", args=[run.pk]),
        reverse("approvals:queue"),
        reverse("runs:audit"),
    ):
        response = client.get(url)
        html = response.content.decode()
        csp = response["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe" not in csp, url
        assert response["X-Frame-Options"] == "DENY"
        scripts = [a for tag, a in elements(html) if tag == "script"]
        assert {a["src"] for a in scripts} == {
            "/static/vendor/htmx-2.0.10.min.js",
            "/static/vendor/htmx-ext-ws-2-djhtmx-1.29.0.js",
            "/static/js/app.js",
        }, url
        assert all("style" not in a for _, a in elements(html)), url  # CSP: no inline style
        for setting in ('"selfRequestsOnly":true', '"allowEval":false', '"allowScriptTags":false'):
            assert setting in html
        assert 'hx-headers=\'{"X-CSRFToken": "' in html
        # Nothing loaded from another site (a CDN): every script, style sheet and icon is ours.
        # (Not a search for "cdn" in the page: a random CSRF token may spell it.)
        loaded = [
            a.get("src") or a.get("href") or ""
            for tag, a in elements(html)
            if tag in ("script", "link", "img", "iframe")
        ]
        assert all(u.startswith("/") and not u.startswith("//") for u in loaded), (url, loaded)
    for name in ("vendor/htmx-2.0.10.min.js", "vendor/htmx-ext-ws-2-djhtmx-1.29.0.js", "js/app.js"):
        assert (settings.BASE_DIR / "static" / name).is_file()


def test_favicon_redirects_to_the_static_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")


def test_dashboard_charts_count_runs_and_cost(client, viewer, operator, no_enqueue):
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    now = timezone.now()
    two_hours_ago = make_run(operator, status=Run.Status.SUCCEEDED, cost_usd=Decimal("0.25"))
    Run.objects.filter(pk=two_hours_ago.pk).update(created_at=now - timedelta(hours=2))
    make_run(operator, status=Run.Status.SUCCEEDED, cost_usd=Decimal("0.5"))
    Run.objects.filter(pk=make_run(operator).pk).update(created_at=now - timedelta(days=2))
    client.force_login(viewer)
    response = client.get(reverse("runs:dashboard"))
    charts = response.context["charts"]
    assert charts["runs"].total == 2  # the two-day-old run is outside the 24 h
    assert [b.value for b in charts["runs"].bars][-3:] == [1, 0, 1]
    assert charts["cost"].total == pytest.approx(0.75)
    tallest = max(charts["runs"].bars, key=lambda b: b.height)
    assert tallest.y == 0 and tallest.height == 104  # the peak fills the plot
    # The third chart, time to decision, comes from the approvals tag library.
    assert "Time to decision, 7 days" in response.content.decode()


def _gate_and_error(run: Run, *, needle: str) -> None:
    from django.db import transaction

    with transaction.atomic():
        locked = Run.locked(run.pk)
        locked.append_step(
            Step.Kind.GATE,
            {"tool": "email_report", "args": {"to": needle}, "risk": "medium", "explanation": "x"},
        )
        locked.append_step(
            Step.Kind.TOOL,
            {"tool": "run_query", "args": {}, "is_error": True, "error": "boom", "attempts": 1},
        )


def test_the_timeline_filters_by_kind_and_searches_the_whole_run(
    client, viewer, run, django_assert_max_num_queries
):
    # A long run: a gate and an error far back, well before the 50 steps the page shows.
    add_steps(run, 10)
    _gate_and_error(run, needle="needle@example.com")
    add_steps(run, 200)
    client.force_login(viewer)
    url = reverse("runs:detail", args=[run.pk])
    page = client.get(url).content.decode()
    # One line per step: each is a folded <details> whose summary says kind and duration.
    assert page.count('<details class="step-fold"') == 50
    assert 'data-cat="tool"' in page and 'class="dur-bar" data-bucket="' in page
    with django_assert_max_num_queries(11):  # as the run page's (above)
        gates = client.get(url, {"kind": "gate"}).content.decode()
    assert gates.count('class="step ') == 1 and 'data-kind="gate"' in gates
    assert 'id="timeline-filtered"' in gates and "ws-connect" not in gates.split("<main>")[1]
    errors = client.get(url, {"kind": "error"}).content.decode()
    assert errors.count('class="step ') == 1 and "data-error" in errors
    found = client.get(url, {"q": "NEEDLE@example"}).content.decode()
    assert found.count('class="step ') == 1 and "needle@example.com" in found
    assert (
        client.get(url, {"kind": "model", "q": "thinking 3"}).content.decode().count('class="step ')
        == 5
    )  # the model steps "thinking 30", 32, 34, 36 and 38 (odd ones are tool steps)
