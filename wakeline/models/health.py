"""Read-only checks of the database, for `GET /v1/doctor`."""

from __future__ import annotations

from dataclasses import dataclass

from peewee import DatabaseError

from wakeline.models.schema import SCHEMA_VERSION
from wakeline.models.store import Store


@dataclass(frozen=True)
class StoreHealth:
    """The schema version on disk, the one this code expects, and the backend's quick check."""

    schema_version: int
    expected_version: int
    quick_check: str

    @property
    def ok(self) -> bool:
        """True when the schema is current and the quick check found nothing."""
        return self.schema_version == self.expected_version and self.quick_check == "ok"


def check_store(store: Store) -> StoreHealth:
    """Read the schema version and run the backend's quick check (reads only, no lock taken):
    SQLite's `PRAGMA quick_check(1)`, a round trip on PostgreSQL."""
    try:
        version = store.dialect.schema_version(store.db)
        verdict = store.dialect.quick_check(store.db)
    except DatabaseError as exc:
        return StoreHealth(-1, SCHEMA_VERSION, f"cannot read the database ({exc.__class__.__name__})")
    return StoreHealth(int(version), SCHEMA_VERSION, str(verdict))
