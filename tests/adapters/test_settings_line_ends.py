"""A params.json saved by Windows Notepad has a UTF-8 BOM and CRLF line ends: a web_settings write kept
the BOM but turned every line end into LF (the whole file shows as changed in a diff, and Notepad's
own form is lost). Now the line ends stay as they were; a LF file stays LF."""

from __future__ import annotations

import json

from agent.adapters.artex_settings import persist_settings
from agent.config import load
from agent.testing.running_agent import sim_config


def test_a_web_settings_write_keeps_crlf_line_ends_and_the_bom(tmp_path):
    params = sim_config()
    path = tmp_path / "params.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(params, indent=2).replace("\n", "\r\n").encode() + b"\r\n")
    persist_settings(path, {"max_send_freq": 0.2})
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf{\r\n  \""), raw[:20]
    assert raw.count(b"\n") == raw.count(b"\r\n") > 10                # every line end is CRLF
    assert load(path).max_send_freq == 0.2
    assert json.loads(raw.decode("utf-8-sig"))["drivers"] == params["drivers"]


def test_a_web_settings_write_keeps_lf_line_ends(tmp_path):
    path = tmp_path / "params.json"
    path.write_text(json.dumps(sim_config(), indent=2) + "\n")
    persist_settings(path, {"max_send_freq": 0.2})
    raw = path.read_bytes()
    assert b"\r" not in raw and raw.count(b"\n") > 10
    assert load(path).max_send_freq == 0.2
