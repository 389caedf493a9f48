"""Discord control threads: one public thread per issue conversation (CONTRACT section 8).

- `texts`: thread titles, message splitting and every line wakeline posts.
- `limits`, `rest`: the REST client (`requests`), per-route buckets and 429s.
- `messages`: a thread message, typed, and how it is admitted (receipt = message id).
- `keeper`: the thread work: ensure, close, post, catch up, commands.
- `lanes`: one queue of jobs per conversation, one at a time, retried with backoff.
- `control`: the DiscordControl actor that owns the bindings and every REST call.
- `gateway`: discord.py in its own thread and loop; imported only with a token.
- `doctor`: the token and each route's parent channel, with a fix for each problem.
- `service`: what the composition root builds, hooks, starts and stops.
"""

PROVIDER = "discord"
