"""Atomic saves: a save killed or failing midway leaves the previous output intact."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import vocabshift
from conftest import ROOT, kill_once_written, make_model
from vocabshift import atomic
from vocabshift.errors import InvalidArgumentError, InvalidArgumentTypeError, ModelFolderError

TINY = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


def tiny(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY)).eval()


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name != folder.name)


# The child saves another model; its tokenizer save stalls after the model shards are written, then it is killed.
CHILD_SAVE = f"""
import sys, time, torch, vocabshift
from transformers import LlamaConfig, LlamaForCausalLM
class StallingTokenizer:
    def save_pretrained(self, folder):
        open(sys.argv[2], "w").write(str(folder))
        time.sleep(120)
torch.manual_seed(1)
model = LlamaForCausalLM(LlamaConfig(**{TINY}))
vocabshift.save_pretrained_atomic(model, StallingTokenizer(), sys.argv[1], max_shard_size="20KB")
"""


def test_a_save_killed_midway_leaves_the_previous_output(tmp_path):
    folder = tmp_path / "out"
    vocabshift.save_pretrained_atomic(tiny(0), None, folder, max_shard_size="20KB")
    before = digest(folder)
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD_SAVE, str(folder), str(marker)], env=env)
    temporary = kill_once_written(child, marker)
    assert temporary.parent == tmp_path and any(temporary.glob("model-*.safetensors"))  # killed mid-write
    assert digest(folder) == before
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(reloaded(torch.tensor([[1, 2, 3]])).logits, tiny(0)(torch.tensor([[1, 2, 3]])).logits)
    assert temporary.exists()  # left by the killed process ...
    vocabshift.save_pretrained_atomic(tiny(2), None, folder)
    assert siblings(folder) == ["marker"]  # ... and removed by the next save
    assert digest(folder) != before


def test_a_failing_save_leaves_the_previous_output(tmp_path):
    folder = tmp_path / "out"
    vocabshift.save_pretrained_atomic(tiny(0), None, folder)
    before = digest(folder)

    class BrokenTokenizer:
        def save_pretrained(self, folder):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        vocabshift.save_pretrained_atomic(tiny(1), BrokenTokenizer(), folder)
    assert digest(folder) == before and siblings(folder) == []


def test_replacing_without_an_atomic_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda first, second: False)
    folder = tmp_path / "out"
    vocabshift.save_pretrained_atomic(tiny(0), None, folder)
    vocabshift.save_pretrained_atomic(tiny(1), None, folder)
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(reloaded.model.embed_tokens.weight, tiny(1).model.embed_tokens.weight)
    assert siblings(folder) == []


def test_an_output_that_is_a_symbolic_link_is_written_where_it_points(tmp_path):
    """As save_pretrained writes through a link, so do atomic outputs; the link stays (swapping the link itself
    failed in rmtree and replaced the user's link by a folder)."""
    vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "real")
    (tmp_path / "link").symlink_to("real")
    vocabshift.save_pretrained_atomic(tiny(1), None, tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "real")
    assert torch.equal(reloaded.model.embed_tokens.weight, tiny(1).model.embed_tokens.weight)
    (tmp_path / "card.md").symlink_to("nowhere.md")  # a dangling link: written where it points
    atomic.atomic_write_text(tmp_path / "card.md", "text")
    assert (tmp_path / "card.md").is_symlink() and (tmp_path / "nowhere.md").read_text() == "text"


def test_a_kill_between_the_two_renames_is_repaired(tmp_path):
    """Without an atomic exchange the old folder is moved aside first; if the process dies right then, the next
    call for that folder moves it back before anything else."""
    folder = tmp_path / "out"
    vocabshift.save_pretrained_atomic(tiny(0), None, folder)
    before = digest(folder)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    aside = tmp_path / f".out.vocabshift-old-{int(dead.stdout)}-abc"
    aside.mkdir()
    os.rename(folder, aside / "out")
    with pytest.raises(RuntimeError, match="stop"):
        with atomic.atomic_folder(folder):
            raise RuntimeError("stop")
    assert digest(folder) == before and siblings(folder) == []


def test_refuses_to_replace_what_is_not_a_model_folder(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(ModelFolderError, match="holds no saved model"):
        vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "notes")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelFolderError, match="is a file"):
        vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "file")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"


def test_refuses_to_replace_a_model_folder_that_holds_more(tmp_path):
    """A Trainer's output_dir (the model saved beside its checkpoints) is no folder to replace as a whole."""
    vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "run")
    (tmp_path / "run" / "checkpoint-500").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text("{}")
    weights = (tmp_path / "run" / "model.safetensors").read_bytes()
    with pytest.raises(ModelFolderError, match=r"run' holds 'checkpoint-500/', 'trainer_state.json', which a saved "
                                               "model does not have"):
        vocabshift.save_pretrained_atomic(tiny(1), None, tmp_path / "run")
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == weights
    assert (tmp_path / "run" / "checkpoint-500").is_dir()


def test_refuses_the_current_folder(tmp_path, monkeypatch):
    """The swap would leave the shell in a deleted folder; "." also has no name to build a sibling's from."""
    monkeypatch.chdir(tmp_path)
    for folder in (".", tmp_path, tmp_path.parent):
        with pytest.raises(ModelFolderError, match="is the current folder or holds it"):
            vocabshift.save_pretrained_atomic(tiny(0), None, folder)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("arguments", "error", "match"), [
    ({"max_shard_size": "lots"}, InvalidArgumentError, "max_shard_size='lots' is not a shard size: pass a positive"),
    ({"max_shard_size": "0GB"}, InvalidArgumentError, "max_shard_size='0GB' is not a shard size"),
    ({"max_shard_size": "2GiB"}, InvalidArgumentError, "max_shard_size='2GiB' is not a shard size"),
    ({"max_shard_size": -5}, InvalidArgumentError, "max_shard_size=-5 is not a shard size"),
    ({"max_shard_size": 2.5}, InvalidArgumentTypeError, "max_shard_size=2.5 is not a shard size"),
    ({"model": None}, InvalidArgumentTypeError, "model is a NoneType, which has no save_pretrained"),
    ({"tokenizer": "ru-tokenizer/"}, InvalidArgumentTypeError, "tokenizer is a str, which has no save_pretrained"),
    ({"folder": 7}, InvalidArgumentTypeError, "folder=7 is a int: pass a path"),
    ({"folder": ""}, InvalidArgumentError, "folder is an empty path"),
])
def test_bad_arguments_are_refused_before_anything_is_written(tmp_path, arguments, error, match):
    options = {"model": tiny(0), "tokenizer": None, "folder": tmp_path / "out", **arguments}
    with pytest.raises(error, match=match):
        vocabshift.save_pretrained_atomic(options.pop("model"), options.pop("tokenizer"), options.pop("folder"),
                                          **options)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_this_user_may_not_write_in_is_refused_before_any_work(tmp_path, monkeypatch):
    """The permission as the OS reports it (patched: root may write anywhere, and tests may run as root)."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: real(path, mode) and Path(path) != locked)
    with pytest.raises(InvalidArgumentError, match=f"folder='{locked}/new/model' cannot be written: this user may "
                                                   f"not write in '{locked}'"):
        vocabshift.save_pretrained_atomic(tiny(0), None, locked / "new" / "model")
    assert list(locked.iterdir()) == []


def test_a_write_protected_output_folder_is_refused(tmp_path, monkeypatch):
    """A previous output made read-only (chmod -R a-w) is kept: the swap succeeded, then deleting the previous
    output failed with a raw PermissionError, exit code 1 after the new output was in place, and the previous
    output left as a temporary sibling that no later save could remove."""
    vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "out")
    before, real = digest(tmp_path / "out"), os.access
    monkeypatch.setattr(os, "access", lambda path, mode: real(path, mode) and Path(path) != tmp_path / "out")
    with pytest.raises(ModelFolderError, match=f"'{tmp_path / 'out'}' is write-protected \\(this user may not "
                                               "write in .*\\), and vocabshift replaces output folders as a whole. "
                                               "Make it writable"):
        vocabshift.save_pretrained_atomic(tiny(1), None, tmp_path / "out")
    assert digest(tmp_path / "out") == before and siblings(tmp_path / "out") == []


def test_shard_sizes_as_huggingface_hub_reads_them(tmp_path):
    for size in ("20KB", "0.02 mb", 20_000):
        folder = vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / str(size), max_shard_size=size)
        assert len(list(folder.glob("*.safetensors"))) > 1


def test_the_original_model_folder_is_never_replaced(tmp_path, tokenizers_en, tokenizers_ru, ru_lines):
    """An extended model saved over the folder it was loaded from would destroy the original (the teacher, the base
    of propagation): refused, naming the record's source model; a folder of an extended model may be saved over."""
    source = tokenizers_en["bytelevel"]
    model = make_model("qwen2-tied", source)
    model.save_pretrained(tmp_path / "base")
    source.save_pretrained(tmp_path / "base")
    before = digest(tmp_path / "base")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match="base/. is the folder of the input source_model=.*base."):
        vocabshift.save_pretrained_atomic(model, tokenizer, f"{tmp_path / 'base'}/")
    assert digest(tmp_path / "base") == before and siblings(tmp_path / "base") == []
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "ru")
    vocabshift.save_pretrained_atomic(AutoModelForCausalLM.from_pretrained(tmp_path / "ru"), tokenizer, tmp_path / "ru")
    (tmp_path / "ru.txt").write_text("\n".join(ru_lines[:50]), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "vocabshift", "train", str(tmp_path / "ru"), str(tmp_path / "ru.txt"),
                           str(tmp_path / "base"), "--objective", "next_token"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=300)
    assert done.returncode == 1 and "is the folder of the input source_model=" in done.stderr, done.stderr
    assert digest(tmp_path / "base") == before


def test_a_model_extended_in_memory_saves_under_the_working_folder(tmp_path, monkeypatch, tokenizers_en,
                                                                   tokenizers_ru):
    """A model built in memory has no source folder (its record's source_model is ''), which names no path."""
    source = tokenizers_en["bytelevel"]
    model = make_model("qwen2-tied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source)
    monkeypatch.chdir(tmp_path)
    assert vocabshift.get_record(model).source_model == ""
    vocabshift.save_pretrained_atomic(model, tokenizer, "out/ru")
    assert (tmp_path / "out" / "ru" / "config.json").is_file()


# The child runs `vocabshift extend`, whose tokenizer save stalls after the model is written into the temporary
# sibling; it is stopped there with SIGTERM, as a scheduler's time limit or `docker stop` stops a job.
CHILD_CLI = """
import sys, time
import vocabshift.save as save
from vocabshift.cli import main
def stalling(tokenizer, folder, **options):
    open(sys.argv[1], "w").write(str(folder))
    time.sleep(120)
save.save_tokenizer = stalling
sys.exit(main(sys.argv[2:]))
"""


def test_the_cli_stopped_by_sigterm_leaves_nothing_behind(tmp_path, tokenizers_en, tokenizers_ru):
    source = tokenizers_en["bytelevel"]
    vocabshift.save_pretrained_atomic(make_model("qwen2-tied", source), source, tmp_path / "base")
    tokenizers_ru["bytelevel"].save_pretrained(tmp_path / "new")
    marker, out = tmp_path / "marker", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    child = subprocess.Popen([sys.executable, "-c", CHILD_CLI, str(marker), "extend", str(tmp_path / "base"),
                              str(tmp_path / "new"), str(out), "--method", "mean"], env=env, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), f"the child never reached the save (exit status {child.poll()})"
        assert Path(marker.read_text()).exists()  # the temporary sibling, holding the model's files
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 128 + signal.SIGTERM and "interrupted: nothing half-written is left" in err, err
    assert siblings(out) == ["base", "marker", "new"] and not out.exists()


def test_a_mount_point_as_output_is_refused_before_any_work(tmp_path, tokenizers_en, tokenizers_ru):
    """A container volume given as the output folder (docker run -v ...:/out, then OUT=/out): the rename into place
    failed after all the work with a raw "[Errno 16] Device or resource busy". Run in a mount namespace of its own
    (root, or a user namespace), skipped where none can be made."""
    out = tmp_path / "volume"
    out.mkdir()
    if subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs '{out}'"],
                      capture_output=True).returncode != 0:
        pytest.skip("no mount namespace here (unshare --mount needs root or user namespaces)")
    source = tokenizers_en["bytelevel"]
    vocabshift.save_pretrained_atomic(make_model("qwen2-tied", source), source, tmp_path / "base")
    tokenizers_ru["bytelevel"].save_pretrained(tmp_path / "new")
    command = (f"mount -t tmpfs tmpfs '{out}' && exec '{sys.executable}' -m vocabshift extend '{tmp_path / 'base'}' "
               f"'{tmp_path / 'new'}' '{out}' --method mean")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(["unshare", "--mount", "sh", "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"output_dir='{out}' is a mount point (a container volume, a mounted disk)" in done.stderr, done.stderr
    assert siblings(out) == ["base", "new"] and os.listdir(out) == []


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    """Each writer (process, or call) writes its own temporary sibling: two writers of probe.md once renamed the
    same `.probe.md.partial`, and the second rename failed (FileNotFoundError)."""
    target = tmp_path / "probe.md"
    with vocabshift.atomic.atomic_file(target) as first, vocabshift.atomic.atomic_file(target) as second:
        assert first != second and first.parent == second.parent == tmp_path
        first.write_text("one")
        second.write_text("two")
    assert target.read_text() == "one" and sorted(p.name for p in tmp_path.iterdir()) == ["probe.md"]


def test_a_temporary_file_of_a_killed_process_goes_with_the_next_write(tmp_path):
    target = tmp_path / "model.gguf"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".model.gguf.vocabshift-part-{int(gone.stdout)}-0a1b2c3d"
    alive = tmp_path / f".model.gguf.vocabshift-part-{os.getppid()}-0a1b2c3d"  # another process's write in progress
    dead.write_bytes(b"half a file")
    alive.write_bytes(b"being written")
    vocabshift.atomic.atomic_write_text(target, "done")
    assert target.read_text() == "done" and not dead.exists() and alive.exists()


def test_the_output_folder_has_the_permissions_the_umask_gives(tmp_path):
    """As config.json: a colleague, or a container or server running as another user, can read the model
    (`tempfile.mkdtemp` made the output folder private to its owner, and safetensors 0.8 writes its files so)."""
    previous = os.umask(0o022)
    try:
        folder = vocabshift.save_pretrained_atomic(tiny(0), None, tmp_path / "out")
        vocabshift.save_pretrained_atomic(tiny(1), None, folder)  # replaced, through the aside folder or exchange
    finally:
        os.umask(previous)
    assert folder.stat().st_mode & 0o777 == 0o755
    assert {path.stat().st_mode & 0o777 for path in folder.iterdir()} == {0o644}


@pytest.mark.parametrize("name", ["м" * 120, "run[1]*"])  # 240 bytes (siblings' names would pass 255), glob syntax
def test_long_and_glob_names_get_their_siblings(tmp_path, name):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = tmp_path / name
    leftover = atomic._sibling(folder, "tmp").with_name(atomic._prefix(folder, "tmp") + f"{int(dead.stdout)}-abc")
    leftover.mkdir()  # a killed save's
    vocabshift.save_pretrained_atomic(tiny(0), None, folder)
    vocabshift.save_pretrained_atomic(tiny(1), None, folder)
    assert (folder / "model.safetensors").is_file() and siblings(folder) == []
