"""The Supervisor's write journal lives in the library now (:mod:`memory.journal`), so that
``forget_user`` can drop a user's pending writes too; this module keeps the old import path."""

from memory.journal import SUFFIX, JournalEntry, WriteJournal, journal_path

__all__ = ["SUFFIX", "JournalEntry", "WriteJournal", "journal_path"]
