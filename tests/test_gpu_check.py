"""scripts/check_gpu.sh --dry-run: the GPU check on the CPU with tiny model bodies, so that it cannot rot unseen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT


@pytest.mark.slow
def test_the_gpu_check_runs_on_the_cpu():
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "check_gpu.sh"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    report = done.stdout
    assert report.count("| cross-entropy | ") == report.count("| distillation | ") == 4  # 2 models, plain and FSDP
    assert "## One device: cpu" in report and "## FSDP2 through the Trainer: cpu" in report
    assert "FAILED" not in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="here the check would run")
def test_the_gpu_check_refuses_to_run_without_a_gpu_unless_told():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "check_gpu.sh")], env={**os.environ,
                          "PYTHON": sys.executable}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--dry-run" in done.stderr
