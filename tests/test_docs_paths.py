"""The repository stands alone (issue 20 item 9): README.md and docs/ name no file outside it, and
every ``docs/...``, ``agent/...``, ``drivers/...``, ``scripts/...`` path they name exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: a repository path as written in prose or code spans: top directory, then path characters
PATH = re.compile(r"(?<![\w/.-])((?:docs|agent|drivers|scripts)/[\w./-]*[\w/])")
OUTSIDE = re.compile(r"(/work/|/home/\w|shared/(docs|seeds)|\.\./shared|seeds/)")


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip("/.") for m in PATH.finditer(text)}


def exists(path: str) -> bool:
    if any(ch in path for ch in "*<>{}") or "..." in path:
        return True   # a pattern (`agent/adapters/artex*.py`), not a path
    if (ROOT / path).exists():
        return True
    module, _, attr = path.rpartition(".")   # `agent/adapters/artex_client.HubClient`: a module's name
    return bool(attr) and attr[:1].isalpha() and (ROOT / f"{module}.py").exists()


def test_docs_name_no_file_outside_the_repository():
    found = [(doc.name, line.strip()[:120]) for doc in DOCS for line in doc.read_text().splitlines()
             if OUTSIDE.search(line)]
    assert not found, found


def test_every_repository_path_named_in_the_docs_exists():
    missing = sorted({(doc.name, p) for doc in DOCS for p in named_paths(doc.read_text()) if not exists(p)})
    assert not missing, missing


def test_the_path_pattern_finds_paths_in_prose_and_links():
    text = "see `agent/adapters/artex.py` and [x](docs/safety.md#stop), scripts/run-sim.sh. Also agent/"
    assert named_paths(text) == {"agent/adapters/artex.py", "docs/safety.md", "scripts/run-sim.sh"}
    assert exists("agent/adapters/artex_client.HubClient") and not exists("agent/adapters/nothing.py")
    assert not exists("docs/nothing.md")


#: in code a path under /home is a value (a camera file in a test), not a reference; the session's tree is
CODE_OUTSIDE = re.compile(r"(/work/|shared/(docs|seeds)|\.\./shared|seeds/)")
#: documents that lived outside the repository once; code must cite docs/ or a public source instead
GONE = re.compile(r"sim2bot-bridge-protocol-v1\.md|\bdesign\.md|\bstyle\.md|artex-robot-server-protocol|"
                  r"robot_msg-0\.3-readme")


def test_code_names_no_file_outside_the_repository():
    me = __file__.rsplit("/", 1)[-1]
    files = [p for top in ("agent", "drivers", "scripts", "tests", "systemd", "config")
             for p in sorted((ROOT / top).rglob("*")) if p.is_file() and p.suffix in (".py", ".sh", ".json", ".service", ".md", ".js", ".html")
             and p.name != me]
    found = [(str(p.relative_to(ROOT)), n + 1, line.strip()[:100]) for p in files
             for n, line in enumerate(p.read_text(errors="replace").splitlines())
             if CODE_OUTSIDE.search(line) or GONE.search(line)]
    assert not found, found
