"""Where and when turns run: the engine choice, one module per engine (STYLE 14).

`scale.engine` picks one of two engines; nothing above this package knows which:

- `local` (`local.py`): one host, SQLite. The in-process supervisor decides: its own ready
  queue and turn slots (`actors/supervisor.py`, decision 0019).
- `dbos` (`dbos.py`): a DBOS Transact queue on PostgreSQL, partitioned by conversation, so
  one turn of a conversation runs at a time across every host that shares the database;
  the supervisor runs the turns the engine hands it (decision 0025).

Either way wakeline keeps admission, dedupe, the delivery rows, coalescing, the runner and
exactly-once completion; the engine only decides where and when a conversation's next turn
runs, and re-runs one whose host died. DBOS is an optional extra (`wakeline[dbos]`),
imported only by `dbos.py`, and only when the config names it (STYLE 15).
"""
