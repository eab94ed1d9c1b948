"""The compliance export of decisions: what each kind of decision's record says, that the
signed chain catches every kind of tampering, who may download it, and bad requests."""

import ast
import csv
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import AsyncClient, Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken, Team, TeamAgent
from agentkit import signing, streaming
from approvals import batch, decisions, tasks
from approvals.evidence import chain as evidence_chain
from approvals.evidence import export as evidence_export
from approvals.learning import rules as learning
from approvals.models import Approval, AutoApproveRule, Escalation
from approvals.notify.one_tap import links as one_tap
from runs.models import Step, args_hash
from tests.conftest import make_user
from tests.test_settings import CONTROLLED, ROOT

from .conftest import drive, gated
from .learning.test_rules import LEARNS, approve_credits, credit_run
from .test_delegation import delegate

pytestmark = pytest.mark.django_db

TRANSFER = {"to": "initech", "amount": "900.00"}


def period() -> dict:
    now = timezone.now()
    return {"since": now - timedelta(hours=1), "until": now + timedelta(hours=1)}


def export(fmt: str = "jsonl", **filters) -> str:
    return "".join(evidence_export.export_lines(fmt=fmt, **{**period(), **filters}))


def rows(text: str) -> list[dict]:
    # Split on "\n" only: str.splitlines() also splits inside a JSON string at U+2028.
    lines = filter(None, text.split("\n"))
    return [r for r in map(json.loads, lines) if r["line"] == "decision"]


def key() -> bytes:
    return evidence_export.signing_key()


# --- what the records say ----------------------------------------------------------------------
def test_an_approval_records_who_what_when_the_exact_call_and_how_long(
    approver, operator, no_enqueue
):
    run, approval = gated("test-payer", TRANSFER, by=operator)
    decisions.record_open(approval, approver)
    decisions.decide(approval.pk, user=approver, decision="approve", via="web")
    [record] = rows(export())
    approval.refresh_from_db()
    assert record["approval"] == str(approval.pk) and record["run"] == str(run.pk)
    assert (record["agent"], record["tool"], record["decision"]) == (
        "test-payer",
        "test_transfer",
        "approve",
    )
    assert record["decided_by"] == "arthur" and record["outcome"] == "approved"
    assert record["args_hash"] == args_hash("test_transfer", approval.args)
    assert record["approved_args_hash"] == record["args_hash"]
    assert record["decided_at"] == approval.decided_at.isoformat()
    assert record["seconds_open"] is not None and record["seconds_open"] >= 0
    assert record["seconds_pending"] >= 0 and record["gated_because"] == approval.explanation
    assert (record["authority"], record["via"]) == ("approver role", "web")
    step = Step.objects.get(run=run, kind=Step.Kind.DECISION)
    assert (record["step_seq"], record["step_hash"]) == (step.seq, step.hash)


def test_an_edit_records_the_hash_of_what_ran_beside_the_proposed_one(approver, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(
        approval.pk, user=approver, decision="approve", arguments={**approval.args, "amount": 800}
    )
    [record] = rows(export())
    assert record["decision"] == "edit" and record["edited"] is True
    assert record["args_hash"] == args_hash("test_transfer", approval.args)
    assert record["approved_args_hash"] != record["args_hash"]
    approval.refresh_from_db()
    assert record["approved_args_hash"] == args_hash("test_transfer", approval.final_args)


def test_a_rejection_records_its_reason(approver, no_enqueue):
    gated("test-payer", TRANSFER)
    approval = Approval.objects.get()
    decisions.decide(approval.pk, user=approver, decision="reject", reason="wrong vendor")
    [record] = rows(export())
    assert (record["decision"], record["outcome"], record["reason"]) == (
        "reject",
        "rejected",
        "wrong vendor",
    )
    assert record["approved_args_hash"] == ""


def test_an_expiry_is_recorded_as_decided_by_nobody(no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    assert decisions.expire_due() == 1
    [record] = rows(export())
    assert (record["decision"], record["decided_by"], record["authority"]) == (
        "expire",
        "",
        "deadline",
    )
    assert record["outcome"] == "expired" and record["step_seq"] is not None


def test_a_call_approved_by_a_rule_names_the_rule_and_who_accepted_it(approver, no_enqueue):
    admin = make_user(type(approver), "adele", "admin")
    approve_credits(approver, 3)
    rule = AutoApproveRule.objects.get()
    learning.accept(rule, by=admin, expires_at=timezone.now() + timedelta(hours=1), max_hits=10)
    run = credit_run(amount="20")
    drive(run)
    records = rows(export())
    by_rule = [r for r in records if r["decision"] == "rule_approve"]
    assert len(records) == 4 and len(by_rule) == 1
    [record] = by_rule
    assert (record["rule"], record["rule_accepted_by"], record["decided_by"]) == (
        rule.pk,
        "adele",
        "",
    )
    assert record["authority"] == "auto-approve rule" and record["run"] == str(run.pk)
    gate = run.steps.get(kind=Step.Kind.GATE)
    assert record["step_hash"] == gate.hash
    # The people's approvals the rule rests on are exported beside it, by name.
    assert sorted(r["decided_by"] for r in records if r is not record) == ["arthur"] * LEARNS["bar"]


def test_a_delegated_decision_says_for_whom(operator, bea, dan, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER, by=operator, approvers=["bea"])
    delegate(bea, dan)
    decisions.decide(approval.pk, user=dan, decision="reject", reason="not now", via="api")
    [record] = rows(export())
    assert (record["decided_by"], record["acting_for"]) == ("dan", "bea")
    assert record["authority"] == "delegation from bea" and record["via"] == "api"


def test_a_named_approver_is_recorded_as_such(operator, bea, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER, by=operator, approvers=["bea"])
    decisions.decide(approval.pk, user=bea, decision="approve")
    [record] = rows(export())
    assert record["authority"] == "named approver"


def test_each_vote_of_a_quorum_is_its_own_record(operator, bea, dan, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER, by=operator, quorum_from="medium", quorum=2)
    decisions.decide(approval.pk, user=bea, decision="approve")
    assert rows(export()) == []  # still pending: exported once it is settled
    decisions.decide(approval.pk, user=dan, decision="approve", via="slack")
    records = rows(export())
    assert [(r["decided_by"], r["votes"], r["outcome"]) for r in records] == [
        ("bea", "1 of 2", "approved"),
        ("dan", "2 of 2", "approved"),
    ]
    assert records[1]["via"] == "slack"


def test_a_quorum_that_expires_short_of_its_count_keeps_its_votes(operator, bea, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER, by=operator, quorum_from="medium", quorum=2)
    decisions.decide(approval.pk, user=bea, decision="approve")
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    assert decisions.expire_due() == 1
    records = rows(export())
    assert [(r["decision"], r["decided_by"], r["votes"]) for r in records] == [
        ("approve", "bea", "1 of 2"),
        ("expire", "", ""),
    ]
    assert {r["outcome"] for r in records} == {"expired"}


def test_a_settled_approval_without_a_vote_row_is_still_exported(approver, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    approval.refresh_from_db()
    # Votes are append-only (Postgres refuses a DELETE): the records are built without them.
    [record] = evidence_export._approval_records(
        approval,
        votes=[],
        rule_use=None,
        tiers={},
        steps=list(Step.objects.filter(kind=Step.Kind.DECISION)),
        tapped=set(),
    )
    assert (record["decision"], record["decided_by"], record["reason"]) == (
        "rejected",
        "arthur",
        "no",
    )


def test_the_agent_filter_and_the_period_bound_the_export(approver, no_enqueue):
    wipe = {"to": "staging", "amount": "1"}
    for slug, payload in (("test-payer", TRANSFER), ("test-wiper", wipe)):
        _run, approval = gated(slug, payload)
        decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    assert {r["agent"] for r in rows(export())} == {"test-payer", "test-wiper"}
    assert {r["agent"] for r in rows(export(agent="test-wiper"))} == {"test-wiper"}
    assert {r["agent"] for r in rows(export(agents=["test-payer"]))} == {"test-payer"}
    later = timezone.now() + timedelta(hours=2)
    empty = "".join(
        evidence_export.export_lines(since=later, until=later + timedelta(days=1), fmt="jsonl")
    )
    assert rows(empty) == [] and evidence_chain.verify(empty, key=key()).ok


def test_records_read_in_chunks_are_the_same_records(approver, no_enqueue, monkeypatch):
    for _ in range(5):
        _run, approval = gated("test-payer", TRANSFER)
        decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    whole = list(evidence_export.records(**period()))
    monkeypatch.setattr(evidence_export, "CHUNK", 2)
    assert list(evidence_export.records(**period())) == whole and len(whole) == 5
    assert [r["decided_at"] for r in whole] == sorted(r["decided_at"] for r in whole)


def test_csv_cells_cannot_run_as_formulas(approver, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason='=HYPERLINK("x")')
    text = export("csv")
    assert "'=HYPERLINK" in text
    assert ",=HYPERLINK" not in text and ',"=HYPERLINK' not in text
    assert evidence_chain.verify(text, key=key()).ok


# --- tampering ---------------------------------------------------------------------------------
@pytest.fixture
def three_decisions(approver, no_enqueue):
    decide_three(approver)


def decide_three(approver) -> None:
    for reason in ("one", "two", "three"):
        _run, approval = gated("test-payer", TRANSFER)
        decisions.decide(approval.pk, user=approver, decision="reject", reason=reason)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_untouched_export_verifies(three_decisions, fmt):
    result = evidence_chain.verify(export(fmt), key=key())
    assert result.ok, result.problem
    assert result.records == 3


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_edited_field_is_detected(three_decisions, fmt):
    text = export(fmt).replace("two", "TWO", 1)
    result = evidence_chain.verify(text, key=key())
    assert not result.ok and "edited" in result.problem


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_dropped_line_is_detected(three_decisions, fmt):
    lines = _lines(export(fmt))
    first = 2 if fmt == "csv" else 1  # after the CSV's column names and the header line
    del lines[first + 1]
    result = evidence_chain.verify("".join(lines), key=key())
    assert not result.ok and "prev_hash" in result.problem


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_reordered_lines_are_detected(three_decisions, fmt):
    lines = _lines(export(fmt))
    first = 2 if fmt == "csv" else 1
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    assert not evidence_chain.verify("".join(lines), key=key()).ok


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_two_spliced_exports_are_detected(three_decisions, fmt):
    a, b = _lines(export(fmt)), _lines(export(fmt))
    spliced = "".join(a[:-2] + b[-2:])  # a's first records, b's last record and trailer
    result = evidence_chain.verify(spliced, key=key())
    assert not result.ok


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_truncated_file_is_detected(three_decisions, fmt):
    result = evidence_chain.verify("".join(_lines(export(fmt))[:-1]), key=key())
    assert not result.ok and "truncated" in result.problem


def test_a_changed_trailer_is_detected(three_decisions):
    lines = _lines(export())
    trailer = json.loads(lines[-1])
    trailer["records"] = 2
    lines[-1] = json.dumps(trailer) + "\n"
    assert not evidence_chain.verify("".join(lines), key=key()).ok


def test_a_rebuilt_chain_without_the_key_is_detected(three_decisions):
    """Someone who edits a record and recomputes every hash and the trailer's final hash, but
    has not the key, cannot make the signature."""
    lines = [json.loads(line) for line in export().splitlines()]
    lines[2]["reason"] = "forged"
    prev = ""
    for line in lines:
        if line["line"] == "trailer":
            line["final_hash"] = prev
        body = {k: v for k, v in line.items() if k not in ("prev_hash", "line_hash")}
        line["prev_hash"] = prev
        line["line_hash"] = prev = evidence_chain.chain_hash(prev, evidence_chain._canonical(body))
    forged = "".join(json.dumps(line) + "\n" for line in lines)
    result = evidence_chain.verify(forged, key=key())
    assert not result.ok and "signature" in result.problem
    assert evidence_chain.verify(forged, key=b"another key").problem.startswith("signed with")


def test_a_file_signed_with_another_key_is_refused(three_decisions, settings):
    text = export()
    settings.AGENTOPS = {**settings.AGENTOPS, "EVIDENCE_KEY": "a dedicated key"}
    assert not evidence_chain.verify(text, key=evidence_export.signing_key()).ok
    assert evidence_chain.verify(export(), key=b"a dedicated key").ok


# --- the commands --------------------------------------------------------------------------------
def test_the_commands_export_and_verify_and_exit_1_on_a_tampered_file(three_decisions, tmp_path):
    target = tmp_path / "decisions.csv"
    today = timezone.now().date().isoformat()
    call_command("export_decisions", since=today, until=today, format="csv", output=str(target))
    out = io.StringIO()
    call_command("verify_decisions_export", str(target), stdout=out)
    assert out.getvalue().startswith("OK: 3 decision record(s)")
    target.write_text(target.read_text().replace("three", "thr33"))
    with pytest.raises(SystemExit) as exited:
        call_command("verify_decisions_export", str(target), stderr=io.StringIO())
    assert exited.value.code == 1


def test_the_export_command_writes_to_stdout_and_verifies_offline_with_the_key(three_decisions):
    out = io.StringIO()
    today = timezone.now().date().isoformat()
    call_command("export_decisions", since=today, until=today, stdout=out)
    assert len(rows(out.getvalue())) == 3
    assert evidence_chain.verify(out.getvalue(), key=key()).ok


@pytest.mark.parametrize(
    ("since", "until", "fmt", "said"),
    [
        ("yesterday", "2026-01-02", "csv", "not an ISO date"),
        ("2026-01-02", "2026-01-01", "csv", "until must be after since"),
        ("2026-01-01", "2026-01-02", "xlsx", "format must be one of"),
    ],
)
def test_the_export_command_refuses_bad_input(db, since, until, fmt, said):
    with pytest.raises(CommandError, match=said):
        call_command("export_decisions", since=since, until=until, format=fmt)


# --- the page and the API ---------------------------------------------------------------------
URL = reverse("approvals:decisions_export")
API = "/api/approvals/export"


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _token(user) -> Client:
    _, raw = ApiToken.issue(user, "tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_an_admin_downloads_a_streamed_signed_file_from_the_page(admin_user, three_decisions):
    page = _logged_in(admin_user).get(URL)
    assert page.status_code == 200 and b"decisions-export-form" in page.content
    audit = _logged_in(admin_user).get(reverse("runs:audit"))
    assert URL.encode() in audit.content
    today = timezone.now().date().isoformat()
    response = _logged_in(admin_user).get(
        URL, {"since": today, "until": today, "format": "csv", "download": "1"}
    )
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    assert evidence_chain.verify(text, key=key()).records == 3


def test_an_admin_token_downloads_it_from_the_api(admin_user, three_decisions):
    today = timezone.now().date().isoformat()
    response = _token(admin_user).get(API, {"since": today, "until": today})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode()
    assert evidence_chain.verify(text, key=key()).ok and len(rows(text)) == 3


def test_each_download_is_logged_with_who_and_which(admin_user, caplog, db):
    with caplog.at_level("INFO", logger="agentops.approvals"):
        response = _token(admin_user).get(
            API, {"since": "2026-01-01", "until": "2026-01-31", "agent": "test-payer"}
        )
    assert response.status_code == 200
    [message] = [r.getMessage() for r in caplog.records if "decisions export" in r.getMessage()]
    assert message.startswith("decisions export by ada: 2026-01-01T00:00:00+00:00")
    assert message.endswith("jsonl, agent test-payer, team any, agents all")


@pytest.mark.parametrize("who", ["approver", "operator", "viewer"])
def test_only_admins_may_export(request, who):
    user = request.getfixturevalue(who)
    assert _logged_in(user).get(URL).status_code == 403
    params = {"since": "2026-01-01", "until": "2026-01-02"}
    assert _token(user).get(API, params).status_code == 403
    assert _logged_in(user).get(API, params).status_code == 403


def test_anonymous_callers_are_sent_to_sign_in_or_refused(db):
    assert Client().get(URL).status_code == 302
    assert Client().get(API, {"since": "2026-01-01", "until": "2026-01-02"}).status_code == 401


def test_the_export_is_a_read_and_takes_no_post(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    refused = client.post(URL, {"since": "2026-01-01"})
    assert refused.status_code == 403 and b"CSRF" in refused.content  # no token: CSRF first
    assert _logged_in(admin_user).post(URL, {"since": "2026-01-01"}).status_code == 405
    assert _token(admin_user).post(API).status_code == 405


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"since": "31/01/2026", "until": "2026-02-01"}, "not an ISO date"),
        ({"since": "", "until": "2026-02-01"}, "since is required"),
        ({"since": "2026-02-01", "until": "2026-01-01"}, "until must be after since"),
        ({"since": "2026-01-01", "until": "2026-02-01", "format": "pdf"}, "format must be"),
        ({"since": "2026-01-01", "until": "2026-02-01", "agent": "<b>x"}, "not an agent"),
    ],
)
def test_bad_requests_are_a_clear_400(admin_user, params, said):
    page = _logged_in(admin_user).get(URL, {**params, "download": "1"})
    assert page.status_code == 400 and said in page.content.decode()
    assert b"<b>x" not in page.content  # the agent is escaped where shown
    api = _token(admin_user).get(API, params)
    assert api.status_code == 400 and said in api.json()["detail"]


# --- the scheduled export -------------------------------------------------------------------------
def test_the_scheduled_export_writes_the_previous_day(approver, no_enqueue, settings, tmp_path):
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    settings.AGENTOPS = {
        **settings.AGENTOPS,
        "DECISIONS_EXPORT_DIR": str(tmp_path),
        "DECISIONS_EXPORT_FORMAT": "csv",
        "DECISIONS_EXPORT_PERIOD": "day",
    }
    (path,) = evidence_export.write_scheduled(now=timezone.now() + timedelta(days=1))
    assert path.parent == tmp_path and path.suffix == ".csv"
    assert list(tmp_path.iterdir()) == [path]  # no partial file left behind
    result = evidence_chain.verify_file(path, key=key())
    assert result.ok and result.records == 1


def test_each_team_gets_its_own_scheduled_file_of_its_agents(
    approver, no_enqueue, settings, tmp_path
):
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    payments = Team.objects.create(name="Payments", slug="payments")
    TeamAgent.objects.create(team=payments, agent="test-payer")
    Team.objects.create(name="Research", slug="research")  # owns nothing decided
    settings.AGENTOPS = {**settings.AGENTOPS, "DECISIONS_EXPORT_DIR": str(tmp_path)}
    everything, *teams = evidence_export.write_scheduled(now=timezone.now() + timedelta(days=1))
    assert everything.parent == tmp_path
    by_team = {path.parent.name: path for path in teams}
    assert set(by_team) == {"payments", "research"}
    assert by_team["payments"].name.startswith("decisions-payments-")
    ours = evidence_chain.verify_file(by_team["payments"], key=key())
    assert ours.ok and ours.records == 1
    header = json.loads(by_team["payments"].read_text().splitlines()[0])
    assert (header["team"], header["agents"]) == ("payments", ["test-payer"])
    theirs = evidence_chain.verify_file(by_team["research"], key=key())
    assert theirs.ok and theirs.records == 0  # signed, and empty: nothing of another team
    assert not list(tmp_path.rglob("*.partial"))


def test_the_scheduled_export_does_nothing_without_a_directory(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "DECISIONS_EXPORT_DIR": ""}
    assert evidence_export.write_scheduled() == []


@pytest.mark.parametrize(
    ("period", "since", "until"),
    [
        ("day", datetime(2026, 3, 4, tzinfo=UTC), datetime(2026, 3, 5, tzinfo=UTC)),
        ("week", datetime(2026, 2, 23, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)),
        ("month", datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
    ],
)
def test_the_previous_period_is_whole(period, since, until):
    now = datetime(2026, 3, 5, 0, 15, tzinfo=UTC)  # a Thursday
    assert evidence_export.previous_period(now, period) == (since, until)


def test_the_beat_task_writes_the_export_where_configured(settings, tmp_path, db):
    settings.AGENTOPS = {**settings.AGENTOPS, "DECISIONS_EXPORT_DIR": str(tmp_path / "evidence")}
    written = Path(tasks.export_decisions())
    assert written.parent == tmp_path / "evidence" and written.suffix == ".jsonl"
    assert evidence_chain.verify_file(written, key=key()).ok


CRON_DUMP = """
import json
from agentops import settings as s
entry = s.CELERY_BEAT_SCHEDULE.get("export-decisions")
print(json.dumps(entry and {"task": entry["task"], "schedule": repr(entry["schedule"])}))
"""


def _settings_process(tmp_path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in CONTROLLED and "EXPORT" not in k}
    clean.update(AGENTOPS_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "-c", CRON_DUMP], cwd=ROOT, env=clean, capture_output=True, text=True
    )


def test_the_cron_variable_schedules_the_export_in_beat(tmp_path):
    proc = _settings_process(
        tmp_path,
        AGENTOPS_DECISIONS_EXPORT_CRON="15 0 1 * 3",
        AGENTOPS_DECISIONS_EXPORT_DIR=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    assert entry["task"] == "approvals.tasks.export_decisions"
    # Cron's field order (day of month before day of week), not crontab()'s positional one.
    assert "15 0 1 * 3 (m/h/dM/MY/d)" in entry["schedule"]
    assert json.loads(_settings_process(tmp_path).stdout) is None  # unset: not scheduled


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AGENTOPS_DECISIONS_EXPORT_CRON": "15 0 * * *"}, "needs AGENTOPS_DECISIONS_EXPORT_DIR"),
        (
            {"AGENTOPS_DECISIONS_EXPORT_CRON": "daily", "AGENTOPS_DECISIONS_EXPORT_DIR": "/x"},
            "five cron fields",
        ),
        (
            {"AGENTOPS_DECISIONS_EXPORT_CRON": "99 0 * * *", "AGENTOPS_DECISIONS_EXPORT_DIR": "/x"},
            "five cron fields",
        ),
        ({"AGENTOPS_DECISIONS_EXPORT_FORMAT": "xlsx"}, "csv or jsonl"),
        ({"AGENTOPS_DECISIONS_EXPORT_PERIOD": "year"}, "day, week or month"),
    ],
)
def test_a_misconfigured_schedule_stops_start_up_with_the_reason(tmp_path, env, said):
    proc = _settings_process(tmp_path, **env)
    assert proc.returncode != 0 and said in proc.stderr


def test_the_verifier_needs_only_the_standard_library():
    """So a file can be checked offline, away from an installation, with the key."""
    source = Path(evidence_chain.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0] if node.level == 0 else ".")
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


# An export made before the evidence file's key derivation moved to agentkit/signing.py: its
# fixed header, record and key, and the signatures and derived key that code computed then.
OLD_KEY = b"evidence-key-for-the-compatibility-test"
OLD_HEADER = evidence_chain.Header(
    since=datetime(2026, 1, 1, tzinfo=UTC),
    until=datetime(2026, 2, 1, tzinfo=UTC),
    agent="test-payer",
    created_at=datetime(2026, 2, 1, 0, 5, tzinfo=UTC),
    export_id="0" * 32,
)
OLD_RECORD = {
    "decided_at": "2026-01-15T10:00:00+00:00",
    "approval": "a1",
    "run": "r1",
    "agent": "test-payer",
    "kind": "tool",
    "tool": "transfer",
    "decision": "approve",
    "decided_by": "bea",
    "reason": "=looks fine",
    "step_seq": 3,
}
OLD_SIGNATURES = {
    "jsonl": "1f94f32189245b915e89677aa4fd28cdfdbd5fd1820cd2d358ff7b4be910cd6f",
    "csv": "484e957fac4f54b38a794819ca4cbacf2f5000c3367fe0079c487ac51ab60ffe",
}
OLD_SECRET_KEY = "django-insecure-secret-for-the-compatibility-test"
OLD_DERIVED_KEY = "f8fedf5994c0a2af1e19271086d6b236d0ec85e48d82548e3f3113b7a4e708bf"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_signed_before_still_verifies_and_is_signed_the_same(fmt):
    text = "".join(
        evidence_chain.signed_lines([OLD_RECORD], fmt=fmt, header=OLD_HEADER, key=OLD_KEY)
    )
    result = evidence_chain.verify(text, key=OLD_KEY)
    assert result.ok, result.problem
    assert result.trailer is not None and result.trailer["signature"] == OLD_SIGNATURES[fmt]
    assert not evidence_chain.verify(text, key=OLD_KEY + b"x").ok


def test_the_key_derived_from_secret_key_is_the_one_exports_were_signed_with(settings):
    settings.SECRET_KEY = OLD_SECRET_KEY
    settings.AGENTOPS = {**settings.AGENTOPS, "EVIDENCE_KEY": ""}
    assert evidence_export.signing_key().hex() == OLD_DERIVED_KEY


def test_the_trailer_is_signed_with_the_one_signing_modules_mac():
    trailer = {"records": 2, "final_hash": "ab" * 32, "export_id": "e1", "signature": "old"}
    body = json.dumps(
        {k: v for k, v in trailer.items() if k != "signature"},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert (
        evidence_chain.sign(trailer, OLD_KEY) == signing.hmac_sha256(OLD_KEY, body.encode()).hex()
    )


# --- more grants and channels ---------------------------------------------------------------------
def test_a_decision_by_an_escalation_tier_names_the_tier(operator, bea, dan, no_enqueue):
    chain = [{"after_seconds": 60, "users": ["dan"], "roles": []}]
    _run, approval = gated("test-payer", TRANSFER, by=operator, approvers=["bea"], escalation=chain)
    Escalation.objects.create(approval=approval, tier=1, notified=["dan"])
    decisions.decide(approval.pk, user=dan, decision="reject", reason="not this vendor")
    [record] = rows(export())
    assert (record["authority"], record["escalation_tier"]) == ("escalation tier 1", 1)


def test_a_decision_on_the_web_page_says_web(approver, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    response = _logged_in(approver).post(
        reverse("approvals:decide", args=[approval.pk]), {"decision": "reject", "reason": "no"}
    )
    assert response.status_code == 200
    assert [r["via"] for r in rows(export())] == ["web"]


def test_a_decision_through_a_one_tap_link_says_one_tap(approver, operator, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER, by=operator)
    token = one_tap.token_for(approval, approver)
    response = _logged_in(approver).post(
        reverse("approvals:one_tap", args=[token]), {"decision": "reject", "reason": "no"}
    )
    assert response.status_code == 200, response.content
    [record] = rows(export())
    assert record["via"] == "one_tap"
    # A decision recorded before steps named their channel: the spent link still says it.
    step = Step.objects.get(kind=Step.Kind.DECISION)
    step.data.pop("via")
    [unnamed] = list(
        evidence_export._approval_records(
            approval,
            votes=list(approval.votes.all()),
            rule_use=None,
            tiers={},
            steps=[step],
            tapped={(approval.pk, approver.pk)},
        )
    )
    assert unnamed["via"] == "one_tap"


def test_a_batch_decision_says_batch(approver, no_enqueue):
    _run, approval = gated("test-payer", TRANSFER)
    shown = args_hash(approval.tool, approval.args)
    [result] = batch.decide_batch(
        user=approver, decision="reject", items=[(str(approval.pk), shown)], reason="no"
    )
    assert result.result == "decided", result
    assert [r["via"] for r in rows(export())] == ["batch"]


def test_reading_a_period_costs_a_few_queries_per_chunk_not_per_decision(
    approver, no_enqueue, monkeypatch, django_assert_max_num_queries
):
    for _ in range(6):
        _run, approval = gated("test-payer", TRANSFER)
        decisions.decide(approval.pk, user=approver, decision="reject", reason="no")
    monkeypatch.setattr(evidence_export, "CHUNK", 3)
    # The approvals a chunk at a time (and the read that finds none left), 5 more per chunk.
    with django_assert_max_num_queries(3 + 2 * 5):
        assert len(list(evidence_export.records(**period()))) == 6


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_line_breaks_and_separators_in_a_reason_survive_the_round_trip(approver, no_enqueue, fmt):
    reason = 'first line\r\nsecond, "quoted"\u2028third'
    _run, approval = gated("test-payer", TRANSFER)
    decisions.decide(approval.pk, user=approver, decision="reject", reason=reason)
    text = export(fmt)
    result = evidence_chain.verify(text, key=key())
    assert result.ok, result.problem
    assert result.records == 1
    if fmt == "jsonl":
        assert rows(text)[0]["reason"] == reason
    else:
        table = csv.DictReader(io.StringIO(text, newline=""))
        [row] = [r for r in table if r["line"] == "decision"]
        assert row["reason"] == reason


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_download_streams_in_batches(admin_user, monkeypatch):
    """Django reads a synchronous iterator whole into memory under ASGI: the view hands it an
    asynchronous one that reads a slice of lines at a time (agentkit/streaming.py)."""
    read: list[int] = []

    def records(**filters):
        for n in range(450):
            read.append(n)
            yield {"reason": str(n)}

    monkeypatch.setattr(evidence_export, "records", records)
    client = AsyncClient()
    await sync_to_async(client.force_login)(admin_user)
    today = timezone.now().date().isoformat()
    params = {"since": today, "until": today, "format": "jsonl", "download": "1"}
    response = await client.get(URL, params)
    assert response.status_code == 200 and response.is_async
    chunks = []
    async for chunk in response.streaming_content:
        chunks.append(chunk)
        if len(chunks) == 1:
            assert len(read) < 450  # the first batch went out before the last record was read
    # The connection the batches were read on: the test database is dropped after the test.
    await sync_to_async(connections.close_all)()
    assert len(chunks) == 452  # header, 450 records, trailer
    text = b"".join(chunks).decode()
    assert evidence_chain.verify(text, key=key()).records == 450


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_under_asgi_a_download_of_real_decisions_is_asynchronous_and_complete(
    async_client, admin_user, approver, no_enqueue, monkeypatch, fmt
):
    await sync_to_async(decide_three)(approver)
    monkeypatch.setattr(streaming, "SLICE", 2)  # several slices for five lines
    await async_client.aforce_login(admin_user)
    today = timezone.now().date().isoformat()
    params = {"since": today, "until": today, "format": fmt, "download": "1"}
    response = await async_client.get(URL, params)
    assert response.status_code == 200 and response.is_async
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    await sync_to_async(connections.close_all)()
    result = evidence_chain.verify(text, key=key())
    assert result.ok, result.problem
    assert result.records == 3


def test_the_verify_command_takes_the_key_offline(three_decisions, settings, tmp_path, monkeypatch):
    settings.AGENTOPS = {**settings.AGENTOPS, "EVIDENCE_KEY": "the auditors' copy"}
    target = tmp_path / "decisions.jsonl"
    target.write_text(export())
    settings.AGENTOPS = {**settings.AGENTOPS, "EVIDENCE_KEY": ""}  # elsewhere: not this key
    with pytest.raises(SystemExit):
        call_command("verify_decisions_export", str(target), stderr=io.StringIO())
    out = io.StringIO()
    call_command("verify_decisions_export", str(target), key="the auditors' copy", stdout=out)
    assert out.getvalue().startswith("OK: 3")
    monkeypatch.setenv("EVIDENCE_KEY", "the auditors' copy")
    out = io.StringIO()
    call_command("verify_decisions_export", str(target), key_env="EVIDENCE_KEY", stdout=out)
    assert out.getvalue().startswith("OK: 3")
    with pytest.raises(CommandError, match="NO_SUCH_VARIABLE"):
        call_command("verify_decisions_export", str(target), key_env="NO_SUCH_VARIABLE")
