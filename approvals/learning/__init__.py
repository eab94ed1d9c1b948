"""The learning wing: the gate policy that learns from its approvers.

models (track records, auto-approve rules and their history, rule hits, post-hoc reviews,
overrides; app label `approvals`, gathered by approvals/models.py so Django registers them
there, and no data moved), rules (earned auto-approval, with revocation), review (post-hoc
review of calls that ran without a person), stats (how approvers decide: the rubber-stamp
guard), views (the rules, review and statistics pages), tell_admins (e-mail to admins about
what the policy did).

It imports the core (approvals.models, declared_policy, engine_gates' step payload) and never
the notify wing. The core does not import it: approvals/apps.py plugs it into the engine's
gates (`engine_gates.use_learning`) and into decisions (the `action_decided` signal).
"""
