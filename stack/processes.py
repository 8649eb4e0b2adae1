"""Child processes the stack, tests and benchmarks start: their process tree, and a clean stop."""
from __future__ import annotations

import subprocess
from pathlib import Path


def process_tree(pid: int) -> list[int]:
    """`pid` and its direct children (a master and its workers), from /proc."""
    return [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]


def stop(process: subprocess.Popen | None, grace: float) -> None:
    """SIGTERM (gunicorn's and nginx's graceful/fast stop), then SIGKILL after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
