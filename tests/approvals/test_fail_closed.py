"""Gates fail closed: a configuration that names what is not there refuses to start (a system
check, and 422 for an external agent), and every timeout and error path of a gate denies."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from agentkit.agents import CATALOGUE, EscalationTier, GateRules, LearningRules
from agentops.management.commands import up
from approvals import decisions, tasks
from approvals.gates import checks as gate_checks
from approvals.gates import config as gate_config
from approvals.gates import policy as declared_policy
from approvals.learning import rules as learning
from approvals.models import Approval
from runs.models import Run, Step

from .conftest import EXECUTED, drive, launch

SMALL = {"to": "acme", "amount": "10.00"}


# --- a configuration that cannot be understood ---------------------------------------------------
def payer_with(**gates) -> dict:
    agent = CATALOGUE["test-payer"]
    return replace(agent, gates=replace(agent.gates, **gates)).snapshot()


def test_every_agent_of_the_product_has_a_sound_configuration():
    # The demo's agents (what `up` serves); tests register agents of their own meanwhile.
    product = {
        slug: agent
        for slug, agent in CATALOGUE.items()
        if getattr(agent.script, "__module__", "").startswith("demo.")
    }
    assert len(product) >= 4
    assert {slug: gate_config.problems(a.snapshot()) for slug, a in product.items()} == {
        slug: [] for slug in product
    }


@pytest.mark.parametrize(
    "gates,words",
    [
        ({"always_gate": ("test_transfr",)}, "always_gate names unknown tool 'test_transfr'"),
        ({"never_gate": ("nope",)}, "never_gate names unknown tool 'nope'"),
        ({"thresholds": {"transfer": {"amount": 5}}}, "thresholds names unknown tool"),
        (
            {"thresholds": {"test_transfer": {"amout": 5}}},
            "names argument 'amout' that tool 'test_transfer' does not take",
        ),
        ({"allow_lists": {"test_transfer": {"recipient": ("a",)}}}, "argument 'recipient'"),
        ({"sample_rates": {"test_tranfer": 0.5}}, "sample_rates names unknown tool"),
        ({"sample_rate": 1.5}, "sample_rate must be a share between 0 and 1"),
        ({"on_expiry": "approve"}, "on_expiry 'approve' is not an outcome"),
        ({"four_eyes_from": "huge"}, "four_eyes_from 'huge' is not a blast radius"),
        (
            {"escalation": (EscalationTier(after=timedelta(minutes=5), roles=("approvers",)),)},
            "unknown approver group 'approvers'",
        ),
        (
            {"learning": LearningRules(match_fields={"test_transfer": ("reason",)})},
            "learning.match_fields['test_transfer'] names argument 'reason'",
        ),
    ],
)
def test_a_rule_that_names_nothing_is_a_problem(gates, words):
    found = gate_config.problems(payer_with(**gates))
    assert len(found) == 1 and words in found[0], found


def test_an_unknown_key_is_a_problem():
    snapshot = payer_with()
    snapshot["gates"]["alway_gate"] = ["test_transfer"]
    assert gate_config.problems(snapshot) == ["unknown key 'alway_gate'"]


@pytest.fixture
def typo_agent(monkeypatch):
    agent = replace(
        CATALOGUE["test-payer"],
        slug="test-typo",
        gates=GateRules(always_gate=("test_transfr",)),
    )
    monkeypatch.setitem(CATALOGUE, "test-typo", agent)
    return agent


def test_check_refuses_to_start_with_a_typo(typo_agent):
    for options in ({}, {"deploy": True}):
        with pytest.raises(SystemCheckError, match=r"approvals\.E001.*test-typo.*test_transfr"):
            call_command("check", **options)


def test_up_refuses_to_start_with_a_typo(typo_agent, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("up started although its checks failed")

    monkeypatch.setattr(up.Command, "handle", started)
    # As `manage.py up` runs it: checks first (call_command skips them unless told).
    with pytest.raises(SystemCheckError, match="test_transfr"):
        call_command("up", "127.0.0.1:0", skip_checks=False)


# --- every timeout and error path denies ---------------------------------------------------
pytestmark_db = pytest.mark.django_db


@pytestmark_db
def test_a_policy_that_raises_gates_the_call(monkeypatch, no_enqueue):
    def broken(**kwargs):
        raise ValueError("rules unreadable")

    monkeypatch.setattr(declared_policy, "evaluate", broken)
    # test-notifier never gates its call: only the failure can have gated it.
    run = launch("test-notifier", {"to": "acme", "amount": "1.00"})
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert "gate policy could not decide" in approval.explanation
    assert "rules unreadable" in approval.explanation
    assert approval.risk == "high"
    assert EXECUTED == []


@pytestmark_db
def test_a_learned_rule_that_cannot_be_evaluated_approves_nothing(monkeypatch, no_enqueue):
    def broken(*args, **kwargs):
        raise RuntimeError("pattern unreadable")

    monkeypatch.setattr(learning, "covering_rule", broken)
    run = launch(
        "goodwill-desk",
        {"customer_email": "ann@example.com", "amount": "15", "reason": "late delivery"},
        learning={"bar": 3, "check_rate": 0.0},
    )
    assert drive(run) == Run.Status.WAITING
    approval = Approval.objects.get(run=run)
    assert approval.status == Approval.Status.PENDING and approval.decided_by is None
    assert "learned rules not applied" in approval.explanation


@pytestmark_db
def test_an_override_that_cannot_be_read_gates_the_call(monkeypatch, no_enqueue):
    def broken(*args, **kwargs):
        raise RuntimeError("database hiccup")

    monkeypatch.setattr(learning, "overridden", broken)
    # A credit far below its threshold, the tool on never_gate: the policy lets it run
    # unless a reviewer's override says otherwise, so an unreadable override must gate.
    run = launch(
        "goodwill-desk",
        {"customer_email": "ann@example.com", "amount": "1", "reason": "late delivery"},
        learning={"bar": 3, "check_rate": 0.0, "sample_rate": 0.0},
        never_gate=["grant_goodwill_credit"],
        sample_rate=0.0,
        sample_rates={},
    )
    assert drive(run) == Run.Status.WAITING
    assert "gate policy could not decide" in Approval.objects.get(run=run).explanation


def expire(run: Run) -> str:
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert decisions.expire_due(now=approval.expires_at + timedelta(seconds=1)) == 1
    return drive(run)


def tool_error(run: Run) -> str:
    return run.steps.get(kind=Step.Kind.TOOL).data["error"]


@pytestmark_db
def test_an_expiry_with_no_default_denies(no_enqueue):
    run = launch("test-payer", {"to": "acme", "amount": "900.00"})
    config = run.agent_config
    del config["gates"]["on_expiry"], config["gates"]["approval_timeout_seconds"]
    Run.objects.filter(pk=run.pk).update(agent_config=config)
    assert drive(run) == Run.Status.WAITING
    expire(run)
    assert EXECUTED == []
    assert "expired" in tool_error(run) and "not executed" in tool_error(run)


@pytestmark_db
def test_an_expiry_with_an_unknown_outcome_denies(no_enqueue):
    # A snapshot that says so is refused before it runs (test_fail_closed_in_every_process);
    # an approval row that says so (written otherwise) still denies at its expiry.
    run = launch("test-payer", {"to": "acme", "amount": "900.00"})
    assert drive(run) == Run.Status.WAITING
    Approval.objects.filter(run=run).update(on_expiry="approve")
    expire(run)
    assert EXECUTED == []
    assert "not executed" in tool_error(run)


@pytestmark_db
def test_a_notification_that_fails_leaves_the_gate_shut(
    monkeypatch, no_enqueue, django_capture_on_commit_callbacks
):
    def down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.notify_approval_requested, "delay", down)
    run = launch("test-payer", {"to": "acme", "amount": "900.00"})
    with django_capture_on_commit_callbacks(execute=True):
        assert drive(run) == Run.Status.WAITING
    assert EXECUTED == []
    # Nobody was told; the approval waits, then expires, and the call never runs.
    expire(run)
    assert EXECUTED == []
    assert "not executed" in tool_error(run)


@pytestmark_db
def test_named_approvers_are_checked_against_accounts_when_asked(django_user_model):
    django_user_model.objects.create_user(username="nora", password="pw")
    snapshot = payer_with(
        approvers=("nora", "nobdy"),
        escalation=(EscalationTier(after=timedelta(minutes=5), users=("carl",)),),
    )
    names = gate_config.named_users(snapshot["gates"])
    assert names == {"nora", "nobdy", "carl"}
    found = gate_config.problems(snapshot, existing_users=gate_checks.existing_users(names))
    assert found == [
        "names approver 'carl', who has no active account",
        "names approver 'nobdy', who has no active account",
    ]
    # The system check does not ask (a fresh database has no accounts yet).
    assert gate_config.problems(snapshot) == []


@pytest.mark.django_db
def test_the_database_check_warns_of_a_named_approver_without_an_account(
    django_user_model, monkeypatch
):
    agent = replace(CATALOGUE["test-payer"], slug="test-named", gates=GateRules(approvers=("zoe",)))
    monkeypatch.setitem(CATALOGUE, "test-named", agent)
    # A fresh install (no account yet) is not warned: its accounts come after.
    assert gate_checks.check_named_approvers(databases=["default"]) == []
    django_user_model.objects.create_user(username="nora", password="pw")
    warnings = gate_checks.check_named_approvers(databases=["default"])
    named = [w for w in warnings if w.obj == "test-named"]
    assert [(w.id, w.msg) for w in named] == [
        ("approvals.W002", "agent 'test-named' names approver 'zoe', who has no active account")
    ]
    # Only when the check may use the database (`check --database default`, `migrate`).
    assert gate_checks.check_named_approvers(databases=None) == []
    django_user_model.objects.create_user(username="zoe", password="pw")
    assert not [
        w for w in gate_checks.check_named_approvers(databases=["default"]) if w.obj == "test-named"
    ]
