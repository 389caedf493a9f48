"""Test aids for people who build on wakeline, and what wakeline's own tests run on.

`StandInLinear` is Linear's GraphQL API (and its file storage) as wakeline uses it, on
loopback: point `[linear] api_url` (and `uploads_url`) at it to run a real wakeline, and
your agent, without Linear.
"""

from wakeline.testing.linear import FileReply, Recorded, Reply, StandInLinear

__all__ = ["FileReply", "Recorded", "Reply", "StandInLinear"]
