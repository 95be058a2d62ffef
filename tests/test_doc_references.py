"""Every reference the documentation makes resolves (issue 19 item 9).

Read: README.md and docs/*.md whole; the docstrings and comments of every Python file in agent/,
drivers/, scripts/ and tests/, and the comments of scripts/*.sh. Checked:

- a repository path (under agent, drivers, docs, scripts, tests, config or systemd) exists;
  ``agent/adapters/artex_client.HubClient`` (a module path, then a name) names a name of it;
- a section citation (a docs page or README, a comma or a parenthesis, then a quoted section;
  in a page also ``see "..."``, ``(below, "...")`` for its own sections) names a heading of that
  page or a bold run-in heading (``**Reconnects and restarts.**``): the heading itself, or its
  start before ``" ("`` or ``":"``, without its number (``"Find the devices"`` is
  ``## 5. Find the devices: ...``), any case;
- a link ``[..](page.md#anchor)`` names an existing page and one of its headings' anchors;
- a dotted name under agent, drivers or tests (``agent.control.ControlLoop.submit``,
  ``drivers.transport.bus_key``) resolves: the longest prefix that is a module of the
  repository, then each name defined at its top level (imports followed, a PEP 562 lazy name
  listed in the module), in a class body or its bases, or assigned to ``self.`` in a method.
  Resolved from the source with :mod:`ast`, nothing imported: the whole check takes about a
  second on the loaded 2-core development machine. Not code: ``drivers.motor.baud`` (a key of
  the shipped configs' ``drivers`` section) and the names in ``tests.symbols.NOT_CODE``.

A failure lists each broken reference as ``file:line: what it names: why``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT
from tests.symbols import resolve, resolve_in_module

MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = ("agent", "drivers", "scripts", "tests")

#: a repository path in prose, code spans or links: a top directory, then path characters
PATH = re.compile(r"(?<![\w/.~$-])((?:agent|drivers|docs|scripts|tests|config|systemd)/[\w./*<>{}-]*[\w/*>}])")
#: a page, then a comma, a parenthesis or a space, then the quoted section (which may wrap); a bare
#: README is this repository's unless another project's ("opencv-python project's README")
CITATION = re.compile(r"(?<![\w/.-])(?<!'s )((?:docs/)?[\w-]+\.md|README)(?:,\s*|\s*\(\s*|\s+)"
                      r"(?:\"([^\"]{1,150})\"|“([^”]{1,150})”|'([^'\n]{1,150})')")
#: a markdown link's target: ``(page.md)``, ``(page.md#anchor)``, ``(#anchor)``
LINK = re.compile(r"\]\(([^()\s#]*)(?:#([^()\s]+))?\)")
#: a dotted name of the repository's code
DOTTED = re.compile(r"(?<![\w./-])((?:agent|drivers|tests)(?:\.[A-Za-z_]\w*)+)")
#: paths the user makes on the robot (docs/robot_msg.md, "Security (CURVE)"), not in the repository
NOT_IN_REPOSITORY = {"config/keys", "config/authorized", "config/authorized/controller.key"}
#: a comment, or a string literal (prefix, then triple, double or single quotes)
LEXER = re.compile(r"""(?P<comment>\#[^\n]*)|(?<!\w)[rRbBuUfF]{0,2}(?P<string>\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''"""
                   r"""|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""")
TRAILING_COMMENT = re.compile(r"""[ \t]+#[^'"\n]*$""")
MODULE_HEAD = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n)*")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
#: a bold run-in heading opening a paragraph or a list item: ``**Reconnects and restarts.** The``
RUN_IN = re.compile(r"^(?:[-*] )?\*\*([^*]+?)\.?\*\*", re.M)
#: a citation of a section of the same page: ``see "Log levels"``, ``(below, "Frames")``
SAME_PAGE = re.compile(r"\b(?:see|below,|above,)\s+\"([^\"]{1,80})\"")


# --- what is read ---------------------------------------------------------------------------------

def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def code_files() -> list[Path]:
    return [p for top in CODE_DIRS for p in sorted((ROOT / top).rglob("*.py"))]


def python_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(first line, text) of each docstring and each run of comment lines of one Python file.

    A lexer of comments and string literals (a ``#`` inside a string is part of the string), not
    :mod:`ast` or :mod:`tokenize`: those take seconds over the tree on a loaded 2-core machine. A
    docstring is a string literal that opens its line, after a line ending in ``:`` (a ``def`` or
    ``class`` header) or with only comments above it (the module's).
    """
    source = path.read_text()
    block: list[str] = []
    start = last = 0
    for m in LEXER.finditer(source):
        line = source.count("\n", 0, m.start()) + 1
        if m.group("comment") is not None:
            if block and line != last + 1:
                yield start, "\n".join(block)
                block = []
            if not block:
                start = line
            block.append(m.group("comment")[1:])
            last = line
            continue
        line_start = source.rfind("\n", 0, m.start()) + 1
        if source[line_start:m.start()].strip():
            continue   # not the first thing on its line
        above = source[:line_start].rstrip()
        above = TRAILING_COMMENT.sub("", above[above.rfind("\n") + 1:])
        if above.endswith(":") or MODULE_HEAD.fullmatch(source, 0, line_start):
            yield line, m.group("string")
    if block:
        yield start, "\n".join(block)


def shell_texts(path: Path) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if "#" in line and not line.startswith("#!"):
            yield n, line[line.index("#") + 1:]


def texts() -> Iterator[tuple[str, int, str, Path]]:
    """(file, first line, text, the file) of everything that is read."""
    for md in MARKDOWN:
        yield rel(md), 1, md.read_text(), md
    for py in code_files():
        for line, text in python_texts(py):
            yield rel(py), line, text, py
    for sh in sorted((ROOT / "scripts").glob("*.sh")):
        for line, text in shell_texts(sh):
            yield rel(sh), line, text, sh


# --- markdown headings ----------------------------------------------------------------------------

def headings(text: str) -> list[str]:
    found, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.append(m.group(2))
    return found


def plain(heading: str) -> str:
    return re.sub(r"[`*]", "", heading).strip()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", plain(heading).lower()).replace(" ", "-")


@functools.cache
def page_headings(page: str) -> tuple[list[str], set[str]]:
    """A page's headings and bold run-in headings; the anchors of its headings."""
    text = (ROOT / page).read_text()
    hs = headings(text)
    slugs: set[str] = set()
    for h in hs:
        s = base = slug(h)
        n = 0
        while s in slugs:
            n += 1
            s = f"{base}-{n}"
        slugs.add(s)
    return hs + RUN_IN.findall(text), slugs


def section_matches(cited: str, heading: str) -> bool:
    cited = " ".join(cited.split()).lower()
    text = re.sub(r"^§?\d+(\.\d+)*\.?\s+", "", plain(heading)).lower()
    return text == cited or any(text.startswith(cited + sep) for sep in (" (", ":", " —", " -"))


# --- the checks -----------------------------------------------------------------------------------

def check_path(path: str) -> str | None:
    path = path.rstrip("/.")
    if any(ch in path for ch in "*<>{}") or "..." in path or path in NOT_IN_REPOSITORY:
        return None   # a pattern (agent/adapters/artex*.py, tests/drivers/test_<device>.py)
    if (ROOT / path).exists():
        return None
    module, _, name = path.rpartition(".")   # agent/adapters/artex_client.HubClient
    if name[:1].isalpha() and name != "py" and (ROOT / f"{module}.py").is_file():
        return resolve_in_module(module.replace("/", "."), name.split("."))
    return "no such file or directory"


def check_citation(page: str, section: str, citing: Path) -> str | None:
    if page in ("README", "README.md"):
        page = "README.md"
    elif "/" not in page:
        page = rel(citing.parent / page) if citing.suffix == ".md" else f"docs/{page}"
    if not (ROOT / page).is_file():
        return f"no page {page}"
    hs, _ = page_headings(page)
    if any(section_matches(section, h) for h in hs):
        return None
    return f"{page} has no heading {section!r}"


def check_link(target: str, anchor: str | None, citing: Path) -> str | None:
    if re.match(r"\w+:", target) or (not target.endswith(".md") and target):
        return None   # a URL, or a file that the path check covers
    page = rel(citing) if not target else rel((citing.parent / target).resolve())
    if not (ROOT / page).is_file():
        return f"no page {page}"
    if anchor and anchor not in page_headings(page)[1]:
        return f"{page} has no heading with the anchor #{anchor}"
    return None


def problems_in(where: str, first_line: int, text: str, path: Path) -> Iterator[str]:
    def at(offset: int) -> str:
        return f"{where}:{first_line + text.count(chr(10), 0, offset)}"

    for m in PATH.finditer(text):
        if why := check_path(m.group(1)):
            yield f"{at(m.start())}: {m.group(1)}: {why}"
    for m in CITATION.finditer(text):
        section = next(g for g in m.groups()[1:] if g is not None)
        section = " ".join(section.split()) if path.suffix == ".md" else " ".join(
            line.strip().lstrip("#").strip() for line in section.splitlines())
        if why := check_citation(m.group(1), section, path):
            yield f"{at(m.start())}: {m.group(1)} {section!r}: {why}"
    if path.suffix == ".md":
        for m in SAME_PAGE.finditer(text):
            if why := check_citation(rel(path), m.group(1), path):
                yield f"{at(m.start())}: {m.group(0)!r}: {why}"
        for m in LINK.finditer(text):
            if why := check_link(m.group(1), m.group(2), path):
                yield f"{at(m.start())}: ({m.group(1)}#{m.group(2) or ''}): {why}"
    for m in DOTTED.finditer(text):
        if why := resolve(m.group(1)):
            yield f"{at(m.start())}: {m.group(1)}: {why}"


def all_problems() -> list[str]:
    return [p for where, line, text, path in texts() for p in problems_in(where, line, text, path)]


def test_every_file_section_and_name_the_docs_and_docstrings_cite_exists():
    problems = all_problems()
    assert not problems, "broken references:\n" + "\n".join(problems)


def test_the_checks_find_what_they_should():
    """The patterns and resolvers on known good and bad references (so the test above can fail)."""
    here = ROOT / "agent" / "app.py"
    text = ('see agent/control/loop.py and agent/nowhere.py, agent/adapters/artex_client.HubClient,\n'
            'docs/safety.md, "Emergency stop"; docs/safety.md "No such\n section"; '
            'agent.control.ControlLoop.submit, agent.devices.health.Health.OK, agent.model.Nothing, '
            'drivers.transport.bus_key, agent.video.VideoHub, agent/testing/clock.VirtualClock')
    found = list(problems_in("agent/app.py", 10, text, here))
    assert found == ["agent/app.py:10: agent/nowhere.py: no such file or directory",
                     "agent/app.py:11: docs/safety.md 'No such section': docs/safety.md has no heading "
                     "'No such section'",
                     "agent/app.py:12: agent.model.Nothing: agent.model defines no Nothing"], found
    md = ROOT / "docs" / "architecture.md"
    links = "[a](safety.md#emergency-stop) [b](safety.md#nothing) [c](nothing.md) [d](#layers)"
    assert list(problems_in("docs/architecture.md", 1, links, md)) == [
        "docs/architecture.md:1: (safety.md#nothing): docs/safety.md has no heading with the anchor #nothing",
        "docs/architecture.md:1: (nothing.md#): no page docs/nothing.md"]
    assert section_matches("Find the devices", "5. Find the devices: `robot-agent probe`")
    assert section_matches("video budget", "Video budget (`video` config section; agent/adapters/artex_video.py)")
    assert not section_matches("Video", "Video budget (`video` config section)")


def test_docstrings_and_comments_are_what_is_read(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('#!/usr/bin/env python3\n"""Module doc."""\nx = "# not a comment"  # a comment\n'
                      '# and its next line\n\n\ndef f(a: str = "it\'s") -> str:  # noqa: E501\n'
                      '    """F doc, agent/x.py."""\n    return "not a docstring"\n')
    assert sorted(python_texts(source)) == [(1, "!/usr/bin/env python3"), (2, '"""Module doc."""'),
                                          (3, " a comment\n and its next line"), (7, " noqa: E501"),
                                          (8, '"""F doc, agent/x.py."""')]
