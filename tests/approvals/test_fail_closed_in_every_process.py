"""Gates fail closed in every process, not only behind `manage.py check`: the engine refuses a
run whose snapshot names what the agent does not have, and the web and worker processes run
the system checks at start (agentops/start_checks.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
from celery.signals import worker_init

from agentops import start_checks
from agentops.celery import refuse_unsound_configuration
from approvals import decisions
from approvals.models import Approval
from runs.models import Run, SideEffect, Step

from .conftest import EXECUTED, drive, gated, launch
from .test_fail_closed import typo_agent  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]
NOTIFY = {"to": "acme", "amount": "1.00"}

# The rules the issue found served by a process started without `check`, each with words of
# the reason the run must fail with.
UNSOUND = [
    ({"always_gate": ["test_notfy"]}, "always_gate names unknown tool 'test_notfy'"),
    (
        {"thresholds": {"test_notify": {"too": 5}}},
        "names argument 'too' that tool 'test_notify' does not take",
    ),
    (
        {"escalation": [{"after_seconds": 300, "roles": ["approvers"], "users": []}]},
        "unknown approver group 'approvers'",
    ),
]


def _failed_for(run: Run, words: str) -> None:
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.termination_reason == Run.Termination.BLOCKED
    assert "gate rules cannot be applied" in run.status_detail
    assert words in run.status_detail, run.status_detail
    terminated = run.steps.filter(kind=Step.Kind.STATUS).last()
    assert terminated is not None and terminated.data.get("reason") == Run.Termination.BLOCKED


# --- (a) the engine -------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("gates,words", UNSOUND)
def test_the_engine_refuses_to_start_a_run_under_rules_that_name_nothing(gates, words, no_enqueue):
    # test-notifier's call is on never_gate: always_gate (which beats it) was meant to gate
    # it, and a typo there lets it run ungated, as `run_qery` let `run_query` run.
    run = launch("test-notifier", NOTIFY, **gates)
    assert drive(run) == Run.Status.FAILED
    _failed_for(run, words)
    assert EXECUTED == []
    assert not SideEffect.objects.filter(run=run).exists()
    assert not Approval.objects.filter(run=run).exists()
    # Not one model call either: the run ends at its claim.
    assert not run.steps.filter(kind=Step.Kind.LLM).exists()


@pytest.mark.django_db
def test_the_engine_refuses_to_continue_such_a_run_even_once_approved(no_enqueue, bea):
    # A run written under rules the engine would refuse now (an older process, a hand edit):
    # its approved call is not made either.
    run, approval = gated("test-payer", {"to": "acme", "amount": "900.00"})
    config = run.agent_config
    config["gates"]["always_gate"] = ["test_transfr"]
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    decisions.decide(approval.pk, user=bea, decision="approve")
    assert drive(run) == Run.Status.FAILED
    _failed_for(run, "always_gate names unknown tool 'test_transfr'")
    assert EXECUTED == []


@pytest.mark.django_db
def test_a_sound_snapshot_runs(no_enqueue):
    run = launch("test-notifier", NOTIFY)
    assert drive(run) == Run.Status.SUCCEEDED
    assert EXECUTED == [("test_notify", {"to": "acme"})]
    # Spelt right, the same rule gates the call.
    run = launch("test-notifier", NOTIFY, always_gate=["test_notify"])
    assert drive(run) == Run.Status.WAITING
    assert EXECUTED == [("test_notify", {"to": "acme"})]


# --- (b) the processes ----------------------------------------------------------------------
def test_the_start_checks_refuse_a_typo(typo_agent):  # noqa: F811
    with pytest.raises(start_checks.Refused) as refused:
        start_checks.refuse_unsound("the web process")
    message = str(refused.value.code)
    assert "the web process refuses to start" in message
    assert "approvals.E001" in message and "test_transfr" in message
    assert refused.value.code != 0


def test_the_start_checks_let_a_sound_configuration_start():
    assert start_checks.refuse_unsound("the worker") is None


def test_a_worker_refuses_to_start_with_a_typo(typo_agent):  # noqa: F811
    # Connected to what `celery -A agentops worker` sends before its consumer starts (sent
    # for real below, in a process of its own). Celery's dispatcher logs and swallows an
    # Exception from a receiver: the refusal is a SystemExit, which gets through it.
    assert refuse_unsound_configuration in [ref() for _, ref in worker_init.receivers]
    with pytest.raises(SystemExit, match=r"the worker refuses to start(.|\n)*test_transfr"):
        refuse_unsound_configuration()


def _process(code: str) -> subprocess.CompletedProcess:
    """Python running `code` after registering an agent whose always_gate misspells its
    tool; a process that is still going after a few minutes is serving: a failure."""
    prelude = "\n".join(
        [
            "import dataclasses, os",
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'agentops.settings')",
            "import django",
            "django.setup()",
            "from agentkit.agents import GateRules, get_agent, register",
            "analyst = get_agent('sql-analyst')",
            "register(dataclasses.replace(analyst, slug='sql-typo',"
            " gates=GateRules(always_gate=('run_qery',))))",
        ]
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", f"{prelude}\n{code}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still serving after {exc.timeout}s: {exc.stderr!r}"[-2000:])


def test_the_asgi_application_refuses_to_load_with_a_typo():
    # What `daphne agentops.asgi:application` does first: import the application.
    done = _process("import agentops.asgi\nprint('served')")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "served" not in done.stdout
    assert "the web process refuses to start" in done.stderr
    assert "agent 'sql-typo': always_gate names unknown tool 'run_qery'" in done.stderr


def test_a_celery_worker_refuses_to_consume_with_a_typo():
    # A real worker start on the in-memory broker: it exits before its consumer starts
    # (without the refusal it would serve until the timeout).
    done = _process(
        "from agentops.celery import app\n"
        "app.conf.broker_url = 'memory://'\n"
        "app.worker_main(['worker', '--pool', 'solo', '--without-heartbeat',"
        " '--without-mingle', '--without-gossip', '--loglevel', 'WARNING'])\n"
        "print('consumed')"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "consumed" not in done.stdout
    assert "the worker refuses to start" in done.stderr
    assert "agent 'sql-typo': always_gate names unknown tool 'run_qery'" in done.stderr
