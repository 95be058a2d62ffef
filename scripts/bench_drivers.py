#!/usr/bin/env python3
"""Issue-3 driver benchmark in one run: motor command write time per controller against the
physical floor (bytes x 10 / baud), I2C sensor read rate achieved, and camera capture-to-latest
frame age. Runs scripts/bench_motor.py, scripts/bench_i2c.py and scripts/bench_camera.py in turn
and prints their figures; extra arguments are ignored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    status = 0
    for name in ("bench_motor.py", "bench_i2c.py", "bench_camera.py"):
        print(f"===== {name} =====", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / name)], cwd=HERE.parent)
    return status


if __name__ == "__main__":
    sys.exit(main())
