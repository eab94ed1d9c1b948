"""Triggers from outside the control room: signed webhooks and schedules.

Both launch runs through the engine's public entry point (runs.engine.launch) with input
validated exactly as the API validates it. Imports runs, accounts and agentkit; runs and
approvals never import this app.
"""
