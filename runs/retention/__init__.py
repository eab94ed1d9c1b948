"""The timeline's life over years: monthly partitions made ahead (partitions.py), how long each
agent's timelines stay (policy.py), and whole runs moved to compressed, verifiable archive
files and back (archive.py). Imports runs' models; nothing in the engine imports it."""
