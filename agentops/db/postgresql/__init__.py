"""Django's Postgres backend with a pool that checks a connection only when in doubt (base.py)."""
