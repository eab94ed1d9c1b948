"""The learning wing: the gate policy that learns from its approvers.

models (track records, auto-approve rules and their history, rule hits, post-hoc reviews,
overrides; app label `approvals`, gathered by approvals/models.py so Django registers them
there, and no data moved), rules (earned auto-approval, with revocation), review (post-hoc
review of calls that ran without a person), stats (how approvers decide: the rubber-stamp
guard), views (the rules, review and statistics pages), tell_admins (e-mail to admins about
what the policy did).

It imports the core (approvals.models, gates.policy) and never the notify wing. The core
reaches it through its wiring: approvals/apps.py connects `rules.on_settled` to the decision
service's `settled` signal, urls.py routes its pages, tasks.py runs its expiry, models.py
gathers its models. One direct edge is left: the gate cascade (approvals/gates/cascade.py)
asks `rules` whether a learned rule covers a call; tests/test_layering.py names it.
"""
