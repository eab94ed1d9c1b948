"""One-tap decision links from the approval e-mail: the approver's own login, single use,
expiry, the signature, a password for high-risk approvals; every refusal decides nothing."""

import re
from datetime import timedelta
from urllib.parse import unquote

import pytest
from django.core import mail, signing
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals.models import Approval, DecisionLink, Delegation
from approvals.notify import email
from approvals.notify.one_tap import links as one_tap
from runs.models import Run, args_hash
from tests.conftest import make_user

from ..conftest import EXECUTED, drive, gated

pytestmark = pytest.mark.django_db

AMOUNT = {"to": "initech", "amount": "900.00"}  # off the allow-list and over the threshold


@pytest.fixture
def transfer(operator, no_enqueue):
    """A gated high-risk, irreversible transfer (approving it asks for the password)."""
    return gated("test-payer", AMOUNT, by=operator)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(token: str) -> str:
    return reverse("approvals:one_tap", args=[token])


def post(client, token, approval, **data):
    data.setdefault("shown_args_hash", args_hash(approval.tool, approval.args))
    return client.post(url(token), data)


def assert_nothing_decided(run: Run, approval: Approval, last_seq: int) -> None:
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.votes.count() == 0
    assert run.last_seq == last_seq  # no decision step was appended
    assert EXECUTED == []


def test_the_email_carries_a_personal_link_for_each_approver(
    settings, transfer, approver, admin_user
):
    settings.AGENTOPS = {**settings.AGENTOPS, "PUBLIC_URL": "https://ops.example"}
    approver.email, admin_user.email = "arthur@example.com", "ada@example.com"
    approver.save()
    admin_user.save()
    _, approval = transfer
    assert email.send_email(str(approval.pk)) == 2
    found = {}
    for message in mail.outbox:
        (link,) = re.findall(r"https://ops\.example(/approvals/link/\S+/)", message.body)
        found[message.to[0]] = link
    assert set(found) == {"arthur@example.com", "ada@example.com"}
    assert found["arthur@example.com"] != found["ada@example.com"]
    # Each link is bound to its recipient and expires no later than the approval.
    link = DecisionLink.objects.get(approval=approval, user=approver)
    assert link.expires_at <= approval.expires_at
    page = client_for(approver).get(found["arthur@example.com"])
    assert page.status_code == 200
    assert client_for(admin_user).get(found["arthur@example.com"]).status_code == 403


def test_the_page_needs_a_login_and_the_login_comes_back_to_the_link(transfer, approver):
    _, approval = transfer
    token = one_tap.token_for(approval, approver)
    response = Client().get(url(token))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert unquote(response["Location"]).endswith("?next=" + url(token))
    client = Client()
    login = client.post(
        reverse("login"), {"username": "arthur", "password": "pw-arthur", "next": url(token)}
    )
    assert login["Location"] == url(token)


def test_the_page_shows_the_card_sized_for_a_phone(transfer, approver):
    _, approval = transfer
    page = client_for(approver).get(url(one_tap.token_for(approval, approver)))
    html = page.content.decode()
    assert 'name="viewport" content="width=device-width' in html
    assert "initech" in html and "900.00" in html  # the exact call
    assert "high risk" in html
    assert 'id="one-tap-approve"' in html and 'id="id_password"' in html


def test_approving_with_the_password_decides_once_and_a_replay_is_refused(transfer, approver):
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    response = post(client, token, approval, decision="approve", password="pw-arthur")
    assert response.status_code == 200, response.content
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED
    assert approval.decided_by == approver
    run.refresh_from_db()
    seq = run.last_seq
    assert DecisionLink.objects.get(approval=approval).used_at is not None

    replay = post(client, token, approval, decision="approve", password="pw-arthur")
    assert replay.status_code == 410
    assert "already used" in replay.content.decode()
    assert client.get(url(token)).status_code == 410
    run.refresh_from_db()
    assert run.last_seq == seq
    assert approval.votes.count() == 1
    drive(run)
    assert EXECUTED == [("test_transfer", AMOUNT)]


def test_another_user_cannot_use_the_link(transfer, approver, django_user_model):
    run, approval = transfer
    other = make_user(django_user_model, "bea", "approver")
    token = one_tap.token_for(approval, approver)
    seq = run.last_seq
    response = post(client_for(other), token, approval, decision="reject", reason="no")
    assert response.status_code == 403
    assert "sent to another approver" in response.content.decode()
    assert_nothing_decided(run, approval, seq)
    assert DecisionLink.objects.get(approval=approval).used_at is None


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # the signature
        lambda t: signing.dumps(signing.loads(t, salt=one_tap.SALT) | {"n": "x"}, salt="other"),
        lambda t: "not-a-token",
    ],
    ids=["signature", "foreign-salt", "garbage"],
)
def test_a_tampered_link_is_refused(transfer, approver, tamper):
    run, approval = transfer
    token = tamper(one_tap.token_for(approval, approver))
    seq = run.last_seq
    response = post(client_for(approver), token, approval, decision="reject", reason="no")
    assert response.status_code == 400
    assert "not valid" in response.content.decode()
    assert_nothing_decided(run, approval, seq)


def test_a_link_naming_another_nonce_is_refused(transfer, approver):
    # Validly signed (as by a leaked key would be needed), but for no stored link.
    run, approval = transfer
    one_tap.token_for(approval, approver)
    forged = signing.dumps(
        {"a": str(approval.pk), "u": approver.pk, "n": "guessed"}, salt=one_tap.SALT
    )
    seq = run.last_seq
    assert (
        post(client_for(approver), forged, approval, decision="reject", reason="x").status_code
        == 400
    )
    assert_nothing_decided(run, approval, seq)


def test_an_expired_link_is_refused(settings, transfer, approver):
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    seq = run.last_seq
    client = client_for(approver)
    # The row's expiry (never after the approval's deadline) ...
    DecisionLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = post(client, token, approval, decision="approve", password="pw-arthur")
    assert response.status_code == 410 and "expired" in response.content.decode()
    # ... and the signature's own age.
    DecisionLink.objects.update(expires_at=timezone.now() + timedelta(hours=1))
    settings.AGENTOPS = {**settings.AGENTOPS, "ONE_TAP_MAX_AGE_SECONDS": -1}
    response = post(client, token, approval, decision="approve", password="pw-arthur")
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert_nothing_decided(run, approval, seq)


def test_the_link_expires_with_the_approval(transfer, approver):
    _, approval = transfer
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() + timedelta(minutes=5))
    approval.refresh_from_db()
    one_tap.token_for(approval, approver)
    assert DecisionLink.objects.get().expires_at == approval.expires_at


def test_a_high_risk_approval_needs_the_password_and_a_wrong_one_decides_nothing(
    transfer, approver
):
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    seq = run.last_seq
    for password in ("", "wrong"):
        response = post(client, token, approval, decision="approve", password=password)
        assert response.status_code == 403
        assert "enter your password" in response.content.decode()
    assert_nothing_decided(run, approval, seq)
    # The link was not spent by the refusals.
    assert (
        post(client, token, approval, decision="approve", password="pw-arthur").status_code == 200
    )


def test_a_single_sign_on_account_is_sent_to_the_full_screen_for_a_high_risk_approval(
    transfer, approver
):
    """Signed in through the identity provider, the person has no password here to confirm
    with: the page says where to approve instead, and decides nothing."""
    run, approval = transfer
    approver.set_unusable_password()
    approver.save()
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    seq = run.last_seq
    response = post(client, token, approval, decision="approve", password="")
    assert response.status_code == 403
    assert "needs the full decision screen" in response.content.decode()
    assert_nothing_decided(run, approval, seq)
    # Rejecting asks no password, so it still works from the link.
    response = post(client, token, approval, decision="reject", reason="not this vendor")
    assert response.status_code == 200


def test_rejecting_needs_no_password_but_a_reason(transfer, approver):
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    seq = run.last_seq
    assert post(client, token, approval, decision="reject").status_code == 422
    assert_nothing_decided(run, approval, seq)
    response = post(client, token, approval, decision="reject", reason="not this vendor")
    assert response.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED
    assert approval.reason == "not this vendor"


def test_an_approval_of_another_call_is_refused(transfer, approver):
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    seq = run.last_seq
    response = post(
        client_for(approver),
        token,
        approval,
        decision="approve",
        password="pw-arthur",
        shown_args_hash="0" * 64,
    )
    assert response.status_code == 409
    assert_nothing_decided(run, approval, seq)
    assert DecisionLink.objects.get().used_at is None


def test_a_link_to_an_approval_decided_elsewhere_gets_the_conflict_message(
    transfer, approver, admin_user
):
    _, approval = transfer
    token = one_tap.token_for(approval, approver)
    client_for(admin_user).post(
        reverse("approvals:decide", args=[approval.pk]), {"decision": "reject", "reason": "no"}
    )
    response = post(client_for(approver), token, approval, decision="reject", reason="also no")
    assert response.status_code == 409
    assert "already rejected by ada" in response.content.decode()


def test_the_page_needs_a_csrf_token(transfer, approver):
    run, approval = transfer
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    seq = run.last_seq
    token = one_tap.token_for(approval, approver)
    assert post(client, token, approval, decision="reject", reason="x").status_code == 403
    assert_nothing_decided(run, approval, seq)


def test_a_question_is_answered_from_its_link(operator, approver, no_enqueue):
    _, approval = gated("test-asker", {"topic": "the backup"}, by=operator)
    assert approval.kind == Approval.Kind.QUESTION
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    page = client.get(url(token)).content.decode()
    assert "Which region for the backup?" in page and 'id="one-tap-answer"' in page
    response = client.post(url(token), {"decision": "answer", "answer": "eu"})
    assert response.status_code == 200
    approval.refresh_from_db()
    assert (approval.status, approval.answer) == (Approval.Status.ANSWERED, "eu")


def test_a_delegates_link_decides_acting_for_the_approver(operator, django_user_model, no_enqueue):
    bea = make_user(django_user_model, "bea", "approver")
    dan = make_user(django_user_model, "dan", "approver")
    run, approval = gated("test-payer", AMOUNT, by=operator, approvers=["bea"])
    Delegation.objects.create(user=bea, delegate=dan, ends=timezone.now() + timedelta(days=1))
    token = one_tap.token_for(approval, dan)
    response = post(client_for(dan), token, approval, decision="reject", reason="on bea's behalf")
    assert response.status_code == 200
    step = run.steps.get(kind="decision")
    assert (step.data["by"], step.data["acting_for"]) == ("dan", "bea")


def test_a_link_locks_after_too_many_wrong_passwords(transfer, approver, settings):
    # The link's own counter; the account's lockout (django-axes) is tested below.
    settings.AXES_ENABLED = False
    run, approval = transfer
    token = one_tap.token_for(approval, approver)
    client = client_for(approver)
    seq = run.last_seq
    for _ in range(one_tap.MAX_PASSWORD_FAILURES):
        assert (
            post(client, token, approval, decision="approve", password="guess").status_code == 403
        )
    response = post(client, token, approval, decision="approve", password="pw-arthur")
    assert response.status_code == 410 and "locked" in response.content.decode()
    assert_nothing_decided(run, approval, seq)


def test_wrong_passwords_lock_the_account_out_of_the_prompt(transfer, approver, caplog):
    """The prompt counts toward the sign-in lockout (django-axes): the failure that reaches
    the limit is answered with the lockout page, nothing is decided, and the account is
    locked out of the login page as well (from this address)."""
    run, approval = transfer
    client = client_for(approver)
    token = one_tap.token_for(approval, approver)
    seq = run.last_seq
    statuses = [
        post(client, token, approval, decision="approve", password="guess").status_code
        for _ in range(5)
    ]
    assert statuses == [403, 403, 403, 403, 429]
    assert_nothing_decided(run, approval, seq)
    assert any("sign-in locked out" in r.getMessage() for r in caplog.records)
    login = Client().post("/accounts/login/", {"username": "arthur", "password": "pw-arthur"})
    assert login.status_code == 429
    assert "Too many failed sign-ins" in login.content.decode()


def test_the_password_sentence_says_what_is_true_of_this_call(transfer, approver):
    # A medium-risk irreversible call asks for the password because it is irreversible, not
    # because it is "high-risk"; the exact call shows the amount as the number the tool gets.
    _, approval = transfer
    client = client_for(approver)
    token = one_tap.token_for(approval, approver)
    assert "high-risk" in approval.confirmation_grounds
    Approval.objects.filter(pk=approval.pk).update(risk=Approval.Risk.MEDIUM)
    approval.refresh_from_db()
    assert approval.confirmation_grounds == "irreversible"
    html = client.get(url(token)).content.decode()
    assert "approving this irreversible call asks for it again" in html
    assert "high-risk" not in html
    assert "&quot;amount&quot;: 900.00" in html
    refused = post(client, token, approval, decision="approve", password="wrong")
    assert "to approve a irreversible call" not in refused.content.decode()
    assert "enter your password to approve an irreversible call" in refused.content.decode()
