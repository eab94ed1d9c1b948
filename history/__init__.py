"""history: fork, replay, import and export of runs.

Stands above runs and approvals: imports runs, accounts and agentkit; nothing below imports it.
"""
