"""A run's trace id on its page and in its API JSON, linked to the tracing back end through
AGENTOPS_TRACE_URL: an http(s) link only, escaped where shown."""

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Run
from tests.test_settings import load

from .factories import make_run

pytestmark = pytest.mark.django_db

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01;00-{TRACE_ID}-a2fb4a1d1a96d312-01"


@pytest.fixture
def traced(operator, no_enqueue) -> Run:
    return make_run(operator, status=Run.Status.RUNNING, traceparent=TRACEPARENT)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _trace_url(settings, template: str) -> None:
    settings.AGENTOPS = {**settings.AGENTOPS, "TRACE_URL": template}


def test_the_run_page_shows_the_trace_id_linked_to_the_back_end(traced, operator, settings):
    _trace_url(settings, "https://tempo.example/trace/{trace_id}?orgId=1")
    html = _client(operator).get(reverse("runs:detail", args=[traced.pk])).content.decode()
    assert f'<code id="run-trace-id">{TRACE_ID}</code>' in html
    assert f'href="https://tempo.example/trace/{TRACE_ID}?orgId=1"' in html
    assert 'rel="noopener noreferrer"' in html


def test_without_a_template_the_id_is_shown_unlinked(traced, operator, settings):
    _trace_url(settings, "")
    html = _client(operator).get(reverse("runs:detail", args=[traced.pk])).content.decode()
    assert TRACE_ID in html and 'id="run-trace-link"' not in html


def test_a_run_launched_untraced_shows_no_trace(operator, no_enqueue, settings):
    _trace_url(settings, "https://tempo.example/trace/{trace_id}")
    run = make_run(operator)
    html = _client(operator).get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="run-trace-id"' not in html and "tempo.example" not in html
    body = _client(operator).get(f"/api/runs/{run.pk}").json()
    assert (body["trace_id"], body["trace_url"]) == ("", "")


@pytest.mark.parametrize(
    "template",
    ["javascript:alert(1)//{trace_id}", "data:text/html,{trace_id}", "//evil.example/{trace_id}"],
)
def test_only_an_http_link_is_ever_made(traced, operator, settings, template):
    # Settings refuse these at start-up; the link is checked again where it is made.
    _trace_url(settings, template)
    html = _client(operator).get(reverse("runs:detail", args=[traced.pk])).content.decode()
    assert TRACE_ID in html and 'id="run-trace-link"' not in html
    assert "javascript:" not in html and "evil.example" not in html
    assert _client(operator).get(f"/api/runs/{traced.pk}").json()["trace_url"] == ""


def test_the_link_is_escaped_where_shown(traced, operator, settings):
    _trace_url(settings, 'https://tempo.example/"><b>x</b>/{trace_id}')
    html = _client(operator).get(reverse("runs:detail", args=[traced.pk])).content.decode()
    assert "<b>x</b>" not in html
    assert f'href="https://tempo.example/&quot;&gt;&lt;b&gt;x&lt;/b&gt;/{TRACE_ID}"' in html


def test_the_run_s_api_json_has_its_trace(traced, operator, settings):
    _trace_url(settings, "https://tempo.example/trace/{trace_id}")
    body = _client(operator).get(f"/api/runs/{traced.pk}").json()
    assert body["trace_id"] == TRACE_ID
    assert body["trace_url"] == f"https://tempo.example/trace/{TRACE_ID}"


@pytest.mark.parametrize(
    "template", ["javascript:alert(1)//{trace_id}", "https://tempo.example/trace/"]
)
def test_a_bad_template_stops_start_up(tmp_path, template):
    proc = load(tmp_path, AGENTOPS_TRACE_URL=template)
    assert proc.returncode != 0
    assert "AGENTOPS_TRACE_URL must be an http(s) URL with {trace_id} in it" in proc.stderr


def test_a_good_template_starts(tmp_path):
    proc = load(tmp_path, AGENTOPS_TRACE_URL="https://tempo.example/trace/{trace_id}")
    assert proc.returncode == 0, proc.stderr
