"""The run model's signals: receivers are connected at start-up (runs/apps.py, approvals/apps.py),
so the models import neither the live path nor the apps above them."""

from django.dispatch import Signal

# Sent inside the transaction that cancels a run, with the run locked (sender=Run, run=...,
# by=the username of whoever cancelled it, or None):
# what waits on the run ends with it (approvals/apps.py cancels its pending approvals).
run_cancelled = Signal()
# Sent for every step appended, inside its transaction (sender=Step, step=...): runs/events.py
# publishes it once committed, runs/chains.py sends a success's follow-ups (connected in
# runs/apps.py; models do not import the live path, whose payloads are built from the API's
# schemas of these models).
step_appended = Signal()
