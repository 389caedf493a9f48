"""The plain protocol (`output = "text"`): any CLI that reads its prompt on stdin.

Its stdout is the answer and its exit code the answer's kind (0 a response, 2 a question,
anything else an error); it shows no progress of its own (it may send some with
`wakeline agent ...`) and has no session of its own to resume.
"""

from wakeline.agents.kind import AgentKind

KIND = AgentKind("text")
