"""What README.md and docs/ show runs: every Python block (on tiny models), every `vocabshift` command line (parsed),
and the demo in examples/ (on a tiny model).

A page's Python blocks run in order, in one namespace, in a working folder holding `ru.txt`, `en.txt` and
`held-out.txt`, with a `LoopbackHub` serving tiny models under the Hub ids the blocks name (`tiny_models`): the
blocks run as written, but for `FAST`, which shortens a long training run. On the pages that convert to GGUF and run
llama.cpp (`GGUF_PAGES`), SmolLM2's stand-ins carry SmolLM2's own tokenizer, and the cache holds llama.cpp's converter.
A block that cannot run here starts with `OPT_OUT` and says why; `OPTED_OUT` counts them, so that a new one is a
decision.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from conftest import ROOT, make_model, make_tokenizer, read_lines, realistic_embeddings_
from vocabshift.cli import build_parser
from vocabshift.export.llama_cpp import converter_dir
from vocabshift_testing import LoopbackHub
from vocabshift_testing.corpora import smollm2

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OPT_OUT = "# docs: not run:"
OPTED_OUT: dict[str, int] = {}  # page -> blocks that start with OPT_OUT (each says why)
# the one edit made to the blocks: a long run shortened (each key must occur in a block)
FAST = {"max_steps=1000": "max_steps=10"}
RUSSIAN_LINES, HELD_OUT_LINES, ENGLISH_LINES = 1500, 40, 300
TORCHRUN = {"docs/backends.md"}  # pages whose script is for torchrun: here they run as its one process
# Pages that convert to GGUF and run llama.cpp. llama.cpp refuses a byte-level BPE tokenizer it does not know, so their
# SmolLM2 stand-ins carry SmolLM2's own; the other pages keep a 1,000-token one, as its 49,152 rows make every training
# step about 14 times as slow (with it on every page the docs test ran 5 times as long).
GGUF_PAGES = {"docs/elsewhere.md"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first code line, counted from 0
    language: str
    code: str


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page (fences at the start of a line; indented fences are refused)."""
    text = page.read_text(encoding="utf-8")
    indented = re.search(r"^[ \t]+```", text, re.MULTILINE)
    assert indented is None, f"{page}: an indented fence (line {text[: indented.start()].count(chr(10)) + 1}) " \
                             "would not be tested: start fences at the beginning of a line"
    return [Block(page, text[: match.start(2)].count("\n"), match[1], match[2]) for match in FENCE.finditer(text)]


def python_blocks(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.language == "python"]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


# The tiny world: models on a loopback Hub, text files in the working folder


def _tiny_llama(tokenizer) -> LlamaForCausalLM:
    """SmolLM2's shape in miniature: Llama, tied embeddings, its tokenizer's special ids in the config."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=True, hidden_size=64,
                                         intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2))
    realistic_embeddings_(model)
    for name in ("bos", "eos", "pad"):  # in the generation config too, as in SmolLM2's (else the Trainer warns)
        for config in (model.config, model.generation_config):
            setattr(config, f"{name}_token_id", tokenizer.convert_tokens_to_ids(getattr(tokenizer, f"{name}_token")))
    return model.eval()


def _fine_tuned(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """An instruct sibling: every weight moved a little, as a fine-tune does."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * parameter.std() * torch.randn(parameter.shape, generator=generator))
    return model


def _smollm2_models(tokenizer) -> dict[str, tuple[LlamaForCausalLM, object]]:
    """SmolLM2-135M and its instruct sibling, on `tokenizer`."""
    return {"HuggingFaceTB/SmolLM2-135M": (_tiny_llama(tokenizer), tokenizer),
            "HuggingFaceTB/SmolLM2-135M-Instruct": (_fine_tuned(_tiny_llama(tokenizer)), tokenizer)}


def _saved(root: Path, models: dict[str, tuple[torch.nn.Module, object]]) -> dict[str, Path]:
    """Each (model, tokenizer) saved in a folder of `root`; the folders by Hub id."""
    folders = {}
    for repo_id, (model, tokenizer) in models.items():
        folders[repo_id] = root / repo_id.replace("/", "--")
        model.save_pretrained(folders[repo_id])
        tokenizer.save_pretrained(folders[repo_id])
    return folders


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Folders of the tiny models the docs name, by Hub id."""
    english = make_tokenizer("bytelevel", read_lines("en", 3000), 1000)
    russian = make_tokenizer("bytelevel", read_lines("ru", 3000), 1500)
    models = {**_smollm2_models(english), "your-org/russian-lm": (make_model("qwen2-tied", russian), russian)}
    return _saved(tmp_path_factory.mktemp("docs-models"), models)


@contextlib.contextmanager
def _serving(folders: dict[str, Path]) -> Iterator[LoopbackHub]:
    """A LoopbackHub, active while the `with` block runs, holding each folder under its Hub id."""
    with LoopbackHub() as hub:
        api = HfApi()
        for repo_id, folder in folders.items():
            api.create_repo(repo_id)
            api.upload_folder(folder_path=folder, repo_id=repo_id)
        yield hub


@pytest.fixture(scope="module")
def tiny_hub(tiny_models):
    with _serving(tiny_models) as hub:
        yield hub


@pytest.fixture
def hub(page, request, tiny_models, tmp_path_factory):
    """The LoopbackHub the page reads: on GGUF_PAGES one of its own (for the page only), whose SmolLM2 stand-ins
    carry SmolLM2's own tokenizer (49,152 tokens)."""
    if _name(page) not in GGUF_PAGES:
        yield request.getfixturevalue("tiny_hub")
        return
    tokenizer = AutoTokenizer.from_pretrained(smollm2())
    smollm2_models = _saved(tmp_path_factory.mktemp("docs-models-smollm2"), _smollm2_models(tokenizer))
    with _serving({**tiny_models, **smollm2_models}) as hub:  # over tiny_hub (if active) for this page only
        yield hub


@pytest.fixture
def workdir(page, hub, tmp_path, monkeypatch, tmp_path_factory) -> Path:
    """A working folder with the text files the blocks read; caches kept out of the home folder (after `hub`, which
    reads SmolLM2 from the user's cache), but on GGUF_PAGES for a link to llama.cpp's converter, from the user's
    cache (downloaded there once, as SmolLM2 is)."""
    converter = converter_dir() if _name(page) in GGUF_PAGES else None
    texts = {"ru.txt": read_lines("ru", RUSSIAN_LINES),
             "held-out.txt": read_lines("ru", HELD_OUT_LINES, skip=RUSSIAN_LINES),
             "en.txt": read_lines("en", ENGLISH_LINES, skip=3000)}
    for name, lines in texts.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    cache = tmp_path_factory.getbasetemp() / "docs-cache"
    monkeypatch.setenv("VOCABSHIFT_CACHE", str(cache))
    if converter is not None and not (cache / converter.name).exists():
        cache.mkdir(exist_ok=True)
        (cache / converter.name).symlink_to(converter, target_is_directory=True)
    return tmp_path


def fast(code: str) -> str:
    for slow, quick in FAST.items():
        code = code.replace(slow, quick)
    return code


# The tests


def _torchrun_environment(monkeypatch) -> None:
    """What torchrun gives a process, for a world of one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "LOCAL_RANK": "0",
                        "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("page", [page for page in PAGES if python_blocks(page)], ids=_name)
def test_python_blocks_run(page, hub, workdir, monkeypatch):
    if _name(page) in TORCHRUN:
        _torchrun_environment(monkeypatch)
    namespace: dict = {"__name__": f"docs:{_name(page)}"}
    skipped = 0
    for block in python_blocks(page):
        if block.code.startswith(OPT_OUT):
            skipped += 1
            continue
        # padded so that a traceback names the page's own line numbers
        exec(compile("\n" * block.line + fast(block.code), str(page), "exec"), namespace)
    assert skipped == OPTED_OUT.get(_name(page), 0), f"{_name(page)}: {skipped} blocks opt out with {OPT_OUT!r}"


def test_opt_outs_say_why():
    for page in PAGES:
        for block in python_blocks(page):
            first = block.code.splitlines()[0]
            if first.startswith(OPT_OUT):
                assert len(first) > len(OPT_OUT) + 10, f"{_name(page)}:{block.line}: say why the block does not run"
    assert set(OPTED_OUT) <= {_name(page) for page in PAGES}


def test_gguf_pages_are_pages_with_python_blocks():
    assert GGUF_PAGES <= {_name(page) for page in PAGES if python_blocks(page)}


def test_fast_replacements_are_used():
    code = "\n".join(block.code for page in PAGES for block in python_blocks(page))
    assert [slow for slow in FAST if slow not in code] == [], "FAST names steps no block has: remove them"


def command_lines(block: Block) -> list[list[str]]:
    """The `vocabshift ...` commands of a shell block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block.code)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.startswith("vocabshift ")]


@pytest.mark.parametrize("page", [page for page in PAGES if any(b.language == "bash" for b in blocks(page))],
                         ids=_name)
def test_command_lines_parse(page, capsys):
    parser = build_parser()
    commands = [argv for block in blocks(page) if block.language == "bash" for argv in command_lines(block)]
    for argv in commands:
        try:
            parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"{_name(page)}: `{shlex.join(argv)}` does not parse: {capsys.readouterr().err}")


def test_every_code_block_is_tested_or_a_listing():
    """Code blocks are python (run), bash (commands parsed) or text (listings, signatures); nothing else hides."""
    languages = {block.language for page in PAGES for block in blocks(page)}
    assert languages <= {"python", "bash", "text"}, languages


def test_demo_runs_on_a_tiny_model(tiny_models, tmp_path):
    """The demo end to end, as a user runs it (a process of its own, Python's default warning filters): a log line
    every 10 steps, and with huggingface_hub's progress bars switched off nothing on stderr but the card's note that a
    local model folder names no base model (`make demo` names SmolLM2's repo id)."""
    output = tmp_path / "demo-out"
    command = [sys.executable, str(ROOT / "examples" / "demo.py"), "--model",
               str(tiny_models["HuggingFaceTB/SmolLM2-135M-Instruct"]), "--steps", "20", "--vocab-size", "2000",
               "--output", str(output)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    assert "reloaded from the loopback Hub with identical logits" in printed
    assert "Russian bits per byte (held out)" in printed
    assert "\n| demo-out | original |" in printed  # the table names the saved folder, not its staging folder
    assert {"config.json", "tokenizer.json", "README.md", "cpt_loss.png"} <= {p.name for p in output.iterdir()}
    assert len([line for line in printed.splitlines() if line.startswith("{'loss'")]) == 2  # steps 10 and 20
    unexpected = [line for line in done.stderr.splitlines()
                  if line.strip() and not line.startswith("The model card has no base_model")]
    assert not unexpected, done.stderr
