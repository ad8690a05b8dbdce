"""Where the library keeps files it can rebuild (one helper, so every cache lands in one place)."""

from __future__ import annotations

from pathlib import Path


def user_cache_dir() -> Path:
    """The per-user cache directory (``platformdirs``: ``~/.cache/langgraph-memory`` on Linux,
    ``XDG_CACHE_HOME`` honoured): derived data only — the USE model build, the CC-CEDICT lexicon —
    that is rebuilt from the installed packages when it is missing."""
    import platformdirs  # imported here: memory.use_direct and memory.cedict need it only on a cold path

    return Path(platformdirs.user_cache_dir("langgraph-memory"))
