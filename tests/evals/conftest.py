"""Fixtures of the regression tests: demo refund runs decided three ways, and a dataset."""

from decimal import Decimal

import pytest

from approvals import decisions
from approvals.models import Approval
from evals import cases
from evals.models import Dataset
from runs import engine
from runs.models import Run
from tests.demo.test_demo_flows import launch_default


def decided_refund(operator, approver, decision: str, amount: str = "", **kwargs) -> Approval:
    """A demo refund run whose gated refund call `approver` decided (`amount`: edited to)."""
    run = launch_default("refund-desk", operator)
    assert engine.advance(run.pk, time_slice=30) == Run.Status.WAITING
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    assert approval.tool == "issue_refund"
    if amount:
        kwargs["arguments"] = {**approval.args, "amount": amount}
    decisions.decide(approval.pk, user=approver, decision=decision, **kwargs)
    approval.refresh_from_db()
    return approval


@pytest.fixture
def approved(operator, approver, no_enqueue) -> Approval:
    return decided_refund(operator, approver, "approve")


@pytest.fixture
def edited(operator, approver, no_enqueue) -> Approval:
    """The approver cut the refund to 100.00: the agent proposed the full amount."""
    approval = decided_refund(
        operator, approver, "approve", amount="100.00", reason="partial damage"
    )
    assert approval.edited_args["amount"] != approval.args["amount"]
    assert Decimal(approval.edited_args["amount"]) == Decimal("100.00")
    return approval


@pytest.fixture
def rejected(operator, approver, no_enqueue) -> Approval:
    return decided_refund(operator, approver, "reject", reason="no damage on the photos")


@pytest.fixture
def dataset(operator) -> Dataset:
    return Dataset.objects.create(name="refunds", agent="refund-desk", created_by=operator)


def add(dataset: Dataset, *approvals: Approval):
    added, skipped = cases.add(dataset, approvals)
    assert not skipped, skipped
    return added
