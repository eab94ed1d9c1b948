"""Structured logs: a line about a run says which run, which step, which task and who."""

import dataclasses
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.functional import SimpleLazyObject

from agentkit import logs
from agentkit.llm.scripted import text, tool_use
from agentkit.tools import REGISTRY
from runs import engine
from runs.models import Run, Step
from runs.tasks import advance_run
from tests.runs import harness

ROOT = Path(settings.BASE_DIR)


@pytest.fixture
def json_lines():
    """What the production handler (filter + JSON formatter) writes for `agentops` loggers."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("agentops")
    logger.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)


@pytest.fixture
def logging_echo():
    """t_echo, logging a line while it runs inside the engine."""
    real = REGISTRY["t_echo"]

    def echo(**kwargs):
        logging.getLogger("agentops.test").warning("echoing %s", kwargs["text"])
        return real.fn(**kwargs)

    REGISTRY["t_echo"] = dataclasses.replace(real, fn=echo)
    yield
    REGISTRY["t_echo"] = real


@pytest.fixture
def scripted_run(no_enqueue, monkeypatch):
    agent = harness.register_agent()
    provider = harness.Script([[tool_use("t_echo", text="hi")], [text("done")]])
    monkeypatch.setattr("agentkit.agents.provider_for_run", lambda run: provider)
    yield engine.launch(agent=agent, input={"task": "t", "script": ""}, provider="scripted")
    harness.unregister_agent()


@pytest.mark.django_db(transaction=True)
def test_a_line_logged_while_advancing_a_run_carries_its_run_and_seq(
    scripted_run, logging_echo, json_lines
):
    assert engine.advance(scripted_run.pk, time_slice=30) == Run.Status.SUCCEEDED
    [line] = [x for x in json_lines() if x["logger"] == "agentops.test"]
    assert line["message"] == "echoing hi" and line["level"] == "WARNING"
    assert line["run_id"] == str(scripted_run.pk)
    # The step being made: the model's turn that asked for the call (written with it).
    asked = scripted_run.steps.filter(kind=Step.Kind.LLM).order_by("seq").first()
    assert line["seq"] == asked.seq
    assert "task_id" not in line and "user" not in line  # unknown, so left out
    # Outside the run, nothing is left behind in this thread's context.
    logging.getLogger("agentops.test").warning("after")
    assert "run_id" not in json_lines()[-1]


@pytest.mark.django_db(transaction=True)
def test_a_line_logged_inside_a_celery_task_carries_the_task_id(
    scripted_run, logging_echo, json_lines
):
    advance_run.apply(args=[str(scripted_run.pk)], task_id="task-42")
    [line] = [x for x in json_lines() if x["logger"] == "agentops.test"]
    assert (line["task_id"], line["run_id"]) == ("task-42", str(scripted_run.pk))
    logging.getLogger("agentops.test").warning("after")
    assert "task_id" not in json_lines()[-1]


@pytest.mark.django_db
def test_a_line_logged_during_a_request_carries_the_user(operator, json_lines):
    def view(request):
        assert request.user.is_authenticated  # the view looks its user up
        logging.getLogger("agentops.test").warning("in the view")
        return HttpResponse()

    request = RequestFactory().get("/")
    request.user = SimpleLazyObject(lambda: operator)
    logs.request_context(view)(request)
    assert json_lines()[-1]["user"] == operator.get_username()


def test_a_log_call_never_looks_the_user_up_itself(json_lines):
    looked_up = []

    def view(request):
        logging.getLogger("agentops.test").warning("before the view knows its user")
        return HttpResponse()

    request = RequestFactory().get("/")
    request.user = SimpleLazyObject(lambda: looked_up.append(1) or AnonymousUser())
    logs.request_context(view)(request)
    assert "user" not in json_lines()[-1] and looked_up == []


def test_text_lines_end_with_the_known_context():
    record = logging.LogRecord("agentops.engine", logging.INFO, __file__, 1, "hello", (), None)
    with logs.bound(run_id="r-1", seq=3):
        logs.ContextFilter().filter(record)
    line = logs.TextFormatter().format(record)
    assert line.endswith("INFO agentops.engine: hello [run_id=r-1 seq=3]")


def test_every_line_is_json_when_debug_is_off(tmp_path):
    """The settings' own logging config, in a fresh process as production starts it."""
    code = "\n".join(
        [
            "import django, logging",
            "django.setup()",
            "from agentkit import logs",
            "log = logging.getLogger('agentops.engine')",
            "log.warning('plain')",
            "with logs.bound(run_id='r-9', seq=2):",
            "    log.error('failed', exc_info=ValueError('x'))",
        ]
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DEBUG": "false",
        "SECRET_KEY": "test-only-" + "k" * 50,
        "AGENTOPS_VAR_DIR": str(tmp_path),
    }
    env.pop("LOG_FORMAT", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [x["message"] for x in lines] == ["plain", "failed"]
    assert lines[1]["run_id"] == "r-9" and lines[1]["seq"] == 2
    assert "ValueError: x" in lines[1]["exc_info"]
    assert "run_id" not in lines[0]


def test_every_line_is_json_when_json_is_asked_for_even_in_debug(tmp_path):
    """`up` runs with DEBUG on: a 404 is logged by django.request once, as JSON, not a second
    time as plain text by Django's own console handler."""
    code = "\n".join(
        [
            "import django, logging",
            "django.setup()",
            "from django.test import Client",
            "Client(HTTP_HOST='127.0.0.1').get('/no-such-page/')",
            "logging.getLogger('django.server').warning('served')",
            "logging.getLogger('daphne.server').warning('listening')",
            "from agentops.celery import app",
            "from celery.signals import setup_logging",
            "print(len(setup_logging.receivers))",
        ]
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DEBUG": "true",
        "LOG_FORMAT": "json",
        "AGENTOPS_VAR_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    messages = [(x["logger"], x["message"]) for x in lines]
    assert messages == [
        ("django.request", "Not Found: /no-such-page/"),
        ("django.server", "served"),
        ("daphne.server", "listening"),
    ]
    # Celery workers keep this logging instead of installing their own handler.
    assert int(proc.stdout.strip()) >= 1


def test_up_says_what_it_says_as_log_records_when_json_is_asked_for(settings, caplog, capsys):
    from agentops.management.commands.up import Command

    settings.LOG_FORMAT = "json"
    command = Command()
    command._log_action(
        "http",
        "complete",
        {"method": "GET", "path": "/", "status": 200, "time_taken": 0.01, "client": "x"},
    )
    command._log_action("websocket", "connected", {"path": "/ws/runs/1/", "client": "x"})
    assert capsys.readouterr().out == ""  # nothing written around the logging config
    said = [r.getMessage() for r in caplog.records if r.name == "agentops.up"]
    assert said == ["HTTP GET / 200 [0.01, x]", "WebSocket CONNECTED /ws/runs/1/ [x]"]
    formatted = logs.JsonFormatter().format(caplog.records[-1])
    assert json.loads(formatted)["message"] == "WebSocket CONNECTED /ws/runs/1/ [x]"


@pytest.mark.django_db
def test_a_refused_one_tap_link_is_one_line_without_its_token(client, approver):
    # A 403 or 410 on a one-tap link is logged with its path: the token in it is a credential.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.addFilter(logs.RedactSecrets())
    handler.setFormatter(logs.TextFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        client.force_login(approver)
        token = "AbCdEf.secret-token-value"
        assert client.get(f"/approvals/link/{token}/").status_code in (400, 403, 410)
        # A PermissionDenied in a view: one line, no traceback.
        assert client.get("/approvals/stats/").status_code == 403
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert "secret-token-value" not in written
    assert "/approvals/link/[redacted]/" in written
    assert "Traceback" not in written
    assert len(written.strip().splitlines()) == 2, written


def test_tasks_on_threads_end_cleanly_and_leave_no_id_behind(caplog):
    """As under `celery --pool threads`: two threads run the same task id at once (a task
    redelivered while its first delivery still runs), starting and ending interleaved. Each
    ends without an error and each thread's later lines carry no task id."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from celery.signals import task_postrun, task_prerun

    from agentkit import logs

    both_started, first_ended = Barrier(2), Barrier(2)
    errors: list[BaseException] = []

    def run(name: str) -> tuple[str | None, str | None, str | None]:
        try:
            task_prerun.send(sender=None, task_id="task-7", task=None)
            both_started.wait(timeout=10)
            inside = logs._context["task_id"].get()
            if name == "second":
                first_ended.wait(timeout=10)  # the first ends while this one still runs
            # An eager task inside this one: the outer id comes back when it ends.
            task_prerun.send(sender=None, task_id=f"inner-{name}", task=None)
            nested = logs._context["task_id"].get()
            task_postrun.send(sender=None, task_id=f"inner-{name}", task=None)
            assert logs._context["task_id"].get() == "task-7"
            task_postrun.send(sender=None, task_id="task-7", task=None)
            if name == "first":
                first_ended.wait(timeout=10)
            return inside, nested, logs._context["task_id"].get()
        except BaseException as exc:
            errors.append(exc)
            raise

    with caplog.at_level(logging.ERROR), ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.submit(run, "first"), pool.submit(run, "second")
        results = {"first": first.result(timeout=30), "second": second.result(timeout=30)}
    assert not errors
    # celery's signal logs a receiver's exception instead of raising it.
    assert not [r for r in caplog.records if "different Context" in r.getMessage()]
    assert results == {
        "first": ("task-7", "inner-first", None),
        "second": ("task-7", "inner-second", None),
    }


@pytest.mark.django_db
def test_security_events_carry_their_fields_as_json_keys(
    json_lines, operator, approver, no_enqueue
):
    """Sign-in failures and sign-ins, token use and refusal, decisions: each line says its
    `security_event` and the fields a shipper filters on, as keys of their own."""
    from django.test import Client

    from accounts.models import ApiToken
    from agentkit.agents import get_agent
    from approvals import decisions
    from approvals.models import Approval

    client = Client(REMOTE_ADDR="10.1.2.3")
    client.post("/accounts/login/", {"username": "olivia", "password": "wrong"})
    client.post("/accounts/login/", {"username": "olivia", "password": "pw-olivia"})
    _, token = ApiToken.issue(operator, "ci")
    assert Client().get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    assert Client().get("/api/runs", HTTP_AUTHORIZATION="Bearer ao_wrongtoken").status_code == 401
    agent = get_agent("sql-analyst")
    data, _ = agent.validate_input({"question": "Revenue?", "report_to": "boss@example.com"})
    run = engine.launch(agent=agent, input=data, launched_by=operator, provider="scripted")
    engine.advance(run.pk, time_slice=30)
    approval = Approval.objects.get(run=run)
    decisions.decide(approval.pk, user=approver, decision="approve", via="api")

    lines = {line["security_event"]: line for line in json_lines() if "security_event" in line}
    failed = lines["signin_failed"]
    assert (failed["username"], failed["ip_address"], failed["level"]) == (
        "olivia",
        "10.1.2.3",
        "WARNING",
    )
    assert "password" not in json.dumps(failed).replace("sign-in", "")
    assert (lines["signin"]["username"], lines["signin"]["ip_address"]) == ("olivia", "10.1.2.3")
    used = lines["token_used"]
    assert (used["username"], used["token_name"]) == ("olivia", "ci")
    assert token not in json.dumps(used)
    assert lines["token_refused"]["token_prefix"] == "ao_wrong"
    decided = lines["decision"]
    assert decided["username"] == "arthur" and decided["decision"] == "approve"
    assert decided["approval_id"] == str(approval.pk) and decided["run_id"] == str(run.pk)
    assert decided["approval_status"] == "approved" and decided["via"] == "api"


def test_extra_fields_never_replace_the_lines_own():
    record = logging.makeLogRecord(
        {"name": "agentops.x", "levelname": "INFO", "msg": "m", "security_event": "e"}
    )
    record.__dict__["logger"] = "forged"
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["logger"] == "agentops.x" and line["security_event"] == "e"


def test_a_json_worker_prints_as_log_records(settings, monkeypatch):
    """What a tool print()s in a worker is a record of celery.redirected, not a bare line
    between the JSON ones (agentops/celery_output.py)."""
    from agentops import celery_output
    from agentops.celery import app

    settings.LOG_FORMAT = "json"
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # put back whatever replaces them
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    monkeypatch.setenv("CELERY_LOG_REDIRECT", "")  # Celery notes the redirect here
    monkeypatch.setenv("CELERY_LOG_REDIRECT_LEVEL", "")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logging.getLogger("celery.redirected").addHandler(handler)
    try:
        celery_output.prints_as_records(app)
        print("from a tool")
    finally:
        logging.getLogger("celery.redirected").removeHandler(handler)
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert (line["logger"], line["message"]) == ("celery.redirected", "from a tool")
