"""The generated bench corpus and its queries, shared by :mod:`memctl.bench` and
:mod:`memctl.bench_handoff` (kept apart so that neither of those imports the other to get them).

Memory-like zh/en sentences (seeded, so every run and every system sees the same corpus), and
their embeddings cached on disk: embedding 100k texts takes minutes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memory.embeddings import Embedder

_EN_SUBJ = ["the user", "Alice", "Bob", "the finance team", "our CFO", "the sales lead", "the analyst", "Carol"]
_EN_VERB = ["prefers", "asked for", "defined", "reported", "wants", "stopped using", "approved", "rejected"]
_EN_OBJ = ["bar charts", "weekly revenue by region", "GMV excluding refunds", "active users in 30 days",
           "a churn dashboard", "CSV exports", "the Q3 forecast", "SQL with CTEs", "median order value",
           "cohort retention", "reports in USD", "the north region", "daily active users", "refund rate",
           "margin by product line", "the marketing budget", "conversion funnels", "pie charts"]
_EN_TAIL = ["for the board meeting", "every Monday", "since last quarter", "in the Shanghai office",
            "for project Falcon", "before the audit", "with two decimals", "in the dashboard", ""]
_ZH_SUBJ = ["用户", "张伟", "财务部", "销售总监", "分析师", "李娜", "运营团队"]
_ZH_VERB = ["偏好", "要求", "定义了", "汇报了", "不再使用", "确认了", "关注"]
_ZH_OBJ = ["柱状图", "按地区的周营收", "不含退款的GMV", "近30天活跃用户", "流失看板", "万元为单位的报表",
           "第三季度预测", "客单价中位数", "留存分析", "退款率", "各产品线毛利", "转化漏斗", "饼图"]
_ZH_TAIL = ["用于董事会", "每周一", "从上季度开始", "在上海办公室", "针对猎鹰项目", "审计之前", ""]


def make_corpus(n: int, seed: int = 7) -> list[str]:
    """Memory-like sentences, ~1/3 Chinese, each made unique by a numbered detail."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.33:
            s = f"{rng.choice(_ZH_SUBJ)}{rng.choice(_ZH_VERB)}{rng.choice(_ZH_OBJ)}{rng.choice(_ZH_TAIL)}，编号{i}"
        else:
            s = f"{rng.choice(_EN_SUBJ)} {rng.choice(_EN_VERB)} {rng.choice(_EN_OBJ)} {rng.choice(_EN_TAIL)} (item {i})"
        out.append(" ".join(s.split()))
    return out


def make_queries(n: int, seed: int = 11) -> list[str]:
    """Distinct questions (a repeated one would hit the query-embedding cache)."""
    rng = random.Random(seed)
    qs: dict[str, None] = {}
    while len(qs) < n:
        if rng.random() < 0.33:
            q = f"谁{rng.choice(_ZH_VERB)}{rng.choice(_ZH_OBJ)}{rng.choice(_ZH_TAIL)}？"
        else:
            q = f"who {rng.choice(_EN_VERB)} {rng.choice(_EN_OBJ)} {rng.choice(_EN_TAIL)}?"
        qs[" ".join(q.split()) + ("" if len(qs) < 400 else f" #{len(qs)}")] = None
    return list(qs)


def embed_corpus(embedder: Embedder, texts: list[str], cache_dir: Path | None,
                 progress: Callable[[int, int], None] | None) -> np.ndarray:
    """Embed once; cache on disk keyed by model and corpus size (the corpus is seeded)."""
    cache = None
    if cache_dir is not None:
        safe = embedder.name.replace("/", "_").replace(":", "_")
        cache = cache_dir / f"{safe}-{len(texts)}.npy"
        if cache.is_file():
            return np.load(cache)
    vecs = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for i in range(0, len(texts), 1024):
        vecs[i : i + 1024] = embedder.embed_documents(texts[i : i + 1024])
        if progress:
            progress(min(i + 1024, len(texts)), len(texts))
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, vecs)
    return vecs
