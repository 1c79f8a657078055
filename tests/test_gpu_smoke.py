"""scripts/gpu_smoke.py, which scripts/check_gpu.sh runs on a GPU, runs on the CPU too: so it cannot rot unseen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.integration


def test_gpu_smoke_runs_on_the_cpu(smollm2_dir):
    command = [sys.executable, str(ROOT / "scripts" / "gpu_smoke.py"), "--device", "cpu", "--steps", "2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cpu: held-out bits per byte" in done.stdout and "FAILED" not in done.stderr
