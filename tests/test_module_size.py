"""Every module of agent/ and drivers/ holds at most 400 lines (docs/architecture.md, "Layers"):
past that, a module holds more than one thing and is split by what it holds."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def test_no_module_of_the_agent_or_the_drivers_is_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for package in ("agent", "drivers") for p in sorted((ROOT / package).rglob("*.py"))}
    assert len(sizes) > 100                     # the walk found the packages
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by what they hold): {over}"
