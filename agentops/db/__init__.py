"""The project's database backends (settings' ENGINE); how long a pooled connection may be
waited for is agentkit/database.py, which the apps use too."""
