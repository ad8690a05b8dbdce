"""Isolation by construction in the Supervisor graph: no shared anonymous memory, injective user
labels, sub-agents with no path to memory (tools judged by what they do; runs without the store,
also when compiled with one as Studio / langgraph.json does). Real SQLite file, real packaged
embedder, scripted chat models."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.prebuilt import InjectedStore
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langmem import create_manage_memory_tool, create_search_memory_tool
from pydantic import BaseModel

from agents import default_agents
from agents.base import AgentResult, agent_input, recursion_config
from memory import MemorySettings
from memory.policy.manager import MemoryManager
from memory.store import MemoryStore
from supervisor import ScriptedChatModel, SupervisorContext, build_supervisor_graph
from supervisor.guard import MemoryAccessDenied, memory_reach
from supervisor.memory_hooks import memory_middleware
from supervisor.studio import build_studio_graph
from tests.integration.test_supervisor_graph import Team, injected


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "memory.sqlite")


@pytest.fixture
def manager(path, embedder):
    mm = MemoryManager.from_settings(MemorySettings(path=path), embedder=embedder)
    yield mm
    mm.close()


def written(out) -> list[str]:
    return [e["namespace"] for e in out["memory_log"] if e["kind"] == "written"]


# ---------------------------------------------------------------- anonymous callers and user labels
def test_anonymous_visitors_do_not_share_memory(manager, tmp_path):
    team = Team(manager, tmp_path)
    out = team.say(None, "visitor-a", "以后报表里的金额都用万元为单位。")
    assert len(written(out)) == 1 and written(out)[0].startswith("user_profile/%~thread-")
    # visitor B (another thread, no user id) gets nothing of A's
    team.say(None, "visitor-b", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert "万元" not in injected(team.sup.calls[-2]) + injected(team.agent_input("text2sql"))
    # visitor A, same thread, later turn: its own memory is there
    team.say(None, "visitor-a", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert "万元" in injected(team.agent_input("text2sql"))
    assert manager.service.count("user_profile/anonymous") == 0


def test_anonymous_memory_off_by_setting(path, embedder, tmp_path):
    settings = MemorySettings(path=path, policy={"anonymous": "off"})
    with MemoryManager.from_settings(settings, embedder=embedder) as mm:
        team = Team(mm, tmp_path)
        out = team.say(None, "t1", "以后报表里的金额都用万元为单位。")
        assert written(out) == [] and any(e["kind"] == "skipped" for e in out["memory_log"])
        assert mm.service.stats()["memories"] == 0 and out["memory_errors"] == []
        out = team.say("u1", "t2", "以后报表里的金额都用万元为单位。")  # a known user still has memory
        assert written(out) == ["user_profile/u1"]


def test_user_ids_map_to_labels_injectively_in_the_graph(manager, tmp_path):
    team = Team(manager, tmp_path)
    out = team.say("team/alice", "a1", "以后报表里的金额都用万元为单位。")
    assert written(out) == ["user_profile/team%2Falice"]
    team.say("team_alice", "b1", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert "万元" not in injected(team.sup.calls[-2]) + injected(team.agent_input("text2sql"))
    long_a, long_b = "tenant-" + "x" * 150 + "-alice", "tenant-" + "x" * 150 + "-bob"
    team.say(long_a, "c1", "以后报表里的金额都用万元为单位。")
    team.say(long_b, "d1", "查一下2024年华东地区每个月的 GMV", query_task="2024年华东地区每月 GMV")
    assert "万元" not in injected(team.agent_input("text2sql"))
    assert manager.service.count("user_profile/team_alice") == 0


@pytest.mark.parametrize("bad", [{"id": "u1"}, b"u1", ["u1"], 1.5, True], ids=["dict", "bytes", "list", "float", "bool"])
def test_an_ill_typed_user_id_turns_memory_off_with_an_error_not_a_new_user(manager, tmp_path, bad):
    """``configurable.user_id`` of another type was str()-ed into a label: b"u1" became the user
    "b'u1'" (the same person split in two), a dict the user "{'id': 'u1'}". Now the run answers
    without memory, says why in ``memory_errors``, and nothing is stored or read; an integer id
    is still the user of that number."""
    team = Team(manager, tmp_path)
    team.say("u1", "s0", "以后报表里的金额都用万元为单位。", config_user=True)
    out = team.say(bad, "s1", "以后报表金额都用元为单位。", config_user=True)
    assert written(out) == [] and out["messages"][-1].content == "done"
    assert any("user id must be a string or an integer" in e for e in out["memory_errors"]), out["memory_errors"]
    assert manager.service.count() == 1
    out = team.say(42, "s2", "以后报表里的金额都用万元为单位。", config_user=True)
    assert written(out) == ["user_profile/42"] and out["memory_errors"] == []


def test_memory_hooks_keep_anonymous_threads_apart(manager):
    model = ScriptedChatModel(replies=["好的", "报表如下"])
    app = create_agent(model, [], middleware=[memory_middleware(manager)], checkpointer=InMemorySaver())
    app.invoke({"messages": [("user", "以后报表金额都用万元为单位")]}, {"configurable": {"thread_id": "anon-1"}})
    app.invoke({"messages": [("user", "做一份华东区营收报表")]}, {"configurable": {"thread_id": "anon-2"}})
    assert "万元" not in str(model.calls[-1][0].content)
    assert manager.service.count("user_profile/anonymous") == 0


# ---------------------------------------------------------------- the tool guard: by what a tool does
class QueryArgs(BaseModel):
    query: str


def _tools_that_reach_memory(manager: MemoryManager, store: BaseStore) -> dict[str, Any]:
    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    def notes(query: str) -> str:
        """Look up notes."""
        return str(store.search(("memories",), query=query))  # bound through the closure

    def lookup(query: str, store: Annotated[Any, InjectedStore()]) -> str:
        """Look up facts."""
        return str(store.search(("facts",), query=query))

    def recall_it(query: str, mm: MemoryManager = manager) -> str:
        """Recall."""
        return str(mm.recall(query, "user_profile/u1"))

    def facts(query: str) -> str:
        """Facts."""
        return str(get_store().search(("facts",), query=query))

    def partial_target(query: str, backend: Any) -> str:
        return str(backend)

    return {
        "langmem manage_memory renamed": StructuredTool.from_function(manage.func, name="notes_tool",
                                                                       description="notes"),
        "langmem manage_memory": manage,
        "langmem search_memory": search,
        "closure over a MemoryStore": tool(notes),
        "InjectedStore argument": tool(lookup),
        "default bound to a MemoryManager": tool(recall_it),
        "calls get_store()": tool(facts),
        "partial bound to a backend": StructuredTool(
            name="p", description="p", args_schema=QueryArgs,
            func=functools.partial(partial_target, backend=manager.service.backend)),
        "bound method of a MemoryStore": StructuredTool.from_function(store.search, name="s", description="s"),
    }


def test_guard_rejects_tools_that_reach_memory_by_what_they_do(manager, tmp_path):
    store = MemoryStore(path=str(tmp_path / "store.sqlite"))
    try:
        for label, t in _tools_that_reach_memory(manager, store).items():
            assert memory_reach(t), f"{label} was accepted"
            agents = default_agents(ScriptedChatModel(), reports_dir=tmp_path)
            agents[2].tools = [*agents[2].tools, t]
            with pytest.raises(ValueError, match="can reach memory"):
                build_supervisor_graph(agents, manager, ScriptedChatModel())
        # the shipped agents' work tools are accepted: the guard does not refuse by accident
        for a in default_agents(ScriptedChatModel(), reports_dir=tmp_path):
            assert [memory_reach(t) for t in a.tools] == [None] * len(a.tools), a.name
    finally:
        store.close()


# ---------------------------------------------------------------- sub-agents run without the store
@dataclass
class SpyAgent:
    """A sub-agent that tries every way to reach the store from inside its run."""

    name: str = "spy"
    description: str = "Answers anything (test agent)."
    examples: tuple[str, ...] = ("spy on it",)
    keywords: re.Pattern[str] = re.compile("spy")
    requires: tuple[str, ...] = ()
    tools: list[Any] = field(default_factory=list)
    model: Any = None
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        seen = self.seen

        def peek(query: str, runtime: ToolRuntime) -> str:
            """Peek at the store through the tool runtime."""
            try:
                runtime.store.search(("user_profile",), query=query)
                seen.append("tool: store answered")
            except MemoryAccessDenied:
                seen.append("tool: denied")
            return "ok"

        self.inner_tools = [peek]

    def run(self, task: str, context: str, inputs: Any, config: Any = None) -> AgentResult:
        for how, get in (("get_store", get_store),
                         ("runtime.store", lambda: config["configurable"]["__pregel_runtime"].store)):
            try:
                s = get()
                s.search(("user_profile",), query=task)
                self.seen.append(f"{how}: store answered ({type(s).__name__})")
            except MemoryAccessDenied as exc:
                assert "only the Supervisor" in str(exc)
                self.seen.append(f"{how}: denied")
        scripted = ScriptedChatModel(replies=[{"tool_calls": [{"name": "peek", "args": {"query": task}}]}, "done"])
        graph = create_agent(scripted, self.inner_tools, name="spy_inner")
        graph.invoke({"messages": agent_input(context, task)}, recursion_config(config))
        return AgentResult(self.name, "spied")


def _spy_graph(manager: MemoryManager, spy: SpyAgent, store: BaseStore | None) -> Any:
    sup = ScriptedChatModel(role="supervisor", replies=[
        {"tool_calls": [{"name": "transfer_to_spy", "args": {"task": "spy on the profile"}}]}, "done"])
    return build_supervisor_graph([spy], manager, sup, checkpointer=InMemorySaver(), store=store), sup


def test_sub_agents_get_no_store_when_compiled_with_one(manager, path):
    manager.remember("以后报表金额都用万元为单位", "user_profile/u1")
    store = MemoryStore(path=path)  # the same file: Studio's Memory tab view of the Supervisor's memory
    try:
        spy = SpyAgent()
        graph, _ = _spy_graph(manager, spy, store)
        out = graph.invoke({"messages": [HumanMessage("spy")]}, {"configurable": {"thread_id": "t", "user_id": "u1"}})
        assert out["agent_errors"] == [] and out["messages"][-1].content == "done"
        assert spy.seen == ["get_store: denied", "runtime.store: denied", "tool: denied"]
        assert store.search(("user_profile", "u1"))  # the store itself still works for the Supervisor's side
    finally:
        store.close()


def test_sub_agents_get_no_store_from_the_server_runtime(manager, path):
    # LangGraph Server (langgraph.json "store") hands the store in through the run's runtime.
    store = MemoryStore(path=path)
    try:
        spy = SpyAgent()
        graph, _ = _spy_graph(manager, spy, None)
        cfg = {"configurable": {"thread_id": "t", "user_id": "u1", "__pregel_runtime": Runtime(store=store)}}
        out = graph.invoke({"messages": [HumanMessage("spy")]}, cfg)
        assert out["agent_errors"] == []
        assert spy.seen == ["get_store: denied", "runtime.store: denied", "tool: denied"]
    finally:
        store.close()


def test_studio_graph_sub_agents_get_no_store(manager, path, tmp_path, monkeypatch):
    """The langgraph.json graph (supervisor/studio.py), run the way LangGraph Server runs it: the
    store in the run's runtime. Inside a shipped agent's run, get_store() is refused."""
    import tempfile

    from agents.text2sql import Text2SQLAgent

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[str] = []
    original = Text2SQLAgent.run

    def probed(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            get_store().search(("user_profile",))
            seen.append("answered")
        except MemoryAccessDenied:
            seen.append("denied")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Text2SQLAgent, "run", probed)
    store = MemoryStore(path=path)
    try:
        graph = build_studio_graph(manager, None, checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "s", "__pregel_runtime": Runtime(store=store)}}
        out = graph.invoke({"messages": [("user", "查一下2024年华东地区每个月的 GMV")]}, cfg,
                           context=SupervisorContext(user_id="zhang"))
        assert seen == ["denied"] and out["memory_errors"] == []
    finally:
        store.close()
