"""Access rules across every HTML page: login, role, method and CSRF, checked URL by URL.

The views and their own tests check their rules one by one; this module walks the whole URL
map, so a page added without its checks fails here.
"""

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.models import ApiToken, Team, TeamAgent, TeamMember
from approvals.models import Approval, ApprovalView, Delegation, Grant, Plan
from approvals.notify.one_tap import links as one_tap
from evals.models import Case, Dataset, RegressionRun
from runs.models import Budget, PendingOperation, Run, args_hash
from tests.approvals.learning.test_views import learning_objects
from tests.approvals.test_views import gated_run

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "norole", "viewer", "operator", "approver", "admin"]


@pytest.fixture
def users(django_user_model):
    def user(name: str, *roles: str):
        # No password: these tests log in with force_login, and hashing five passwords per
        # test would be most of the module's run time.
        user = django_user_model.objects.create(username=name)
        user.groups.add(*(Group.objects.get_or_create(name=r)[0] for r in roles))
        return user

    return {
        "norole": user("nora"),
        "viewer": user("vera", "viewer"),
        "operator": user("otto", "operator"),
        "approver": user("april", "approver"),
        "admin": user("adam", "admin"),
    }


@pytest.fixture
def world(users, no_enqueue):
    """A run waiting on an approval, launched by the operator (so others may decide it)."""
    run, approval = gated_run(users["operator"])
    operation = PendingOperation.objects.create(
        run=run,
        key="k" * 64,
        tool="send_customer_email",
        awaits="a reply",
        completion="operator",
        deadline=timezone.now() + timedelta(hours=1),
    )
    delegation = Delegation.objects.create(
        user=users["approver"], delegate=users["admin"], ends=timezone.now() + timedelta(days=1)
    )
    # The run's agent belongs to team Alpha, every user of the matrix in it with their role's
    # powers (what the migration gives an existing install): the roles alone decide here.
    team = Team.objects.create(name="Alpha", slug="alpha")
    TeamAgent.objects.create(team=team, agent=run.agent)
    for role, user in users.items():
        TeamMember.objects.create(
            team=team,
            user=user,
            launch=role in ("operator", "admin"),
            decide=role in ("approver", "admin"),
            administer=role == "admin",
        )
    return {
        "run": run,
        "approval": approval,
        "operation": operation,
        "delegation": delegation,
        # A standing grant another approver gave, for the revoke button.
        "grant": Grant.objects.create(
            scope="agent", agent=run.agent, tool=approval.tool, max_uses=3, granted_by_name="x"
        ),
        "budget": Budget.objects.create(agent="sql-analyst", amount_usd=Decimal("100")),
        "team": team,
        **learning_objects(run),
        **regression_objects(run, approval, users["approver"]),
        "plan": plan_approval(run, approval),
    }


def plan_approval(run: Run, approval: Approval) -> Approval:
    """A plan the run's agent submitted (approvals/plans/models.py), waiting on its screen."""
    plan = Approval.objects.create(
        run=run,
        gate_seq=approval.gate_seq,
        llm_seq=approval.llm_seq,
        tool_use_id="plan-in-the-matrix",
        kind=Approval.Kind.PLAN,
        tool="submit_plan",
        args={"goal": "matrix", "steps": [{"tool": "lookup_order", "args": {"order_id": 1}}]},
        explanation="matrix",
        expires_at=approval.expires_at,
    )
    Plan.objects.create(run=run, approval=plan, goal="matrix")
    return plan


def regression_objects(run: Run, approval: Approval, approver) -> dict:
    """A dataset of the run's agent with a case, a regression run of it, and a decided call
    the approval card may add."""
    dataset = Dataset.objects.create(name="matrix", agent=run.agent)
    case = Case.objects.create(
        dataset=dataset,
        input=run.input,
        context=[{"role": "user", "content": "Revenue?"}],
        state={"pending": [], "recent_calls": []},
        tool=approval.tool,
        proposed_args=approval.args,
        expected_args=approval.args,
        verdict=Case.Verdict.APPROVED,
    )
    decided = Approval.objects.create(
        run=run,
        gate_seq=approval.gate_seq,
        llm_seq=approval.llm_seq,
        tool_use_id="decided-in-the-matrix",
        tool=approval.tool,
        args=approval.args,
        explanation="matrix",
        status=Approval.Status.REJECTED,
        reason="matrix",
        decided_at=timezone.now(),
        decided_by=approver,
        expires_at=approval.expires_at,
    )
    regression = RegressionRun.objects.create(
        dataset=dataset, agent=run.agent, provider="scripted", fingerprint="f" * 12
    )
    return {"dataset": dataset, "case": case, "decided": decided, "regression": regression}


def client_for(users, role: str, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if role != "anonymous":
        client.force_login(users[role])
    return client


HTML_APPS = ("runs", "approvals", "triggers", "teams", "evals", "two_factor")


def _html_url_names() -> set[str]:
    """Every named URL of the project's own HTML apps (the API and admin have their own)."""
    names: set[str] = set()

    def walk(patterns, namespace):
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = p.namespace or namespace
                if ns in ("admin", "api"):
                    continue
                walk(p.url_patterns, ns)
            elif isinstance(p, URLPattern) and p.name and namespace in HTML_APPS:
                names.add(f"{namespace}:{p.name}")

    walk(get_resolver().url_patterns, None)
    return names


# name -> (methods, who may) ; "view" means any role, None means nobody is refused a role.
PAGES = {
    "runs:dashboard": ("GET", "view"),
    "runs:list": ("GET", "view"),
    "runs:new": ("GET", "operate"),
    "runs:detail": ("GET", "view"),
    "runs:steps": ("GET", "view"),
    "runs:step": ("GET", "view"),
    "runs:export": ("GET", "view"),
    "runs:audit": ("GET", "view"),
    "runs:audit_run": ("GET", "view"),
    "runs:cancel": ("POST", "operate"),
    "runs:actions": ("GET", "view"),
    "runs:pending": ("GET", "view"),
    "runs:pending_finish": ("POST", "operate"),
    "runs:steer": ("GET", "view"),
    "runs:pause": ("POST", "operate"),
    "runs:resume": ("POST", "operate"),
    "runs:instruct": ("POST", "operate"),
    "runs:recover": ("POST", "operate"),
    "runs:reopen": ("POST", "operate"),
    "runs:compensation": ("GET", "view"),
    "runs:compensate": ("POST", "operate"),
    "approvals:queue": ("GET", "view"),
    "approvals:stats": ("GET", "administer"),
    "approvals:decisions_export": ("GET", "administer"),
    "approvals:detail": ("GET", "view"),
    "approvals:opened": ("POST", "approve"),
    "approvals:decide": ("POST", "approve"),
    "approvals:edit_preview": ("POST", "approve"),
    "approvals:claim": ("POST", "approve"),
    "approvals:batch": ("POST", "approve"),
    "approvals:delegations": ("GET", "approve"),
    "approvals:end_delegation": ("POST", "approve"),
    # A one-tap link works for the approver it was sent to only (here: the admin).
    "approvals:one_tap": ("GET", "link owner"),
    "approvals:rules": ("GET", "view"),
    "approvals:accept_rule": ("POST", "admin"),
    "approvals:decline_rule": ("POST", "admin"),
    "approvals:revoke_rule": ("POST", "admin"),
    "approvals:clear_override": ("POST", "admin"),
    "approvals:review": ("GET", "view"),
    "approvals:review_call": ("POST", "approve"),
    "approvals:grants": ("GET", "approve"),
    "approvals:grant": ("POST", "approve"),
    "approvals:revoke_grant": ("POST", "approve"),
    "approvals:plan": ("GET", "view"),
    "approvals:decide_plan": ("POST", "approve"),
    "approvals:run_plan": ("GET", "view"),
    # Operators and approvers; the world's run is not halted, so they get a 409 for that.
    "approvals:resume_halted": ("POST", "operate or approve"),
    "triggers:schedules": ("GET", "view"),
    "runs:budgets": ("GET", "view"),
    "runs:budget_edit": ("GET", "admin"),
    "runs:budget_delete": ("POST", "admin"),
    "teams:list": ("GET", "admin"),
    "teams:new": ("GET", "admin"),
    "teams:edit": ("GET", "admin"),
    "teams:delete": ("POST", "admin"),
    "evals:datasets": ("GET", "view"),
    "evals:dataset": ("GET", "view"),
    "evals:add_decisions": ("POST", "operate"),
    "evals:remove_case": ("POST", "operate"),
    "evals:run_regression": ("POST", "operate"),
    "evals:add_approval": ("POST", "operate"),
    "evals:regression_run": ("GET", "view"),
    "evals:compare": ("GET", "view"),
    # Anyone signed in, role or not, manages their own two-factor sign-in.
    "two_factor:setup": ("GET", "signed in"),
    "two_factor:start": ("POST", "signed in"),
    "two_factor:confirm": ("POST", "signed in"),
    "two_factor:remove": ("POST", "signed in"),
    # The code step of a password sign-in: without one waiting (as here), back to sign-in.
    "two_factor:verify": ("GET", "signed in"),
    "two_factor:recovery_codes": ("POST", "signed in"),
    "two_factor:verify_recovery_code": ("POST", "signed in"),
    "two_factor:key_options": ("POST", "signed in"),
    "two_factor:key_register": ("POST", "signed in"),
    "two_factor:key_remove": ("POST", "signed in"),
    # The security key step of a password sign-in (JSON for static/js/passkeys.js): without
    # one waiting, a 400 saying so, for anyone.
    "two_factor:verify_key_options": ("POST", "signed in"),
    "two_factor:verify_key": ("POST", "signed in"),
}
# JSON answers to anonymous callers too: no sign-in waiting (a 400 leading to the sign-in page).
SIGN_IN_STEPS_JSON = {"two_factor:verify_key_options", "two_factor:verify_key"}
ALLOWED = {
    "view": {"viewer", "operator", "approver", "admin"},
    "operate": {"operator", "admin"},
    "approve": {"approver", "admin"},
    "admin": {"admin"},
    # Admins, and the members a team gives `administer` (in the world, Alpha gives it to the
    # admin alone; team Bravo's people hold it in the team dimension below).
    "administer": {"admin"},
    "link owner": {"admin"},
    "operate or approve": {"operator", "approver", "admin"},
    "signed in": {"norole", "viewer", "operator", "approver", "admin"},
}
# What an allowed role gets where it is not a success: refused for another reason than the role.
ALLOWED_STATUS = {
    "approvals:resume_halted": 409,
    # A key registration without the browser's answer; someone else's (or no) key.
    "two_factor:key_register": 400,
    "two_factor:key_remove": 404,
    "two_factor:verify_key_options": 400,
    "two_factor:verify_key": 400,
}


def url_of(name: str, world) -> str:
    run, approval = world["run"], world["approval"]
    args = {
        "runs:detail": [run.pk],
        "runs:steps": [run.pk],
        "runs:step": [run.pk, 1],
        "runs:export": [run.pk, "json"],
        "runs:audit_run": [run.pk],
        "runs:cancel": [run.pk],
        "runs:actions": [run.pk],
        "runs:pending": [run.pk],
        "runs:pending_finish": [run.pk, world["operation"].pk],
        "runs:steer": [run.pk],
        "runs:pause": [run.pk],
        "runs:resume": [run.pk],
        "runs:instruct": [run.pk],
        "runs:recover": [run.pk],
        "runs:reopen": [run.pk],
        "runs:compensation": [run.pk],
        "runs:compensate": [run.pk],
        "approvals:detail": [approval.pk],
        "approvals:opened": [approval.pk],
        "approvals:decide": [approval.pk],
        "approvals:edit_preview": [approval.pk],
        "approvals:claim": [approval.pk],
        "approvals:end_delegation": [world["delegation"].pk],
        "approvals:one_tap": [one_tap.token_for(approval, world["delegation"].delegate)],
        "approvals:accept_rule": [world["rule"].pk],
        "approvals:decline_rule": [world["rule"].pk],
        "approvals:revoke_rule": [world["rule"].pk],
        "approvals:clear_override": [world["override"].pk],
        "approvals:review_call": [world["review"].pk],
        "approvals:grant": [approval.pk],
        "approvals:revoke_grant": [world["grant"].pk],
        "approvals:plan": [world["plan"].pk],
        "approvals:decide_plan": [world["plan"].pk],
        "approvals:run_plan": [run.pk],
        "approvals:resume_halted": [approval.pk],
        "runs:budget_edit": [world["budget"].pk],
        "runs:budget_delete": [world["budget"].pk],
        "teams:edit": [world["team"].pk],
        "teams:delete": [world["team"].pk],
        "evals:dataset": [world["dataset"].pk],
        "evals:add_decisions": [world["dataset"].pk],
        "evals:remove_case": [world["dataset"].pk, world["case"].pk],
        "evals:run_regression": [world["dataset"].pk],
        "evals:add_approval": [world["decided"].pk],
        "evals:regression_run": [world["regression"].pk],
        "evals:compare": [world["regression"].pk],
        "two_factor:key_remove": [999_999],
    }.get(name, [])
    url = reverse(name, args=args)
    if name == "evals:compare":
        return f"{url}?before={world['regression'].pk}"
    return url + "?before=99" if name == "runs:steps" else url


REFUSED_ON_THEIR_MERITS = {"runs:resume", "runs:recover", "runs:reopen", "runs:compensate"}


def test_every_html_url_is_covered_here():
    assert _html_url_names() == set(PAGES)


def test_admin_users_hold_every_role(users):
    # The matrix below relies on it: admin is "everything, plus approver statistics".
    admin = users["admin"]
    assert admin.can_view and admin.can_operate and admin.can_approve and admin.is_admin


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", sorted(PAGES))
def test_login_and_role_are_checked_on_every_page(name, role, users, world):
    method, need = PAGES[name]
    client = client_for(users, role)
    url = url_of(name, world)
    data = {
        "approvals:decide": {"decision": "reject", "reason": "matrix"},
        "approvals:batch": {"decision": "reject", "reason": "matrix", "item": "x:y"},
        "runs:pending_finish": {"action": "complete", "result": "done"},
        "approvals:claim": {"claim": "release"},
        "approvals:grant": {"kind": "count", "uses": "2"},
        "approvals:decide_plan": {"decision": "reject", "reason": "matrix"},
        "runs:instruct": {"text": "matrix", "key": "matrix"},
        "runs:recover": {"choice": "skip"},
        "runs:reopen": {"choice": "retry"},
        "runs:compensate": {"effect": "all"},
        "evals:run_regression": {"agent": world["run"].agent, "provider": "scripted"},
        "evals:add_approval": {"dataset": world["dataset"].pk},
    }.get(name, {})
    response = client.post(url, data) if method == "POST" else client.get(url)
    if name in SIGN_IN_STEPS_JSON:
        assert response.status_code == 400 and "sign in again" in response.json()["error"]
    elif role == "anonymous":
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    elif role in ALLOWED[need] and name in REFUSED_ON_THEIR_MERITS:
        # Past the role check, this world's run refuses them: it is not paused, has no
        # failed step waiting and did not fail (nor was it cancelled: nothing to compensate).
        assert response.status_code == 409, response.status_code
    elif role in ALLOWED[need]:
        expected = (ALLOWED_STATUS[name],) if name in ALLOWED_STATUS else (200, 204, 302)
        assert response.status_code in expected, response.status_code
    else:
        assert response.status_code == 403


# A team's budget: its edit and remove pages are the admins' and the team's administrators'.
# In this world the viewer administers team Alpha; so does the user with no role, whom that
# grant alone gives nothing (administering needs a role).
TEAM_BUDGET_PAGES = {"runs:budget_edit": "GET", "runs:budget_delete": "POST"}
TEAM_BUDGET_ALLOWED = {"viewer", "admin"}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", sorted(TEAM_BUDGET_PAGES))
def test_a_teams_budget_is_the_admins_and_its_administrators(name, role, users, world):
    TeamMember.objects.filter(user__in=[users["viewer"], users["norole"]]).update(administer=True)
    budget = Budget.objects.create(team=world["team"], amount_usd=Decimal("100"))
    client = client_for(users, role)
    url = reverse(name, args=[budget.pk])
    response = client.post(url) if TEAM_BUDGET_PAGES[name] == "POST" else client.get(url)
    if role == "anonymous":
        assert response.status_code == 302
    elif role in TEAM_BUDGET_ALLOWED:
        assert response.status_code in (200, 302), response.status_code
    else:
        assert response.status_code == 403, response.status_code
    # The agent's budget stays the admins' alone, whatever the teams say.
    agents = client.get(url_of("runs:budget_edit", world))
    assert agents.status_code == (200 if role == "admin" else 302 if role == "anonymous" else 403)


# What each page's Content-Security-Policy must say: the directives that matter, exactly.
CSP_MUST = {
    "default-src": {"'self'"},
    "script-src": {"'self'"},  # no inline script, no eval, no other origin
    "connect-src": {"'self'"},  # fetch and WebSockets only to us
    "frame-ancestors": {"'none'"},  # never framed (clickjacking)
    "object-src": {"'none'"},
    "base-uri": {"'none'"},  # an injected <base> cannot re-point relative URLs
    "form-action": {"'self'"},
}


def _csp(header: str) -> dict[str, set[str]]:
    directives = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name] = set(values)
    return directives


@pytest.mark.parametrize("name", sorted(n for n, (m, _) in PAGES.items() if m == "GET"))
def test_every_page_sends_the_security_headers(name, users, world):
    if name == "two_factor:verify":
        # Shown only to a sign-in waiting for its code: a password given, a device confirmed.
        client = Client()
        users["admin"].set_password("pw")
        users["admin"].save()
        TOTPDevice.objects.create(user=users["admin"], confirmed=True)
        client.post(reverse("login"), {"username": "adam", "password": "pw"})
        response = client.get(url_of(name, world))
    else:
        response = client_for(users, "admin").get(url_of(name, world))
    assert response.status_code == 200, response.status_code
    csp = _csp(response["Content-Security-Policy"])
    for directive, values in CSP_MUST.items():
        assert csp.get(directive) == values, (name, directive, csp.get(directive))
    assert not any("unsafe" in v for values in csp.values() for v in values)
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_htmx_is_configured_for_the_strict_policy(users, world):
    """htmx must not need what the policy refuses: no eval, no inline <script>, no indicator
    <style>, and no `style` attribute copied while it settles a swap (a textarea the browser
    gave an empty style had it set again by setAttribute, which `style-src 'self'` blocks and
    reports: found by the browser suite)."""
    html = client_for(users, "operator").get(url_of("runs:detail", world)).content.decode()
    config = json.loads(re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", html)[1])
    assert config["allowEval"] is False and config["allowScriptTags"] is False
    assert config["includeIndicatorStyles"] is False
    assert "style" not in config["attributesToSettle"]


@pytest.mark.parametrize("name", sorted(n for n, (m, _) in PAGES.items() if m == "GET"))
def test_read_only_pages_refuse_unsafe_methods(name, users, world):
    client = client_for(users, "admin")
    url = url_of(name, world)
    # The launch, budget, team and dataset pages' forms post to themselves; every other page
    # is read-only.
    forms = (
        "evals:datasets",
        "runs:new",
        "approvals:delegations",
        "approvals:one_tap",
        "runs:budgets",
        "runs:budget_edit",
        "teams:new",
        "teams:edit",
        "two_factor:verify",
    )
    methods = ("put", "patch", "delete") + (() if name in forms else ("post",))
    for method in methods:
        assert getattr(client, method)(url).status_code == 405, method


@pytest.mark.parametrize("name", sorted(n for n, (m, _) in PAGES.items() if m == "POST"))
def test_state_changing_pages_refuse_get_and_change_nothing(name, users, world):
    client = client_for(users, "admin")
    assert client.get(url_of(name, world)).status_code == 405
    run, approval = world["run"], world["approval"]
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    assert not ApprovalView.objects.exists()


MEMBER_FORMS = {"members-TOTAL_FORMS": "0", "members-INITIAL_FORMS": "0"}
POSTS = {
    "runs:cancel": {},
    "runs:pause": {},
    "runs:instruct": {"text": "csrf", "key": "csrf"},
    "runs:pending_finish": {"action": "complete"},
    "runs:new": {"agent": "sql-analyst", "question": "Revenue?", "report_to": "a@example.com"},
    "approvals:opened": {},
    "approvals:decide": {"decision": "reject", "reason": "no"},
    "approvals:edit_preview": {},
    "approvals:claim": {"claim": "release"},
    "approvals:batch": {"decision": "reject", "reason": "no", "item": "x:y"},
    "approvals:end_delegation": {},
    "approvals:accept_rule": {"expires_in_days": "1", "max_hits": "5"},
    "approvals:decline_rule": {"reason": "no"},
    "approvals:revoke_rule": {"reason": "no"},
    "approvals:clear_override": {},
    "approvals:review_call": {"verdict": "fine"},
    "approvals:grant": {"kind": "count", "uses": "2"},
    "approvals:revoke_grant": {},
    "approvals:decide_plan": {"decision": "reject", "reason": "no"},
    "teams:new": {"name": "Bravo", "slug": "bravo", **MEMBER_FORMS},
    "teams:delete": {},
    "evals:add_decisions": {"verdict": ""},
    "evals:remove_case": {},
    "two_factor:start": {},
    "two_factor:recovery_codes": {},
    "two_factor:key_options": {},
    "logout": {},
}


@pytest.mark.parametrize("name", sorted(POSTS))
def test_every_post_needs_the_csrf_token(name, users, world):
    client = client_for(users, "admin", csrf=True)
    url = url_of(name, world) if name in PAGES else reverse(name)
    runs_before = Run.objects.count()
    response = client.post(url, POSTS[name])
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert Run.objects.count() == runs_before
    assert Run.objects.get(pk=world["run"].pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=world["approval"].pk).status == Approval.Status.PENDING
    assert not ApprovalView.objects.exists()
    # The same request with the token from the page goes through.
    client.get(reverse("runs:dashboard"))
    token = client.cookies["csrftoken"].value
    response = client.post(url, POSTS[name], HTTP_X_CSRFTOKEN=token)
    assert response.status_code in (200, 204, 302), response.status_code


def test_api_session_posts_need_the_csrf_token_too(users, world):
    client = client_for(users, "admin", csrf=True)
    run, approval = world["run"], world["approval"]
    for url, body in (
        ("/api/runs", {"agent": "sql-analyst", "input": {"question": "q", "report_to": "a@b.co"}}),
        (f"/api/runs/{run.pk}/cancel", {}),
        (f"/api/runs/{run.pk}/compensations", {}),
        (f"/api/approvals/{approval.pk}/decision", {"decision": "reject", "reason": "no"}),
        (f"/api/approvals/{approval.pk}/open", None),
        ("/api/approvals/batch", {"decision": "reject", "reason": "no", "items": []}),
    ):
        response = client.post(url, body, content_type="application/json")
        assert response.status_code == 403, url
        assert "CSRF" in response.json()["detail"]
    assert Run.objects.count() == 1
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    assert not ApprovalView.objects.exists()


@pytest.mark.parametrize(
    "role,method,path,status",
    [
        ("anonymous", "get", "/api/runs", 401),
        ("norole", "get", "/api/runs", 403),
        ("viewer", "get", "/api/runs", 200),
        ("viewer", "post", "/api/runs", 403),
        ("approver", "post", "/api/runs", 403),
        ("viewer", "post", "/api/runs/{run}/cancel", 403),
        ("approver", "post", "/api/runs/{run}/cancel", 403),
        ("viewer", "post", "/api/approvals/{approval}/decision", 403),
        ("operator", "post", "/api/approvals/{approval}/decision", 403),
        ("viewer", "post", "/api/approvals/batch", 403),
        ("operator", "post", "/api/approvals/batch", 403),
        ("approver", "get", "/api/approvals/stats", 403),
        ("admin", "get", "/api/approvals/stats", 200),
        ("norole", "get", "/api/approvals/export?since=2026-01-01&until=2026-01-02", 403),
        ("approver", "get", "/api/approvals/export?since=2026-01-01&until=2026-01-02", 403),
        ("admin", "get", "/api/approvals/export?since=2026-01-01&until=2026-01-02", 200),
    ],
)
def test_api_roles(role, method, path, status, users, world):
    client = client_for(users, role)
    path = path.format(run=world["run"].pk, approval=world["approval"].pk)
    body = {"decision": "approve"} if path.endswith("/decision") else {}
    if path.endswith("/batch"):
        approval = world["approval"]
        items = [{"id": str(approval.pk), "args_hash": args_hash(approval.tool, approval.args)}]
        body = {"decision": "reject", "reason": "no", "items": items}
    if method == "post" and path == "/api/runs":
        body = {"agent": "sql-analyst", "input": {"question": "q", "report_to": "a@b.co"}}
    response = getattr(client, method)(path, body, content_type="application/json")
    assert response.status_code == status, response.content
    assert Run.objects.get(pk=world["run"].pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=world["approval"].pk).status == Approval.Status.PENDING


# --- the team dimension: team Bravo's people and team Alpha's objects ---------------------------
# Pages that name no object of an agent: what they list must leave Alpha's out. Every other page
# names an Alpha object (its run, approval, operation, rule, review, override, one-tap link)
# and must refuse Bravo's people, whatever their role: a page added without the team check
# fails here. The delegation and the teams belong to no agent.
NOT_AN_AGENT_S_OBJECT = {"approvals:end_delegation", "teams:edit", "teams:delete"}
BRAVO_ROLES = ["viewer", "operator", "approver"]


@pytest.fixture
def bravo(django_user_model, world):
    """Team Bravo owns another agent; its members hold every role but admin, with every
    power their team can give. Alpha owns the world's run's agent."""
    team = Team.objects.create(name="Bravo", slug="bravo")
    TeamAgent.objects.create(team=team, agent="refund-desk")
    people = {}
    for role in BRAVO_ROLES:
        user = django_user_model.objects.create(username=f"bravo-{role}")
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        TeamMember.objects.create(team=team, user=user, launch=True, decide=True, administer=True)
        people[role] = user
    return people


def _takes_arguments(name: str) -> bool:
    try:
        reverse(name)
    except NoReverseMatch:
        return True
    return False


def _leaks(world) -> list[str]:
    """What of Alpha's a page shown to Bravo must not hold."""
    return [
        str(world["run"].pk),
        str(world["approval"].pk),
        f'id="rule-{world["rule"].pk}"',
        f'id="review-{world["review"].pk}"',
        f"(review #{world['review'].pk}:",
    ]


@pytest.mark.parametrize("role", BRAVO_ROLES)
@pytest.mark.parametrize("name", sorted(PAGES))
def test_another_team_s_objects_are_refused_and_left_out_of_lists(name, role, bravo, world):
    method, _ = PAGES[name]
    client = Client()
    client.force_login(bravo[role])
    url = url_of(name, world)
    if name == "approvals:one_tap":
        # A link sent to this user (before they left Alpha, say) still opens nothing of Alpha's.
        url = reverse(name, args=[one_tap.token_for(world["approval"], bravo[role])])
    data = {"decision": "reject", "reason": "team", "action": "complete", "claim": "release"}
    if name == "approvals:batch":
        approval = world["approval"]
        data["item"] = f"{approval.pk}:{args_hash(approval.tool, approval.args)}"
    response = client.post(url, data) if method == "POST" else client.get(url)
    names_an_object = _takes_arguments(name) and name not in NOT_AN_AGENT_S_OBJECT
    if names_an_object:
        assert response.status_code in (403, 404), response.status_code
    elif name == "approvals:batch" and role == "approver":
        # The result names the id it was sent, and says there is no such approval.
        assert "no such approval" in response.content.decode()
    elif response.status_code == 200:
        page = response.content.decode()
        assert not [leak for leak in _leaks(world) if leak in page], name
    assert Run.objects.get(pk=world["run"].pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=world["approval"].pk).status == Approval.Status.PENDING
    assert not ApprovalView.objects.exists()


def test_the_launch_form_offers_only_the_team_s_agents(bravo, world):
    client = Client()
    client.force_login(bravo["operator"])
    page = client.get(reverse("runs:new")).content.decode()
    assert 'value="refund-desk"' in page and 'value="sql-analyst"' not in page
    body = {"agent": "sql-analyst", "question": "Revenue?", "report_to": "a@example.com"}
    response = client.post(reverse("runs:new"), body)
    assert response.status_code == 422
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    "method,path,status",
    [
        ("get", "/api/runs/{run}", 404),
        ("get", "/api/runs/{run}/steps", 404),
        ("get", "/api/runs/{run}/checkpoints", 404),
        ("post", "/api/runs/{run}/cancel", 404),
        ("post", "/api/runs/{run}/fork", 404),
        ("post", "/api/runs/{run}/replay", 404),
        ("get", "/api/approvals/{approval}", 404),
        ("post", "/api/approvals/{approval}/open", 404),
        ("post", "/api/approvals/{approval}/decision", 404),
        ("post", "/api/runs", 403),
    ],
)
@pytest.mark.parametrize("role", BRAVO_ROLES)
def test_another_team_s_api_objects_are_refused(role, method, path, status, bravo, world):
    token = ApiToken.issue(bravo[role], "matrix")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    path = path.format(run=world["run"].pk, approval=world["approval"].pk)
    launch = {"agent": "sql-analyst", "input": {"question": "q", "report_to": "a@b.co"}}
    body = (
        launch
        if path == "/api/runs"
        else {"seq": 1}
        if path.endswith("/fork")
        else {"reason": "no"}
        if path.endswith("/cancel")
        else {"decision": "reject", "reason": "no"}
    )
    response = getattr(client, method)(path, body, content_type="application/json")
    needs_role = path == "/api/runs" or path.endswith(("/cancel", "/fork", "/replay"))
    if needs_role and role != "operator":
        assert response.status_code == 403, response.content  # the role says no first
    else:
        assert response.status_code == status, response.content
    assert Run.objects.count() == 1
    assert Approval.objects.get(pk=world["approval"].pk).status == Approval.Status.PENDING


@pytest.mark.parametrize("role", BRAVO_ROLES)
def test_another_team_s_objects_are_left_out_of_api_lists(role, bravo, world):
    token = ApiToken.issue(bravo[role], "matrix")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    paths = (
        "/api/runs",
        "/api/approvals?status=all",
        "/api/agents",
        "/api/costs",
        "/api/budgets",
        # Bravo's people administer their team: their statistics and export hold only its agents.
        "/api/approvals/stats",
        "/api/approvals/export?since=2000-01-01&until=2100-01-01",
    )
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        body = b"".join(response.streaming_content) if response.streaming else response.content
        text = body.decode()
        assert str(world["run"].pk) not in text and "sql-analyst" not in text, path
    assert client.get(f"/api/budgets/{world['budget'].pk}").status_code == 404
    approval = world["approval"]
    item = {"id": str(approval.pk), "args_hash": args_hash(approval.tool, approval.args)}
    body = {"decision": "reject", "reason": "no", "items": [item]}
    response = client.post("/api/approvals/batch", body, content_type="application/json")
    if role == "approver":
        assert response.json()["results"][0]["result"] == "not_found"
    assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING


def test_a_team_member_who_may_only_view_cannot_operate_or_decide(users, world):
    # Alpha's approver and operator, their powers taken away: they still see, they do not act.
    TeamMember.objects.filter(team=world["team"]).update(launch=False, decide=False)
    for role, name in (("operator", "runs:cancel"), ("approver", "approvals:decide")):
        client = client_for(users, role)
        assert client.get(url_of("runs:detail", world)).status_code == 200
        assert client.get(url_of("approvals:detail", world)).status_code == 200
        response = client.post(url_of(name, world), {"decision": "reject", "reason": "x"})
        assert response.status_code == 403, name
    # The same over the API: steering a run, resuming one an expiry halted.
    run, approval = world["run"].pk, world["approval"].pk
    for role, path in (
        ("operator", f"/api/runs/{run}/pause"),
        ("operator", f"/api/approvals/{approval}/resume-halted"),
        ("approver", f"/api/approvals/{approval}/resume-halted"),
    ):
        token = ApiToken.issue(users[role], "matrix")[1]
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        response = client.post(path, {}, content_type="application/json")
        assert response.status_code == 403, (role, path, response.content)
    assert not Run.objects.get(pk=run).pause_requested_at
    assert Run.objects.get(pk=world["run"].pk).status == Run.Status.WAITING
    assert Approval.objects.get(pk=world["approval"].pk).status == Approval.Status.PENDING
