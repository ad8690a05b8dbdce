"""The library stands alone: ``memory`` imports nothing from its tools or the demo app.

``memctl`` (CLI, demo, bench, evaluations), ``supervisor`` and ``agents`` build on ``memory``;
an import the other way round would make every user of the library load the Supervisor app
(and LangGraph with it), and brings back the import cycles the split removed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"memctl", "supervisor", "agents", "mcp"}  # mcp: the MCP server is a tool (memctl)


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module an ``import`` statement in ``path`` names, anywhere in the file
    (function-level imports included), with its line number."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_memory_source_imports_no_tool_or_app_package() -> None:
    files = sorted((ROOT / "memory").rglob("*.py"))
    assert len(files) > 20, "the walk found too few files: wrong root?"
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}"
           for p in files for line, mod in _imported_modules(p) if mod.split(".")[0] in FORBIDDEN]
    assert not bad, "memory/ must not import memctl, supervisor or agents:\n" + "\n".join(bad)


def test_importing_the_library_loads_no_tool_or_app_package() -> None:
    code = (
        "import json, sys\n"
        "import memory\n"
        "import memory.policy.manager\n"
        "import memory.store\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(FORBIDDEN)!r}))))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []
