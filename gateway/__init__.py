"""gateway: agents that run elsewhere: sessions, calls, waits (pushed, never a held
connection), decision callbacks, MCP tool registration (clients/python/ is its client).

Stands above runs and approvals (imports both, and agentkit); nothing below imports it.
"""
