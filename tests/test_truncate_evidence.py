"""On Postgres, TRUNCATE is refused on every table whose rows are evidence of who allowed what:
the timeline and the decisions (tested with their chain in tests/runs/test_audit_trail.py),
and the plans, the one-tap decision links and the external agents' calls. TRUNCATE is not a
row change, so only a statement trigger sees it (runs/migrations/0013_refuse_truncate.py)."""

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from .conftest import on_postgres

pytestmark = [on_postgres, pytest.mark.django_db(transaction=True)]

EVIDENCE = [
    "runs_step",
    "approvals_approval",
    "approvals_approvalvote",
    "approvals_plan",
    "approvals_decisionlink",
    "gateway_externalcall",
]


@pytest.mark.parametrize("table", EVIDENCE)
def test_postgres_refuses_to_truncate_the_evidence(table):
    # With CASCADE, as an attacker would (without it, a table others reference is refused by
    # its foreign keys already); the named table's own trigger answers.
    with (
        pytest.raises(DatabaseError, match=f"append-only: TRUNCATE of {table} refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"TRUNCATE {table} CASCADE")
