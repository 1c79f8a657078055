"""vocabshift's progress bars are huggingface_hub's: `HF_HUB_DISABLE_PROGRESS_BARS=1` and
`huggingface_hub.utils.disable_progress_bars()` turn them off (logs redirected to a file stay readable), and they show
otherwise."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from huggingface_hub import constants
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

import vocabshift
from conftest import ROOT, make_model
from test_propagate import build_family

BAR = re.compile(r"\[\d+:\d\d")  # tqdm's elapsed time, in every bar it draws ("[00:00<?, ?it/s]")


@contextlib.contextmanager
def bars(shown: bool) -> Iterator[None]:
    """huggingface_hub's switch set for the block and restored after (skipped where the environment variable, which
    has priority, says otherwise)."""
    forced = constants.HF_HUB_DISABLE_PROGRESS_BARS
    if forced is not None and forced == shown:
        pytest.skip(f"HF_HUB_DISABLE_PROGRESS_BARS={int(forced)} is set: it has priority over the switch")
    was_disabled = are_progress_bars_disabled()
    enable_progress_bars() if shown else disable_progress_bars()
    try:
        yield
    finally:
        disable_progress_bars() if was_disabled else enable_progress_bars()


@pytest.fixture(scope="module")
def family(tmp_path_factory, tokenizers_en, tokenizers_ru):
    """base, instruct and adapted folders (tiny untied Llamas) for propagate."""
    return build_family(tmp_path_factory.mktemp("bars"), "llama-untied", tokenizers_en["sentencepiece"],
                        tokenizers_ru["sentencepiece"])


@pytest.mark.parametrize("shown", [False, True], ids=["disabled", "enabled"])
def test_extend_follows_the_switch(tokenizers_en, tokenizers_ru, capsys, shown):
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    with bars(shown):
        model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=tokenizers_en["sentencepiece"])
    drawn = capsys.readouterr().err
    assert bool(BAR.search(drawn)) is shown and ("Merging tokenizers" in drawn) is shown, drawn


@pytest.mark.parametrize("shown", [False, True], ids=["disabled", "enabled"])
def test_propagate_follows_the_switch(family, tmp_path, capsys, shown):
    with bars(shown):
        vocabshift.propagate(family["adapted"], family["base"], family["instruct"], output_dir=tmp_path / "out")
    drawn = capsys.readouterr().err
    assert bool(BAR.search(drawn)) is shown and ("Propagating rows" in drawn) is shown, drawn


@pytest.mark.parametrize("value", ["1", "0"])
def test_the_command_follows_the_environment_variable(family, tokenizers_ru, tmp_path, value):
    """`vocabshift extend` in a process of its own: HF_HUB_DISABLE_PROGRESS_BARS=1 leaves nothing on stderr that a
    bar drew (transformers' bars follow it too); =0 shows them."""
    tokenizers_ru["sentencepiece"].save_pretrained(tmp_path / "ru-tokenizer")
    done = subprocess.run([sys.executable, "-m", "vocabshift", "extend", str(family["base"]),
                           str(tmp_path / "ru-tokenizer"), str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_DISABLE_PROGRESS_BARS": value},
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert bool(BAR.search(done.stderr)) is (value == "0"), done.stderr


@pytest.mark.parametrize("shown", [False, True], ids=["disabled", "enabled"])
def test_word_vector_training_follows_the_switch(ru_lines, tmp_path, capfd, shown):
    """fastText's own progress (printed by its C++ code, in a process of its own) follows the switch too."""
    with bars(shown):
        vocabshift.train_word_vectors(ru_lines[:300], dim=8, epochs=1, min_count=2, cache_dir=tmp_path)
    drawn = capfd.readouterr().err
    assert bool(BAR.search(drawn)) is shown and ("Progress:" in drawn) is shown, drawn
