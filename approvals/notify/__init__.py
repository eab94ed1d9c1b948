"""The notify wing: reaching approvers, one module per channel.

message (what every channel says), email (the e-mail, with each approver's one-tap link),
webhooks (signed JSON POSTs), slack/ (the Slack app: app posts and handles button presses,
views is Slack's endpoint), one_tap/ (links: the personal decision link and its checks;
views: the page it opens), escalation (the next tier told when nobody decided in time),
delivery (what a failed delivery means: retry or give up).

It imports the core (approvals.models, decisions, the decision screen's parts) and never the
learning wing. The core does not import it: approvals/tasks.py (the Celery entry points) and
approvals/apps.py (which connects `decisions.decided` to the Slack update) call into it.
"""
