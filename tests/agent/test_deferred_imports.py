"""agent.support.lazy.deferred_imports: a module imported inside the block runs at its first attribute read.

Each case imports a module of its own, written to ``tmp_path`` (a name no other test uses), whose
code leaves a line in a file when it runs; sys.path and sys.modules are restored after each case.
The last case runs python-socketio's import as the agent does (agent.app.SYNC_CLIENT_ONLY) in a
fresh interpreter: the sync client's libraries stay unexecuted until that client would use them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import types
import uuid

import pytest

from agent.support import lazy
from agent.support.lazy import deferred_imports
from agent.testing.running_agent import ROOT, wait_until


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """(module name, path of the file its code appends "ran" to) for a fresh module on sys.path."""
    name = f"deferred_probe_{uuid.uuid4().hex}"
    ran = tmp_path / "ran.txt"
    (tmp_path / f"{name}.py").write_text(f"open({str(ran)!r}, 'a').write('ran\\n')\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, ran
    sys.modules.pop(name, None)


def runs(ran) -> int:
    return ran.read_text().count("ran") if ran.exists() else 0


def test_a_module_imported_inside_runs_at_its_first_attribute_read_once(probe):
    name, ran = probe
    with deferred_imports([name]):
        module = __import__(name)
    assert runs(ran) == 0
    assert module.VALUE == 42
    assert runs(ran) == 1
    assert module.VALUE == 42 and __import__(name) is module
    assert runs(ran) == 1


def test_a_module_imported_before_stays_as_it_is(probe):
    name, ran = probe
    module = __import__(name)
    assert runs(ran) == 1
    with deferred_imports([name]):
        assert __import__(name) is module
    assert runs(ran) == 1 and module.VALUE == 42


def test_outside_the_block_and_for_other_names_imports_run_at_once(probe):
    name, ran = probe
    with deferred_imports(["some_other_module_name"]):
        __import__(name)
    assert runs(ran) == 1
    sys.modules.pop(name)
    with deferred_imports([name]):
        pass
    __import__(name)
    assert runs(ran) == 2


def test_a_module_that_is_not_installed_fails_to_import_as_before():
    name = f"not_installed_{uuid.uuid4().hex}"
    with deferred_imports([name]), pytest.raises(ModuleNotFoundError):
        __import__(name)
    assert name not in sys.modules


#: a fresh interpreter: import the ARTEX adapter as agent.app does, report what ran, then use requests
SOCKETIO_CHILD = textwrap.dedent('''
    import json, sys
    from agent.app import SYNC_CLIENT_ONLY
    from agent.support.lazy import deferred_imports
    with deferred_imports(SYNC_CLIENT_ONLY):
        import agent.adapters.artex
    import engineio.client
    before = sorted(m for m in sys.modules if m.split(".")[0] in ("urllib3", "requests", "websocket"))
    session = engineio.client.requests.Session       # what the sync client does first
    print(json.dumps({"before": before, "session": f"{session.__module__}.{session.__qualname__}",
                      "urllib3_after": "urllib3" in sys.modules}))
''')


def test_the_agents_socketio_import_leaves_the_sync_clients_libraries_to_their_first_use():
    out = subprocess.run([sys.executable, "-c", SOCKETIO_CHILD], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(got["before"]) <= {"requests", "websocket"}      # bound, not run: no submodule, no urllib3
    assert got["session"] == "requests.sessions.Session" and got["urllib3_after"]


def test_a_second_thread_reading_during_the_first_read_waits_for_the_module_and_it_runs_once(tmp_path, monkeypatch):
    """Python 3.11's own LazyLoader lets the second thread see the module half-run (AttributeError: CPython
    gh-114763). The module's code holds in the first reader until the second is seen waiting (or done)."""
    name, gate_name = f"deferred_gate_{uuid.uuid4().hex}", f"gate_{uuid.uuid4().hex}"
    gate = types.SimpleNamespace(started=threading.Event(), go=threading.Event(), runs=0)
    monkeypatch.setitem(sys.modules, gate_name, gate)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import sys
        gate = sys.modules[{gate_name!r}]
        gate.runs += 1
        gate.started.set()
        gate.go.wait(30)
        VALUE = 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with deferred_imports([name]):
            module = __import__(name)
        got: dict[str, object] = {}

        def read(who: str) -> None:
            try:
                got[who] = module.VALUE
            except Exception as err:        # what 3.11's LazyLoader gives the second reader
                got[who] = err

        first = threading.Thread(target=read, args=("first",))
        first.start()
        assert gate.started.wait(10)
        second = threading.Thread(target=read, args=("second",))
        second.start()

        def waiting() -> bool:
            frame = sys._current_frames().get(second.ident)
            return frame is not None and frame.f_code.co_name == "__getattribute__" and \
                frame.f_code.co_filename == lazy.__file__
        assert wait_until(lambda: waiting() or not second.is_alive(), 10)
        assert second.is_alive() and "second" not in got       # it waits for the run, sees no half module
        gate.go.set()
        first.join(10), second.join(10)
        assert got == {"first": 42, "second": 42} and gate.runs == 1
        assert type(module) is types.ModuleType                 # a plain module once loaded
    finally:
        gate.go.set()
        sys.modules.pop(name, None)
