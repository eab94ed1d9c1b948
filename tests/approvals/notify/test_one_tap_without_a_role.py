"""A one-tap link opened by a user who holds no role: the link's own approver after their
roles were taken away, or any signed-in account without a role. The page shows nothing of
the call and decides nothing; the link stays unused, so it works again if the role comes
back before it expires."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from approvals.models import Approval
from approvals.notify.one_tap import links as one_tap
from runs.models import args_hash
from tests.conftest import make_user

from ..conftest import EXECUTED, gated

pytestmark = pytest.mark.django_db

AMOUNT = {"to": "initech", "amount": "900.00"}


@pytest.fixture
def link(operator, approver, no_enqueue) -> tuple[Approval, str]:
    _, approval = gated("test-payer", AMOUNT, by=operator)
    return approval, one_tap.token_for(approval, approver)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(token: str) -> str:
    return reverse("approvals:one_tap", args=[token])


def assert_nothing_decided(approval: Approval, enqueued: list) -> None:
    last_seq = approval.run.last_seq
    approval.refresh_from_db()
    approval.run.refresh_from_db()
    assert approval.status == Approval.Status.PENDING
    assert approval.votes.count() == 0
    assert approval.run.last_seq == last_seq
    assert enqueued == [] and EXECUTED == []


def test_the_links_approver_without_any_role_is_refused_and_shown_nothing(
    link, approver, no_enqueue
):
    approval, token = link
    approver.groups.clear()
    client = client_for(approver)
    page = client.get(url(token))
    assert page.status_code == 403
    html = page.content.decode()
    assert "cannot see approvals" in html
    assert "initech" not in html and approval.tool not in html
    # A reject (no password needed) is refused the same way.
    refused = client.post(
        url(token),
        {
            "decision": "reject",
            "reason": "no",
            "shown_args_hash": args_hash(approval.tool, approval.args),
        },
    )
    assert refused.status_code == 403
    assert approval.links.get(user=approver).used_at is None
    assert_nothing_decided(approval, no_enqueue)


def test_the_link_works_again_once_the_role_is_given_back(link, approver, no_enqueue):
    approval, token = link
    approver.groups.clear()
    assert client_for(approver).get(url(token)).status_code == 403
    approver.groups.add(Group.objects.get_or_create(name="approver")[0])
    client = client_for(approver)
    assert client.get(url(token)).status_code == 200
    done = client.post(
        url(token),
        {
            "decision": "reject",
            "reason": "not this vendor",
            "shown_args_hash": args_hash(approval.tool, approval.args),
        },
    )
    assert done.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.REJECTED


def test_a_viewer_holding_the_link_can_read_but_not_decide(link, approver, no_enqueue):
    """The link's approver demoted to viewer: may still see approvals, may not decide."""
    approval, token = link
    approver.groups.set([Group.objects.get_or_create(name="viewer")[0]])
    client = client_for(approver)
    assert client.get(url(token)).status_code == 200
    refused = client.post(
        url(token),
        {
            "decision": "reject",
            "reason": "no",
            "shown_args_hash": args_hash(approval.tool, approval.args),
        },
    )
    assert refused.status_code == 403
    assert approval.links.get(user=approver).used_at is None
    assert_nothing_decided(approval, no_enqueue)


def test_another_account_without_a_role_is_refused_as_not_the_links_approver(
    link, django_user_model, no_enqueue
):
    approval, token = link
    nobody = make_user(django_user_model, "nemo")
    page = client_for(nobody).get(url(token))
    assert page.status_code == 403
    assert "initech" not in page.content.decode()
    assert_nothing_decided(approval, no_enqueue)
