"""The versioned schema: each migration is a list of SQL statements.

The schema version (SQLite's `PRAGMA user_version`, PostgreSQL's `wakeline_schema`
table) records how many migrations a database has applied; a newer database than
this code knows refuses to open rather than guess.

One schema for both backends: statements are written in SQLite's dialect and
`dialect.PostgresDialect.ddl` translates them (`INTEGER` -> `BIGINT`, an `id INTEGER
PRIMARY KEY` -> an identity, `julianday('now')`); a statement using anything else
SQLite-only is refused there (tests/unit/models/test_dialect.py runs every migration
through it). What no rule can translate is written per dialect, as
`{"sqlite": ..., "postgresql": ...}`.
"""

from __future__ import annotations

from wakeline.models.dialect import Statement

INBOX_CONVERSATION_ID = "linear-inbox"
# The named lock (PostgreSQL) under which inbox messages take their ids and the read boundary
# moves: the id is the cursor, so ids must commit in order.
INBOX_LOCK = "inbox"

MIGRATIONS: list[list[Statement]] = [
    # 1: receipts, conversations, the per-conversation FIFO, the inbox, settings.
    [
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('issue', 'inbox')),
            title TEXT NOT NULL DEFAULT '',
            route TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            UNIQUE (namespace, key)
        )""",
        """CREATE TABLE receipts (
            id INTEGER PRIMARY KEY,
            delivery_id TEXT NOT NULL UNIQUE,
            body_sha256 TEXT NOT NULL UNIQUE,
            event_type TEXT NOT NULL,
            action TEXT NOT NULL,
            received_at INTEGER NOT NULL,
            webhook_at INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            reason TEXT,
            conversation_id TEXT REFERENCES conversations (id)
        )""",
        """CREATE TABLE deliveries (
            id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            receipt_id INTEGER NOT NULL REFERENCES receipts (id),
            state TEXT NOT NULL CHECK (state IN ('pending', 'claimed', 'completed')),
            envelope TEXT NOT NULL,
            headline TEXT NOT NULL,
            received_at INTEGER NOT NULL,
            completed_at INTEGER,
            completion TEXT
        )""",
        "CREATE INDEX deliveries_fifo ON deliveries (conversation_id, state, id)",
        "CREATE INDEX deliveries_state ON deliveries (state)",
        """CREATE TABLE inbox_messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            receipt_id INTEGER NOT NULL REFERENCES receipts (id),
            received_at INTEGER NOT NULL,
            headline TEXT NOT NULL,
            event TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            shown INTEGER NOT NULL DEFAULT 0,
            surfaced INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )""",
        f"""INSERT INTO conversations (id, namespace, key, kind, title, created_at, updated_at)
            VALUES ('{INBOX_CONVERSATION_ID}', 'wakeline', 'linear-inbox', 'inbox', 'Linear inbox',
                    CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
                    CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))""",
    ],
]

MIGRATIONS.append(
    # 2: turns own claims; conversations carry session, reset boundary and terminal intent.
    [
        "ALTER TABLE conversations ADD COLUMN session_id TEXT",
        "ALTER TABLE conversations ADD COLUMN reset_at INTEGER",
        "ALTER TABLE conversations ADD COLUMN terminal INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN issue_id TEXT",
        "ALTER TABLE conversations ADD COLUMN issue_identifier TEXT",
        "ALTER TABLE conversations ADD COLUMN agent_session_id TEXT",
        "ALTER TABLE conversations ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE deliveries ADD COLUMN turn_id TEXT",
        "ALTER TABLE deliveries ADD COLUMN size_bytes INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX deliveries_turn ON deliveries (turn_id)",
        """CREATE TABLE turns (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations (id),
            state TEXT NOT NULL CHECK (state IN ('running', 'retry', 'stalled')),
            attempt INTEGER NOT NULL DEFAULT 1,
            created_at INTEGER NOT NULL,
            started_at INTEGER,
            next_attempt_at INTEGER,
            last_error TEXT
        )""",
        "CREATE INDEX turns_due ON turns (state, next_attempt_at)",
        """CREATE TABLE turn_results (
            id INTEGER PRIMARY KEY,
            turn_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            result TEXT NOT NULL,
            exit_code INTEGER,
            attempts INTEGER NOT NULL,
            deliveries INTEGER NOT NULL,
            output TEXT NOT NULL DEFAULT '',
            started_at INTEGER,
            finished_at INTEGER NOT NULL
        )""",
        "CREATE INDEX turn_results_conversation ON turn_results (conversation_id, id)",
    ]
)

MIGRATIONS.append(
    # 3: outbound effects (the outbox of writes to Linear); stop requests and heartbeats on turns.
    [
        """CREATE TABLE effects (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            conversation_id TEXT,
            target TEXT NOT NULL,
            summary TEXT NOT NULL,
            body TEXT,
            mutation_hash TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN
                ('prepared', 'dispatched', 'confirmed', 'rejected', 'outcome_unknown', 'released')),
            created_at INTEGER NOT NULL,
            dispatched_at INTEGER,
            settled_at INTEGER,
            error TEXT,
            result_ids TEXT
        )""",
        "CREATE INDEX effects_state ON effects (state, created_at)",
        "ALTER TABLE turns ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE turns ADD COLUMN heartbeat_at INTEGER",
    ]
)

MIGRATIONS.append(
    # Inbox retention: read history is pruned by age (wakeline/models/inbox_store.py).
    [
        "CREATE INDEX inbox_messages_received ON inbox_messages (received_at)",
    ]
)

MIGRATIONS.append(
    # The inbox cursor, narrow: counting unread messages (`id > boundary`)
    # scans its small entries instead of the rows and their event JSON.
    [
        "CREATE INDEX inbox_messages_cursor ON inbox_messages (id)",
    ]
)

MIGRATIONS.append(
    # Inbox turns: which messages may wake the agent (following was on when they arrived),
    # and which turn surfaced each headline.
    [
        "ALTER TABLE inbox_messages ADD COLUMN wakes INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE inbox_messages ADD COLUMN surfaced_by TEXT",
        "CREATE INDEX inbox_messages_unsurfaced ON inbox_messages (surfaced, wakes, id)",
    ]
)

MIGRATIONS.append(
    # Inbox `shown` marks move to a narrow table (wakeline/models/inbox_store.py): marking a
    # page shown writes a few small rows instead of rewriting the pages of the wide message
    # rows. Only unread messages need marks; inbox_messages.shown is no longer written.
    [
        "CREATE TABLE inbox_shown (id INTEGER PRIMARY KEY)",
        """INSERT INTO inbox_shown (id)
           SELECT id FROM inbox_messages WHERE shown = 1 AND id > COALESCE(
               (SELECT CAST(value AS INTEGER) FROM settings WHERE key = 'inbox.ack_cursor'), 0)""",
    ]
)

MIGRATIONS.append(
    # Objects a `linear graphql` mutation creates, with the ids wakeline gave them before it
    # left (graphql_guard.mark_creates): their webhooks come back as self-echoes, as an
    # effect's do (decision 0011).
    [
        "CREATE TABLE own_creates (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL)",
    ]
)

MIGRATIONS.append(
    # 9: issue routes. Ownership (is the issue in the route's projects? pending: the tracker
    # looks it up), the terminal outcome and its evidence, and the conversation's worktree
    # (its branch, a cleanup owed after retirement, and why a dirty one was kept).
    [
        "ALTER TABLE conversations ADD COLUMN ownership TEXT NOT NULL DEFAULT 'owned'"
        " CHECK (ownership IN ('owned', 'pending', 'not_owned'))",
        "ALTER TABLE conversations ADD COLUMN project_id TEXT",
        "ALTER TABLE conversations ADD COLUMN ownership_attempts INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN ownership_next_at INTEGER",
        "ALTER TABLE conversations ADD COLUMN ownership_error TEXT",
        "ALTER TABLE conversations ADD COLUMN ownership_answer TEXT",
        "ALTER TABLE conversations ADD COLUMN outcome TEXT CHECK (outcome IN ('completed', 'canceled'))",
        "ALTER TABLE conversations ADD COLUMN terminal_state_id TEXT",
        "ALTER TABLE conversations ADD COLUMN done_state_id TEXT",
        "ALTER TABLE conversations ADD COLUMN workspace_branch TEXT",
        "ALTER TABLE conversations ADD COLUMN workspace_cleanup INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN workspace_kept TEXT",
        # Without the exact evidence, an old terminal conversation was not completed.
        "UPDATE conversations SET outcome = 'canceled' WHERE terminal = 1",
        "CREATE INDEX conversations_ownership_due ON conversations (ownership_next_at)"
        " WHERE ownership = 'pending'",
        "CREATE INDEX conversations_cleanup ON conversations (id) WHERE workspace_cleanup = 1",
    ]
)

MIGRATIONS.append(
    # 10: echo memory. An effect can be an intent (a `linear graphql` update: the event it
    # expects back and a fingerprint of the fields it wrote, never a body); a delivery can be
    # `held` while such a write is in flight; held deliveries keep their evidence apart from
    # the receipts, with the intents they wait for.
    [
        "ALTER TABLE effects ADD COLUMN account TEXT",
        "ALTER TABLE effects ADD COLUMN event_kind TEXT",
        "ALTER TABLE effects ADD COLUMN event_action TEXT",
        "ALTER TABLE effects ADD COLUMN subject TEXT",
        "ALTER TABLE effects ADD COLUMN fingerprint TEXT",
        "CREATE INDEX effects_intents ON effects (subject) WHERE subject IS NOT NULL",
        """CREATE TABLE deliveries_new (
            id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            receipt_id INTEGER NOT NULL REFERENCES receipts (id),
            state TEXT NOT NULL CHECK (state IN ('pending', 'claimed', 'completed', 'held')),
            envelope TEXT NOT NULL,
            headline TEXT NOT NULL,
            received_at INTEGER NOT NULL,
            completed_at INTEGER,
            completion TEXT,
            turn_id TEXT,
            size_bytes INTEGER NOT NULL DEFAULT 0
        )""",
        """INSERT INTO deliveries_new (id, conversation_id, receipt_id, state, envelope, headline,
               received_at, completed_at, completion, turn_id, size_bytes)
           SELECT id, conversation_id, receipt_id, state, envelope, headline, received_at,
               completed_at, completion, turn_id, size_bytes FROM deliveries""",
        "DROP TABLE deliveries",
        "ALTER TABLE deliveries_new RENAME TO deliveries",
        "CREATE INDEX deliveries_fifo ON deliveries (conversation_id, state, id)",
        "CREATE INDEX deliveries_state ON deliveries (state)",
        "CREATE INDEX deliveries_turn ON deliveries (turn_id)",
        """CREATE TABLE held_deliveries (
            receipt_id INTEGER PRIMARY KEY REFERENCES receipts (id),
            fifo_id INTEGER,
            conversation_id TEXT,
            evidence TEXT NOT NULL,
            intents TEXT NOT NULL,
            inbox_event TEXT,
            headline TEXT NOT NULL,
            received_at INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('held', 'echo', 'released')),
            resolved_at INTEGER
        )""",
        "CREATE INDEX held_deliveries_open ON held_deliveries (state) WHERE state = 'held'",
        "CREATE INDEX held_deliveries_resolved ON held_deliveries (resolved_at)",
    ]
)

MIGRATIONS.append(
    # The agent CLI's own session id (Claude's session, Codex's thread), resumed next turn.
    ["ALTER TABLE conversations ADD COLUMN runner_session TEXT"]
)

MIGRATIONS.append(
    # Plan, approve, execute (routes with `planning`): one gate per issue conversation; the
    # execution lease is its `lease_since`, so at most one per issue.
    ["""CREATE TABLE plan_gates (
            conversation_id TEXT PRIMARY KEY REFERENCES conversations (id),
            phase TEXT NOT NULL CHECK (phase IN ('none', 'planning', 'awaiting', 'approved')),
            rev INTEGER NOT NULL DEFAULT 0,
            plan TEXT,
            comment_id TEXT,
            approved_rev INTEGER,
            approved_by TEXT,
            approved_plan TEXT,
            lease_since INTEGER,
            lease_delivery TEXT,
            updated_at INTEGER NOT NULL
        )"""]
)

MIGRATIONS.append(
    # Matrix routes (decision 0024): each connection's sync cursor, committed in the same
    # transaction as the page's admissions; and the approvals of proposed sends, each bound to
    # its connection, route, conversation, room and body (kept for the approver, with its hash).
    [
        """CREATE TABLE matrix_cursors (
            connection TEXT PRIMARY KEY,
            cursor TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        """CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            connection TEXT NOT NULL,
            route TEXT NOT NULL,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            room_id TEXT NOT NULL,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN
                ('pending', 'approved', 'denied', 'sent', 'expired', 'failed')),
            turn_id TEXT,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            decided_by TEXT,
            decided_at INTEGER,
            attempts INTEGER NOT NULL DEFAULT 0,
            event_id TEXT,
            error TEXT,
            settled_at INTEGER
        )""",
        "CREATE INDEX approvals_status ON approvals (status, created_at)",
    ]
)

MIGRATIONS.append(
    # Control bindings (wakeline/models/bindings.py): a conversation's human-facing thread (one
    # per conversation; a thread belongs to at most one), its parent channel, the title it was
    # given, its mirrored archived/locked state and the last message seen there (the catch-up
    # cursor). Terminal intent stays on the conversation, never here.
    [
        """CREATE TABLE control_bindings (
            conversation_id TEXT PRIMARY KEY REFERENCES conversations (id),
            provider TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            parent_id TEXT NOT NULL,
            title TEXT NOT NULL,
            archived INTEGER NOT NULL DEFAULT 0,
            locked INTEGER NOT NULL DEFAULT 0,
            last_message_id INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            UNIQUE (provider, thread_id)
        )""",
    ]
)

MIGRATIONS.append(
    # Effects keep the order they were prepared in without SQLite's rowid (PostgreSQL has
    # none): `seq` breaks ties within a millisecond. Existing rows keep their rowid order.
    [
        "ALTER TABLE effects ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",
        {"sqlite": "UPDATE effects SET seq = rowid WHERE state = 'prepared'", "postgresql": None},
    ]
)

MIGRATIONS.append(
    # A control thread's answers are durable: the last turn result posted there. The answers
    # themselves are the conversation's `turn_results`, so a restart or a long Discord outage
    # posts what is missing instead of losing it. NULL: none posted yet.
    ["ALTER TABLE control_bindings ADD COLUMN answered_through INTEGER"]
)

MIGRATIONS.append(
    # The owner's journal in the shared database, for hosts that share one (engine "dbos";
    # wakeline/journal/table.py): `id` is the entry's seq, `entry_id` its source id.
    [
        """CREATE TABLE journal_entries (
            id INTEGER PRIMARY KEY,
            entry_id TEXT NOT NULL UNIQUE,
            at INTEGER NOT NULL,
            host TEXT NOT NULL DEFAULT '',
            entry TEXT NOT NULL
        )""",
        "CREATE INDEX journal_entries_at ON journal_entries (at)",
    ]
)

MIGRATIONS.append(
    # Approvals keep the order they were proposed in without SQLite's rowid (PostgreSQL has
    # none): `seq` breaks ties within a millisecond. Existing rows keep their rowid order.
    [
        "ALTER TABLE approvals ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",
        {"sqlite": "UPDATE approvals SET seq = rowid", "postgresql": None},
    ]
)

MIGRATIONS.append(
    # Hosts that share one database (engine "dbos", decision 0025): a turn names the host
    # that runs it, so a host's start-up and a takeover repair only that host's turns, and
    # no other host resumes a turn still running somewhere; a stop asked on one host for a
    # turn running on another says who asked. A conversation's waiting-turn flag and its
    # generation coalesce wakes into one engine job (`wake:<conversation>:<generation>`).
    # `wakeline_hosts`: each host's heartbeat, on the database's clock, and its own clock's
    # skew from it.
    [
        "ALTER TABLE turns ADD COLUMN host TEXT",
        "ALTER TABLE turns ADD COLUMN stop_by TEXT",
        "ALTER TABLE conversations ADD COLUMN wake_waiting INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN wake_gen INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE wakeline_hosts (
            id TEXT PRIMARY KEY,
            started_at INTEGER NOT NULL,
            last_seen INTEGER NOT NULL,
            running INTEGER NOT NULL DEFAULT 0,
            skew_ms INTEGER NOT NULL DEFAULT 0,
            recovered_at INTEGER
        )""",
    ]
)

MIGRATIONS.append(
    # Who is a person (invariant 14): Linear's answer to `user(id) { app }` per user id, and
    # the FIFO entries held until their actor's answer comes (wakeline/models/people.py).
    [
        """CREATE TABLE linear_users (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('person', 'app', 'gone')),
            checked_at INTEGER NOT NULL
        )""",
        """CREATE TABLE person_checks (
            fifo_id INTEGER PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            actor_id TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_at INTEGER,
            error TEXT
        )""",
        "CREATE INDEX person_checks_actor ON person_checks (actor_id)",
    ]
)

MIGRATIONS.append(
    # Retention (`[store] keep_days`, decision 0030; wakeline/models/retention.py): what the
    # pruning looks rows up by. A receipt is deleted only when no FIFO entry or inbox message
    # refers to it, and the foreign key checks the same: without an index on each referring
    # column, every deleted receipt would scan both tables. `deliveries_state` gains the
    # completion time, so completed entries are found oldest first without another index.
    [
        "CREATE INDEX receipts_received ON receipts (received_at)",
        "CREATE INDEX deliveries_receipt ON deliveries (receipt_id)",
        "CREATE INDEX inbox_messages_receipt ON inbox_messages (receipt_id)",
        "DROP INDEX deliveries_state",
        "CREATE INDEX deliveries_state ON deliveries (state, completed_at)",
        "CREATE INDEX turn_results_finished ON turn_results (finished_at)",
    ]
)

MIGRATIONS.append(
    # The repository per issue (a route's `repos`, decision 0038): the one chosen for the
    # conversation (a reset clears it), the first FIFO entry that waited while the person was
    # asked which one (its turn's deliveries ride the turn the pick starts), and the repository
    # its worktree was made in (its cleanup needs it after a reset cleared the choice).
    [
        "ALTER TABLE conversations ADD COLUMN repo TEXT",
        "ALTER TABLE conversations ADD COLUMN repo_asked INTEGER",
        "ALTER TABLE conversations ADD COLUMN workspace_repo TEXT",
    ]
)

SCHEMA_VERSION = len(MIGRATIONS)
