"""Persistent state (peewee on SQLite) and the typed shapes that cross boundaries."""
