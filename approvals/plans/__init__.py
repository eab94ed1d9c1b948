"""Plans approved once: a run's plan (models), whether a call follows it (rules: pure, no
model), its gate side (gates), its screen, form, edits and API. The Plan model itself is
registered in approvals/models.py."""
