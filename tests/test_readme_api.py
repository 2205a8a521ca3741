"""The README's "Python API" section: its first ```python block runs as written (issue 16)."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_api_block_runs(tmp_path):
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "no python block in the README's Python API section"
    script = tmp_path / "readme_api.py"
    script.write_text(block.group(1))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"trip 1: \d+\.\d\d km, \d+ ± \d+ Wh", proc.stdout), proc.stdout
    assert "'observed_wh'" in proc.stdout
