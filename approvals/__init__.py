"""approvals, the core: Approval and its votes, the gate decision (gates/: the ordered
cascade over the pure rules an agent declares), the engine's side of it (engine_gates:
runs.engine.gates.Gates, handed to the engine at start-up), who may decide (permissions), the
decision service (decisions), batch decisions, the decision screen's parts (arg_form,
presence), the queue, the API, pages, the live stream, Celery tasks and the admin; and its
features as packages: plans/, grants/, evidence/ (the card's evidence and the signed export).

Two wings stand on it and import it: approvals/notify/ (reaching approvers) and
approvals/learning/ (the gate policy that learns). The core imports neither, except in the
app's wiring, which tests/test_layering.py names: apps.py connects the wings to the core's
signals and hooks, urls.py routes their pages, tasks.py holds every Celery entry point,
models.py gathers the learning models so Django registers them under the `approvals` label,
api.py serves the approver statistics, and templatetags/ shows wing pieces on other pages.
One edge is left outside the wiring: the gate cascade asks the learned rules
(approvals/learning/rules.py) directly; tests/test_layering.py names it.
The core imports nothing of gateway, triggers or history (they stand above it).
"""
