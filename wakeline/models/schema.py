"""The versioned schema: each migration is a list of SQL statements.

`PRAGMA user_version` records how many migrations a database has applied; a
newer database than this code knows refuses to open rather than guess.
"""

from __future__ import annotations

INBOX_CONVERSATION_ID = "linear-inbox"

MIGRATIONS: list[list[str]] = [
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

SCHEMA_VERSION = len(MIGRATIONS)
