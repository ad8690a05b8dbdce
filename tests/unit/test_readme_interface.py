"""The README's public interface exists: its memctl commands and options, its MEMORY_* variables
and settings names, and the --json keys it names for ``eval dedupe``, ``eval retrieval`` and ``bench``.

Parsed from README.md (code spans and fenced blocks only: prose is not an interface) and checked
against the real objects — the Typer app through click's own command tree (``get_command``,
``params``), the pydantic settings models' fields, and the string keys the result-building modules
put in their dicts (read with ``ast``, so no model loads). Fast: no embedder, no store.

Each check is also run on an edited copy of the README text (a command, an option, a variable, a
setting and a key renamed) and must then fail: the test cannot pass by parsing nothing.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel

from memctl.cli import app
from memory.settings import MemorySettings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# --json keys: the modules whose dict literals build each command's JSON (cli_* print it).
JSON_SOURCES = {
    "eval dedupe": ("memctl/evaluation.py", "memctl/cli_tools.py"),
    "eval retrieval": ("memctl/evaluation.py", "memctl/retrieval_probes.py", "memctl/cli_tools.py"),
    "bench": ("memctl/bench.py", "memctl/bench_handoff.py", "memctl/bench_cold.py", "memctl/bench_warm.py",
              "memctl/cli_tools.py"),
}
# MEMORY_* names that are not settings fields but are read by name elsewhere (checked below).
CODE_SOURCES = ("memory", "memctl", "supervisor", "agents")
# Backticked snake_case words in the settings table rows that are not field names.
NOT_FIELDS = {"init_chat_model"}  # LangChain's function that a chat_model string is passed to


# ------------------------------------------------------------------------------------- parsing
_SPAN = re.compile(r"`([^`]+?)`")


def code_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every inline code span (start/end: its text's offsets) and of every
    line of a fenced block, in order. A span may wrap lines within a paragraph (Markdown allows
    it), never across a blank line."""
    out: list[tuple[int, int, str]] = []

    def inline(lo: int, hi: int) -> None:
        out.extend((s.start(1), s.end(1), s.group(1)) for s in _SPAN.finditer(text, lo, hi)
                   if "\n\n" not in s.group(1))

    pos = 0
    for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        inline(pos, m.start())
        off = m.start(1)
        for line in m.group(1).splitlines(keepends=True):
            code = re.split(r"\s#\s", line)[0]  # a shell comment is prose
            out.append((off, off + len(code), code))
            off += len(line)
        pos = m.end()
    inline(pos, len(text))
    return out


@dataclass
class Invocation:
    offset: int  # of "memctl"
    end: int  # of the code span holding it
    words: list[str]  # subcommand path, e.g. ["eval", "dedupe"]
    options: list[str]  # --options named after it
    text: str


def invocations(text: str) -> Iterator[Invocation]:
    """Every ``memctl ...`` a code span or block shows (also ``.venv/bin/memctl``; not ``memctl/x.py``
    or ``python -m memctl.x``)."""
    for off, end, span in code_spans(text):
        for m in re.finditer(r"(?:^|(?<=[\s/]))memctl(?=\s|$)(.*)", span, flags=re.S):
            rest = re.split(r"\s(?:\||&&|;|>)\s", m.group(1))[0]
            try:
                tokens = shlex.split(rest)
            except ValueError:  # an unbalanced quote in prose-like text
                tokens = rest.split()
            yield Invocation(off + m.start(), end, *_split(tokens), text=span.strip())


def _split(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the leading words: subcommand path and maybe arguments, every --option named)."""
    words: list[str] = []
    options: list[str] = []
    leading = True
    skip = False
    for t in tokens:
        if skip:  # the value of a root option (memctl --path FILE stats)
            skip = False
            continue
        t = t.strip("[](),.;:…")
        if t.startswith("--") and len(t) > 2:
            name = t.split("=")[0]
            options.append(name)
            if leading and not words and name in ("--path", "--config") and "=" not in t:
                skip = True
            elif words:
                leading = False
        elif leading and re.fullmatch(r"[a-z][a-z-]*(/[a-z][a-z-]*)*", t):
            words.append(t)
        else:
            leading = False
    return words, options


@functools.cache
def _cli() -> Any:
    return typer.main.get_command(app)


def _is_group(cmd: Any) -> bool:
    # Typer ships its own copy of click (typer._click): duck-type rather than isinstance(click.Group).
    return callable(getattr(cmd, "get_command", None)) and callable(getattr(cmd, "list_commands", None))


@dataclass
class Resolved:
    command: Any
    path: list[str]
    problems: list[str]


def resolve(inv: Invocation, root: Any = None) -> Resolved:
    """Walk the click tree along ``inv.words``; a word a group does not have is a problem when it
    is the first word after memctl or after a group (later words are the command's arguments)."""
    root = root or _cli()
    cmd: Any = root
    ctx = root.context_class(root)
    path: list[str] = []
    problems: list[str] = []
    for w in inv.words:
        if not _is_group(cmd):
            break  # an argument of the leaf command
        alts = w.split("/")  # "collection list/remove"
        subs = [cmd.get_command(ctx, a) for a in alts]
        missing = [a for a, s in zip(alts, subs, strict=True) if s is None]
        if missing:
            problems.append(f"`memctl {' '.join(path + [w])}`: no subcommand {missing[0]!r} "
                            f"(has {sorted(cmd.list_commands(ctx))})")
            return Resolved(cmd, path, problems)
        path.append(w)
        cmd = subs[0]  # type: ignore[assignment]
        if len(alts) > 1:
            return Resolved(cmd, path, problems)  # several leaves: options are not attributed
    accepted = {"--help"} | {o for p in root.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    accepted |= {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    for opt in inv.options:
        if opt not in accepted:
            problems.append(f"`memctl {' '.join(path)}` has no option {opt} (README: `{inv.text[:80]}`)")
    return Resolved(cmd, path, problems)


def cli_problems(text: str, root: Any = None) -> tuple[list[str], int]:
    found = list(invocations(text))
    return [p for inv in found for p in resolve(inv, root).problems], len(found)


def table_commands(text: str) -> list[list[str]]:
    """The command paths the README's component table lists in its ``| CLI |`` row, e.g.
    ``add search ... eval retrieval ... collection add/list/remove`` (a group takes the next word,
    ``/`` separates alternatives)."""
    row = next(line for line in text.splitlines() if line.startswith("| CLI |"))
    cell = row.split("|")[3]
    words = [w for span in re.findall(r"`([^`]+)`", cell) if re.fullmatch(r"[a-z][a-z /-]*", span)
             and " " in span for w in span.split()]
    root = _cli()
    ctx = root.context_class(root)
    out: list[list[str]] = []
    i = 0
    while i < len(words):
        sub = root.get_command(ctx, words[i])
        if sub is not None and _is_group(sub) and i + 1 < len(words):
            out += [[words[i], a] for a in words[i + 1].split("/")]
            i += 2
        else:
            out.append([words[i]])
            i += 1
    return out


def table_problems(text: str) -> tuple[list[str], int]:
    """Every command the CLI row lists exists, and every registered command is listed."""
    listed = table_commands(text)
    root = _cli()
    ctx = root.context_class(root)
    problems = []
    for path in listed:
        cmd: Any = root
        for w in path:
            cmd = cmd.get_command(ctx, w) if _is_group(cmd) else None
            if cmd is None:
                problems.append(f"the README's CLI row lists `{' '.join(path)}`: no such command")
                break
    have = {tuple(p) for p in listed}
    for name in root.list_commands(ctx):
        sub = root.get_command(ctx, name)
        paths = [(name, s) for s in sub.list_commands(ctx)] if _is_group(sub) else [(name,)]
        problems += [f"`memctl {' '.join(p)}` is missing from the README's CLI row" for p in paths if p not in have]
    return problems, len(listed)


# ------------------------------------------------------------------------------------ settings
def _field_model(model: type[BaseModel], name: str) -> tuple[bool, type[BaseModel] | None]:
    """(is a field, its model when it is a nested settings model)."""
    f = model.model_fields.get(name)
    if f is None:
        return False, None
    ann = f.annotation
    return True, ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def env_var_ok(name: str) -> bool:
    """``MEMORY_A__B`` is the field a.b (``__`` nests); a trailing ``__`` / ``__*`` names a group."""
    parts = name.removeprefix("MEMORY_").rstrip("*").split("__")
    group = parts[-1] == ""
    parts = [p.lower() for p in parts if p]
    model: type[BaseModel] | None = MemorySettings
    for p in parts:
        if model is None:
            return False
        ok, model = _field_model(model, p)
        if not ok:
            return False
    return model is not None if group else True


def _read_by_code(name: str) -> bool:
    quoted = re.compile(rf"[\"']{re.escape(name)}[\"']")
    return any(quoted.search(f.read_text(encoding="utf-8"))
               for d in CODE_SOURCES for f in (ROOT / d).rglob("*.py"))


def env_vars(text: str) -> list[str]:
    """The MEMORY_* names in code spans, with ``__X`` continuations (``MEMORY_QDRANT__PATH`` /
    ``__LOCATION``) joined to the variable before them."""
    names: list[str] = []
    for _, _, span in code_spans(text):
        for m in re.finditer(r"\bMEMORY_[A-Z0-9_]*\*?|(?<![A-Z0-9_])__[A-Z][A-Z0-9_]*", span):
            v = m.group(0)
            if v.startswith("__"):
                if names and "__" in names[-1]:
                    names.append(names[-1].rsplit("__", 1)[0] + v)
                continue
            if v.rstrip("*") != "MEMORY_":  # the prefix itself
                names.append(v.split("=")[0])
    return names


def env_problems(text: str) -> tuple[list[str], int]:
    names = env_vars(text)
    bad = [n for n in dict.fromkeys(names) if not env_var_ok(n) and not _read_by_code(n)]
    return [f"{n}: no such setting (nor read by name in {', '.join(CODE_SOURCES)})" for n in bad], len(names)


def dotted_settings(text: str) -> list[str]:
    """``scoring.bridge_weight``-style names in code spans whose first part is a settings group."""
    groups = [n for n in MemorySettings.model_fields if _field_model(MemorySettings, n)[1] is not None]
    pat = re.compile(rf"^({'|'.join(groups)})\.([a-z_][a-z0-9_]*)(?:\s|$|:|=)")
    return [".".join(m.groups()) for _, _, span in code_spans(text) if (m := pat.match(span.strip() + " "))]


def table_fields(text: str) -> list[tuple[str, str]]:
    """(variable, word) for the field names listed in the ``MEMORY_X__*`` rows of the settings
    table: words at parenthesis depth 0 and snake_case words anywhere in the row."""
    out = []
    for row in re.findall(r"^\| `(MEMORY_[A-Z]+__\*)` \|.*$", text, flags=re.M):
        line = next(r for r in text.splitlines() if r.startswith(f"| `{row}`"))
        cell = line.split("|", 3)[3]
        depth = 0
        for m in re.finditer(r"`([^`]+)`|[()]", cell):
            tok = m.group(0)
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth = max(0, depth - 1)
            else:
                for w in m.group(1).split():
                    if re.fullmatch(r"[a-z][a-z0-9_]*", w) and (depth == 0 or "_" in w) and w not in NOT_FIELDS:
                        out.append((row, w))
    return out


def _module_defines(module: str, name: str) -> bool:
    path = ROOT / "memory" / f"{module}.py"
    return path.is_file() and re.search(rf"^(def|class) {name}\b|^{name}\s*[:=]", path.read_text(encoding="utf-8"),
                                        flags=re.M) is not None


def settings_problems(text: str) -> tuple[list[str], int]:
    problems = []
    dotted = dotted_settings(text)
    for name in dotted:
        group, field = name.split(".")
        model = _field_model(MemorySettings, group)[1]
        if _module_defines(group, field):
            continue  # `scoring.mixed_script_fusion`: a function of memory.scoring, not a setting
        if model is None or field not in model.model_fields:
            problems.append(f"`{name}`: no such setting")
    listed = table_fields(text)
    for var, word in listed:
        model = _field_model(MemorySettings, var.removeprefix("MEMORY_").split("__")[0].lower())[1]
        if model is None or word not in model.model_fields:
            problems.append(f"settings table row {var}: `{word}` is not a field")
    return problems, len(dotted) + len(listed)


# ------------------------------------------------------------------------------------ --json keys
def produced_keys(files: tuple[str, ...]) -> set[str]:
    """String keys of every dict display, ``d["k"] = ...`` / ``d.setdefault("k", ...)`` and every
    dataclass-style annotated field in ``files``: what their JSON can contain."""
    keys: set[str] = set()
    for rel in files:
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                    keys.add(node.slice.value)
            elif isinstance(node, ast.ClassDef):
                keys |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                         and isinstance(s.target, ast.Name)}
    return keys


def json_key_claims(text: str) -> list[tuple[str, str, str]]:
    """(command, key, README context) for each key the README ties to a command's ``--json``:

    * ``memctl CMD ... --json`` followed by ``(adds `k1`, `k2``` or ``, `k1`:`` (its keys named);
    * ``` `k` in `--json` ``` (the key of the command the README last showed).
    """
    claims = []
    invs = [i for i in invocations(text) if " ".join(i.words[:2]) in JSON_SOURCES or i.words[:1] == ["bench"]]
    for inv in invs:
        cmd = "bench" if inv.words[:1] == ["bench"] else " ".join(inv.words[:2])
        if "--json" not in inv.options:
            continue
        after = re.match(r"`\s*(?:\(adds\s+|,\s*)((?:`[a-z][a-z0-9_]*`(?:,\s*|\s+and\s+)?)+)", text[inv.end:])
        if after:
            claims += [(cmd, k, f"`{inv.text[:60]}`{after.group(0)[1:60]}")
                       for k in re.findall(r"`([a-z][a-z0-9_]*)`", after.group(1))]
    shown = list(invocations(text))
    for m in re.finditer(r"`([a-z][a-z0-9_]*)` in `--json`", text):
        before = [i for i in shown if i.end < m.start()]
        if before:
            last = before[-1]
            cmd = "bench" if last.words[:1] == ["bench"] else " ".join(last.words[:2])
            if cmd in JSON_SOURCES:
                claims.append((cmd, m.group(1), m.group(0)))
    return claims


def json_problems(text: str) -> tuple[list[str], int]:
    claims = json_key_claims(text)
    keys = {cmd: produced_keys(files) for cmd, files in JSON_SOURCES.items()}
    return [f"`memctl {cmd} --json` has no key {k!r} (README: {ctx})" for cmd, k, ctx in claims
            if k not in keys[cmd]], len(claims)


# ------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize(("check", "at_least", "what"), [
    (cli_problems, 40, "memctl invocations"),         # commands and their options exist
    (table_problems, 25, "commands in the CLI row"),  # the component table lists every command
    (env_problems, 15, "MEMORY_* names"),              # variables map to settings fields
    (settings_problems, 30, "settings names"),         # dotted settings names are fields
    (json_problems, 5, "--json keys"),                 # keys the README lists are produced
])
def test_readme_interface_exists(check: Any, at_least: int, what: str) -> None:
    problems, n = check(README)
    assert n >= at_least, f"only {n} {what} parsed from README.md: the parser broke"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("old", "new", "check"), [
    ("`memctl consolidate [--ns", "`memctl consolidat [--ns", cli_problems),  # a renamed subcommand
    ("memctl eval dedupe --pairs FILE --consolidate", "memctl eval dedupe --pairs FILE --consolidated",
     cli_problems),  # a renamed option
    ("`memctl transcript tail --thread", "`memctl transcript tail --threads", cli_problems),
    ("forget-user sweep", "forget_user sweep", table_problems),  # the CLI row's list of commands
    ("transcript append/tail", "transcript append", table_problems),  # a command dropped from the list
    ("`MEMORY_POLICY__CONSOLIDATE`", "`MEMORY_POLICY__CONSOLIDATION`", env_problems),
    ("`MEMORY_INDEX_MEMORY_MB`", "`MEMORY_INDEX_MEMORY_MiB`", env_problems),
    ("`__LOCATION`", "`__LOCATIONS`", env_problems),  # a continuation of MEMORY_QDRANT__PATH
    ("`scoring.bridge_weight`", "`scoring.bridge_weights`", settings_problems),
    ("`consolidate_idle_seconds` (30)", "`consolidate_idle_secs` (30)", settings_problems),
    ("(adds `by_kind`", "(adds `by_kinds`", json_problems),
    ("`warmup_ms` in `--json`", "`warm_up_ms` in `--json`", json_problems),
])
def test_a_renamed_name_in_the_readme_is_caught(old: str, new: str, check: Any) -> None:
    assert old in README, f"the README no longer contains {old!r}: pick another probe"
    problems, _ = check(README)
    assert not problems
    problems, _ = check(README.replace(old, new, 1))
    assert problems, f"renaming {old!r} to {new!r} went unnoticed"


def test_a_renamed_option_in_the_code_is_caught() -> None:
    """The other direction: the code drops (renames) an option the README shows."""
    root = typer.main.get_command(app)
    real = root.get_command(root.context_class(root), "consolidate")  # type: ignore[attr-defined]
    assert real is not None and any("--dry-run" in p.opts for p in real.params)
    renamed = copy.copy(real)
    renamed.params = [p for p in real.params if "--dry-run" not in p.opts]
    orig = root.get_command  # type: ignore[attr-defined]
    root.get_command = lambda c, name: renamed if name == "consolidate" else orig(c, name)  # type: ignore[attr-defined]
    problems, _ = cli_problems(README, root)
    assert any("consolidate` has no option --dry-run" in p for p in problems), problems
