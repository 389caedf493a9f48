"""Confined turns (CONTRACT section 12, decisions 0034 and 0035): every agent runs inside
bubblewrap.

One module per concept: `hosts` (a route's `allow_hosts` rules), `layout` (what a turn sees and
may write, as bwrap's argv), `gitdirs` (what `git commit` needs in a worktree), `tools` (where
an agent CLI is installed), `probe` (whether bwrap runs here), `netns` (the listeners in a
turn's own network and their relay, run by the fork server), `proxy` (the allow-list proxy) and
`part` (the part the composition root starts, and each turn's confinement). Nothing is imported
here: `wakeline.config` imports `hosts`, and the others import the config.
"""
