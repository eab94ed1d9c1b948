"""Standing grants: granting, using and revoking them (models), their screen, form and API.
The Grant model itself is registered in approvals/models.py."""
