"""Pending operations finished from outside the engine: callbacks, operators, polls and
deadlines (models), and their API. The PendingOperation model is in runs/models/pending.py;
the engine opens them in runs/engine/awaiting.py."""
