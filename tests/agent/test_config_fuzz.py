"""Fuzzed configs: structure-aware mutations of every shipped and example params.json end in exit 0
or 2 from ``check-config``, never a traceback (issue 12).

Mutations pick a place in the parsed document (any object member or list item) and replace its
value (Infinity, NaN, huge and negative numbers, strings, nesting deeper than the parser allows,
an integer of thousands of digits), drop it, or duplicate an object key; a file may also get
bytes that are not UTF-8. Hypothesis runs derandomized (the same examples every run), 200 of them
in-process through the CLI's ``main()``; 10 more go through ``python -m agent check-config``.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.__main__ import main
from tests.conftest import ROOT

SEEDS = [ROOT / "config" / "params.json", *sorted((ROOT / "config" / "examples").glob("*.json"))]
DOCS = [json.loads(p.read_text()) for p in SEEDS]


@dataclass(frozen=True)
class Raw:
    """JSON text inserted as is (what json.dumps cannot write: huge ints, deep nesting, duplicates)."""

    text: str


#: Replacement values: what a careless edit, a script or a broken disk puts in a config.
VALUES: list[Any] = [
    float("inf"), float("-inf"), float("nan"), 10**18, -1, -1e308, 1e-300, 0, 1e308, True, None, "",
    "0x68", "not a number", "x" * 5000, [], {}, [1, [2, [3]]], {"kind": "nope"},
    Raw("[" * 5000 + "]" * 5000), Raw("9" * 5000), Raw('{"a":' * 3000 + "1" + "}" * 3000),
]


def encode(value: Any) -> str:
    """JSON text of ``value`` with :class:`Raw` parts inserted verbatim (Infinity/NaN as Python writes them)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    return json.dumps(value)


def places(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every path to an object member or list item, depth first."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, child in items:
        out.append((*path, key))
        out.extend(places(child, (*path, key)))
    return out


def mutate(doc: Any, path: tuple, op: str, value: Any) -> Any:
    """A copy of ``doc`` with ``op`` (replace | drop | duplicate) applied at ``path``."""
    if not path:
        return doc
    if isinstance(doc, dict):
        out = dict(doc)
        key = path[0]
        if len(path) > 1:
            out[key] = mutate(doc[key], path[1:], op, value)
        elif op == "replace":
            out[key] = value
        elif op == "drop":
            del out[key]
        else:  # the key twice: the parser keeps the last, which is the mutated value
            out = {**out, key: Raw(f"{encode(doc[key])}, {json.dumps(key)}: {encode(value)}")}
        return out
    out_list = list(doc)
    index = path[0]
    if len(path) > 1:
        out_list[index] = mutate(doc[index], path[1:], op, value)
    elif op == "drop":
        del out_list[index]
    else:
        out_list[index] = value
    return out_list


def mutated_bytes(doc_i: int, picks: list[tuple[int, str, int]], garble_at: int | None) -> bytes:
    doc = DOCS[doc_i]
    for place_i, op, value_i in picks:
        where = places(doc)
        if where:
            doc = mutate(doc, where[place_i % len(where)], op, VALUES[value_i % len(VALUES)])
    data = encode(doc).encode("utf-8")
    if garble_at is not None:
        at = garble_at % (len(data) + 1)
        data = data[:at] + b"\xff\xfe\xc3" + data[at:]
    return data


PICK = st.tuples(st.integers(0, 10_000), st.sampled_from(["replace", "replace", "drop", "duplicate"]),
                 st.integers(0, len(VALUES) - 1))


def check(path: Path) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        return main(["check-config", str(path)])


@pytest.mark.slow                # 200 mutated configs through check-config's main(), ~5-15 s
@settings(max_examples=200, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc_i=st.integers(0, len(DOCS) - 1), picks=st.lists(PICK, min_size=1, max_size=3),
       garble_at=st.none() | st.integers(0, 100_000))
def test_mutated_configs_exit_0_or_2_in_process(tmp_path, doc_i, picks, garble_at):
    path = tmp_path / "params.json"
    path.write_bytes(mutated_bytes(doc_i, picks, garble_at))
    assert check(path) in (0, 2)


@pytest.mark.slow                # 10 `python -m agent check-config` processes
def test_mutated_configs_exit_0_or_2_through_the_command(tmp_path):
    rng = random.Random(12)
    procs = []
    for n in range(10):
        picks = [(rng.randrange(10_000), rng.choice(["replace", "drop", "duplicate"]), rng.randrange(len(VALUES)))
                 for _ in range(rng.randint(1, 3))]
        path = tmp_path / f"params{n}.json"
        path.write_bytes(mutated_bytes(n % len(DOCS), picks, rng.choice([None, rng.randrange(100_000)])))
        procs.append(subprocess.Popen([sys.executable, "-m", "agent", "check-config", str(path)], cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 2) and "Traceback" not in err, (out, err)
        assert out.strip()  # a verdict: "ok (...)" or the problems


def test_the_mutations_reach_every_kind_of_failure(tmp_path):
    """The fuzz corpus is not vacuous: infinity, deep nesting, huge ints and bad bytes each give exit 2."""
    doc = DOCS[0]
    path = tmp_path / "params.json"
    number = next(p for p in places(doc) if isinstance(_get(doc, p), float))
    for value in (float("inf"), VALUES[-3], VALUES[-2]):
        path.write_text(encode(mutate(doc, number, "replace", value)))
        assert check(path) == 2
    path.write_bytes(mutated_bytes(0, [], 10))
    assert check(path) == 2


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc
