"""``recorder.dir`` that cannot hold the recordings, beyond a regular file (tests/recorder/test_recorder_cli.py):
a dangling symbolic link passed `check-config` and failed at run time ("[Errno 17] File exists ...;
None kept up to its last whole chunk"); a device was "not a directory, not a directory"."""

from __future__ import annotations

import json
import logging
import os

from agent.__main__ import main
from agent.recorder import channels
from agent.recorder.writer import RotatingWriter
from agent.testing.running_agent import sim_config


def test_a_dangling_symlink_or_a_device_as_recorder_dir_is_refused_naming_what_it_is(tmp_path, capsys):
    link = tmp_path / "recordings"
    os.symlink(tmp_path / "gone", link)
    params = tmp_path / "params.json"
    for where, words in (
            (link, f"{str(link)!r} cannot be made: {str(link)!r} is a symbolic link to {str(tmp_path / 'gone')!r}, "
                   "which does not exist"),
            (link / "sub", f"{str(link / 'sub')!r} cannot be made: {str(link)!r} is a symbolic link to "),
            ("/dev/null", "'/dev/null' is a character device, not a directory: the recordings need a directory")):
        params.write_text(json.dumps(sim_config(recorder={"enabled": True, "dir": str(where)})))
        assert main(["check-config", str(params)]) == 2
        out = capsys.readouterr().out
        assert f"{params}: $.recorder.dir: {words}" in out, out
        assert "not a directory, not a directory" not in out
        assert main(["run", "--config", str(params)]) == 2               # refused before anything starts
        assert words in capsys.readouterr().err
    os.mkdir(tmp_path / "gone")                                         # the link's target made: taken
    params.write_text(json.dumps(sim_config(recorder={"enabled": True, "dir": str(link)})))
    assert main(["check-config", str(params)]) == 0, capsys.readouterr().out


def test_a_directory_that_cannot_be_made_at_run_time_is_said_without_a_file_name(tmp_path, caplog):
    """The recorder's own words when no file was open yet (the path broke after the config check)."""
    link = tmp_path / "recordings"
    os.symlink(tmp_path / "gone", link)
    w = RotatingWriter(link, max_bytes=1 << 20, file_bytes=1 << 19, chunk_bytes=4096, chunk_max_s=60.0)
    with caplog.at_level(logging.ERROR, logger="agent.recorder"):
        assert w.write("/drive", 1_796_000_000.0, channels.encode({"i": 0})) is False
    w.close()
    [line] = [r.getMessage() for r in caplog.records if "recording stopped" in r.getMessage()]
    assert "File exists" in line and "no file was open" in line and "None" not in line, line
