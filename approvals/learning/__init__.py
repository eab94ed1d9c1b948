"""The learning wing: the gate policy that learns from its approvers.
Imports the core, never the notify wing; the core reaches it through its wiring and one named
edge (the cascade asks `rules`; tests/test_layering.py).
Why and how: docs/design/modules.md."""
