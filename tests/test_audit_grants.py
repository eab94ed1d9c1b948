"""`manage.py audit_grants`: what the application's role may do, and no more."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


def grants(**options) -> list[str]:
    out = StringIO()
    call_command("audit_grants", stdout=out, **options)
    return out.getvalue().splitlines()


def test_the_append_only_tables_get_no_update_delete_or_truncate():
    lines = grants(role="app")
    assert 'GRANT SELECT, INSERT ON TABLE "runs_step" TO "app";' in lines
    assert 'GRANT SELECT, INSERT ON TABLE "approvals_approvalvote" TO "app";' in lines
    assert 'GRANT SELECT, INSERT, UPDATE ON TABLE "approvals_approval" TO "app";' in lines
    assert 'GRANT SELECT ON TABLE "django_migrations" TO "app";' in lines
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "runs_run" TO "app";' in lines
    assert not [line for line in lines if "TRUNCATE" in line or "ALL PRIVILEGES" in line]


def test_a_role_name_that_is_not_an_identifier_is_refused():
    with pytest.raises(CommandError):
        grants(role='app"; DROP TABLE runs_step; --')
