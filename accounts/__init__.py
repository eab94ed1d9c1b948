"""accounts: roles (viewer, operator, approver, admin), API tokens, sign-in lockouts.

The floor of the apps: imports agentkit at most, no other app (every app may import it).
"""
