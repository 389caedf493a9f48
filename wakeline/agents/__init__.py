"""Agents bundled with wakeline (the demo agent)."""
