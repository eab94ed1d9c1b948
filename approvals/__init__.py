"""approvals, the core: Approval and its votes, the gate decision (gates/: the ordered
cascade over the pure rules an agent declares), the engine's side of it (engine_gates), who
may decide (permissions), the decision service (decisions), batch decisions, the decision
screen's parts (arg_form, presence), the queue, the API, pages, the live stream, Celery tasks
and the admin; its features as packages: plans/, grants/, evidence/.
The wings notify/ and learning/ stand on the core, which reaches them only through its wiring
(apps, urls, tasks, models, api, templatetags) and one named edge (the cascade asks the
learned rules); nothing of gateway, triggers or history (tests/test_layering.py)."""
