"""Matrix routes: one owner identity per connection, rooms bound to conversations (decision 0024).

matrix-nio is an optional extra (`pip install 'wakeline[matrix]'`) and only `client.py`
imports it, and only when a connection is configured. The rest of this package works on
plain data: `events.py` turns a sync page into typed events, `routes.py` checks each route,
`connection.py` is the actor that admits pages with their cursor and sends approved text,
`approvals.py` is the service through which a human decides, `tools.py` holds a route's
read and send, and `service.py` ties them together for the composition root and the
operator API; `sync.py` runs every connection's nio on one thread.
"""
