"""demo: the demo agents, their tools and the demo shop.

Registers its agents and tools in agentkit's catalogue at start-up (apps.py); imports agentkit,
and approvals.gates for the ask_operator tool; no app imports it, only the project's wiring
(up, seed_demo).
"""
