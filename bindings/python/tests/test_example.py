import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "seed_story.py"


def test_seed_story_runs_without_jax():
    out = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "writeable=False" in out.stdout
    assert out.stdout.count("step ") == 3
