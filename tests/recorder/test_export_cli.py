"""`robot-agent export` where a field engineer's first try goes wrong: an output path whose directory
does not exist printed a FileNotFoundError traceback (now: one line, exit 3, nothing written), and a
prefix several incident ids start with said "no incident" (now: how many and which)."""

from __future__ import annotations

from agent.__main__ import main
from agent.recorder.incidents import IncidentLog, make


def test_export_to_a_missing_directory_says_so_in_one_line_and_exits_3(tmp_path, capsys):
    rec = tmp_path / "rec"
    rec.mkdir()
    IncidentLog(rec).append(make(1_796_000_000.0, "estop", "test", "cli"))
    out = tmp_path / "no" / "such" / "dir" / "e.mcap"
    assert main(["export", "2026", "-o", str(out), "--dir", str(rec)]) == 3
    text = capsys.readouterr().out
    assert text.strip() == f"cannot write {out}: No such file or directory", text
    assert not (tmp_path / "no").exists()
    fine = tmp_path / "e.mcap"
    assert main(["export", "2026", "-o", str(fine), "--dir", str(rec)]) == 0      # the same, writable: done
    assert fine.stat().st_size > 0


def test_export_of_a_prefix_several_ids_start_with_names_them(tmp_path, capsys):
    rec = tmp_path / "rec"
    rec.mkdir()
    log = IncidentLog(rec)
    log.append(make(1_796_000_000.0, "estop", "first", "cli"))
    log.append(make(1_796_000_060.0, "stop", "second", "artex"))
    first, second = (i.id for i in log.read())
    assert main(["export", "20", "--dir", str(rec), "-o", str(tmp_path / "e.mcap")]) == 1
    text = capsys.readouterr().out
    assert f"2 incidents in {rec} start with '20' ({first} ... {second}): give more of the id" in text, text
    assert not (tmp_path / "e.mcap").exists()
    assert main(["export", "nope", "--dir", str(rec)]) == 1
    assert "no incident 'nope'" in capsys.readouterr().out
