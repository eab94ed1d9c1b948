"""Budgets: an agent's or a team's spend in its period and what that allows (models), their
page, form and API. The Budget model itself is in runs/models/costs.py; the engine's check before a
call is runs/engine/budget_check.py."""
