"""Builds MemoryStore where LangGraph's store test files build their stores (see run.py)."""
import contextlib

from memory.store import MemoryStore


class InMemoryStore(MemoryStore):
    """`InMemoryStore(index=..., ttl=...)` -> a throwaway MemoryStore."""
    def __init__(self, *, index=None, ttl=None):
        super().__init__(path=":memory:", index=index, ttl=ttl)


class SqliteStore(MemoryStore):
    from langgraph.store.sqlite import SqliteStore as _S
    MIGRATIONS = _S.MIGRATIONS  # test_nonnull_migrations reads SqliteStore's own


class AsyncSqliteStore(MemoryStore):
    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn, *, index=None, ttl=None):
        with MemoryStore.from_conn_string.__func__(cls, conn, index=index, ttl=ttl) as s:
            yield s

    async def setup(self):
        await self.asetup()
