"""Read-only checks of the database, for `GET /v1/doctor`."""

from __future__ import annotations

from dataclasses import dataclass

from peewee import DatabaseError

from wakeline.models.schema import SCHEMA_VERSION
from wakeline.models.store import Store


@dataclass(frozen=True)
class StoreHealth:
    """The schema version on disk, the one this code expects, and SQLite's quick check."""

    schema_version: int
    expected_version: int
    quick_check: str

    @property
    def ok(self) -> bool:
        """True when the schema is current and the quick check found nothing."""
        return self.schema_version == self.expected_version and self.quick_check == "ok"


def check_store(store: Store) -> StoreHealth:
    """Run `PRAGMA user_version` and `PRAGMA quick_check(1)` (reads only, no lock taken)."""
    try:
        version = store.db.execute_sql("PRAGMA user_version").fetchone()[0]
        verdict = store.db.execute_sql("PRAGMA quick_check(1)").fetchone()[0]
    except DatabaseError as exc:
        return StoreHealth(-1, SCHEMA_VERSION, f"cannot read the database ({exc.__class__.__name__})")
    return StoreHealth(int(version), SCHEMA_VERSION, str(verdict))
