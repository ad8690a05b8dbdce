"""The offline demo behind ``memctl demo``: two users, Chinese and English, several sessions.

Every step runs for real on the embedded default (a SQLite file + the packaged embedding
model); nothing is scripted except the users' sentences.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from memory.records import SearchHit
from memory.service import MemoryService
from memory.settings import MemorySettings

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


def _hits(console: Console, title: str, hits: list[SearchHit]) -> None:
    t = Table(title=title, title_justify="left")
    for col in ("score", "sim", "vec", "kw", "decay", "boost", "namespace", "content"):
        t.add_column(col, overflow="fold")
    for h in hits:
        b = h.breakdown
        t.add_row(f"{b.score:.3f}", f"{b.sim:.3f}", f"{b.vector:.3f}", f"{b.keyword:.3f}", f"{b.decay:.3f}",
                  f"{b.boost:.2f}", "/".join(h.record.namespace), h.record.content)
    console.print(t if hits else f"{title}: no memories")


def run_demo(path: str | None = None, console: Console | None = None) -> dict[str, object]:
    """Run the scenario; returns the facts it checked (used by the tests)."""
    console = console or Console()
    tmp = None
    if path is None:
        tmp = tempfile.mkdtemp(prefix="memctl-demo-")
        path = str(Path(tmp) / "demo.sqlite")
    settings = MemorySettings(path=path)
    console.rule("memctl demo: offline long-term memory (no LLM, packaged zh/en embeddings)")
    console.print(f"store: {path}\nmodel: {settings.embedding.model}\n")
    checks: dict[str, object] = {}

    with MemoryService.from_settings(settings) as svc:
        console.rule("session 1 (user 张伟 / zhang, Chinese) — writes")
        now = T0
        unit_pref = svc.write("以后报表里的金额都用人民币万元为单位", "user_profile/zhang",
                              {"type": "user_profile", "source": "user"}, now=now)
        svc.write("GMV 口径是指已支付订单金额，不含退款和运费", "domain_facts/zhang",
                  {"type": "domain_facts", "source": "user"}, now=now)
        svc.write("SELECT region, SUM(paid_amount) FROM orders WHERE status='paid' GROUP BY region",
                  "text2sql_memories/zhang", {"type": "tool_effects", "source": "text2sql"}, now=now)
        for r in svc.list("user_profile/zhang") + svc.list("domain_facts/zhang"):
            console.print(f"  wrote ({r.metadata.type}) {r.content}", markup=False)

        console.rule("session 1 (user alice, English) — writes")
        svc.write("From now on always show charts as bar charts, never pie charts", "user_profile/alice",
                  {"type": "user_profile", "source": "user"}, now=now)
        svc.write("Active user means someone who logged in within the last 30 days", "domain_facts/alice",
                  {"type": "domain_facts", "source": "user"}, now=now)
        console.print("  wrote 2 memories for alice")

    console.rule("session 2, a week later: the store is reopened from disk")
    with MemoryService.from_settings(settings) as svc:
        now = T0 + timedelta(days=7)
        q = "How should money amounts be shown in the report?"
        hits = svc.search(q, ["user_profile/zhang", "domain_facts/zhang"], top_k=3, now=now)
        _hits(console, f"zhang asks (English, cross-language): {q}", hits)
        checks["cross_language_top"] = hits[0].record.content if hits else None

        q = "GMV 怎么算？"
        hits = svc.search(q, ["domain_facts/zhang", "text2sql_memories/zhang"], top_k=3, now=now)
        _hits(console, f"zhang asks: {q}", hits)
        checks["definition_top"] = hits[0].record.content if hits else None

        console.rule("session 3: zhang changes the preference (update keeps id and history of creation)")
        now = T0 + timedelta(days=14)
        svc.update(unit_pref.id, "改成：报表金额以后都用人民币元为单位，保留两位小数", now=now)
        hits = svc.search("报表金额用什么单位？", "user_profile/zhang", top_k=3, now=now)
        _hits(console, "zhang asks: 报表金额用什么单位？", hits)
        checks["updated_top"] = hits[0].record.content if hits else None

        console.rule("isolation: alice searches her own namespaces only")
        hits = svc.search("金额单位 GMV", ["user_profile/alice", "domain_facts/alice"], top_k=5, now=now)
        _hits(console, "alice asks about GMV / units", hits)
        checks["alice_sees_zhang"] = any("zhang" in h.record.namespace for h in hits)
        console.print(f"  alice saw any of zhang's memories: {checks['alice_sees_zhang']}")
        checks["memories"] = svc.count()
    console.print(f"\nstored memories: {checks['memories']} (file kept at {path})")
    return checks
