"""The notify wing: reaching approvers, one module per channel.
Imports the core, never the learning wing; the core calls into it only from approvals/tasks.py
and approvals/apps.py.
Why and how: docs/design/modules.md."""
