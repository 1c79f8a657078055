"""llama.cpp itself runs the GGUF that `vocabshift gguf` writes of real models extended with Russian.

llama-cpp-python is built from the source distribution whose converter `export_gguf` runs (the `llama` extra, part
of `dev`). SmolLM2-135M-Instruct (byte-level BPE) and Gemma-3-270M (SentencePiece-style
BPE with byte fallback and no tokenizer.model, so llama.cpp's hash path) get a 16k Russian tokenizer trained on the
shared corpus but its held-out lines, as `make demo` makes one. llama.cpp must cut 1,000 of those lines, and 1,000
English ones, into exactly the ids transformers gives, and its greedy continuations from the f32 GGUF must be
transformers' own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from vocabshift.cli import main
from vocabshift.export import LLAMA_CPP_PYTHON
from vocabshift_testing.corpora import gemma3, held_out_split, read_corpus, smollm2, target_tokenizer

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python cannot be imported: pip install 'vocabshift[llama]' (make test's venv "
    "installs it with the dev extra)")

pytestmark = pytest.mark.integration

HELD_OUT = 1000
NEW_TOKENS = 32
PROMPTS = (
    "Чтобы установить пакет в Debian, выполните команду",
    "Чтобы вставить таблицу в текстовый документ, выберите",
    "Команда ls выводит список файлов",
    "Москва — столица России, а Санкт-Петербург",
    "Жили-были старик со старухой. Однажды старик",
)


def held_out(language: str) -> list[str]:
    """The corpus lines `target_tokenizer(..., held_out=HELD_OUT)` was not trained on."""
    return held_out_split(read_corpus(language), HELD_OUT)[1]


def extended(model_dir: Path, folder: Path):
    """The real model at `model_dir` in float32, extended with a Russian tokenizer (subword, as `make demo` does)
    and saved into `folder`; returns the model and its tokenizer."""
    source = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    russian = target_tokenizer(source, "ru", vocab_size=16000, held_out=HELD_OUT)
    tokenizer = model.extend_vocabulary(russian, method="subword", source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, folder)
    return model, tokenizer


@pytest.fixture(scope="module")
def smollm2_ru(tmp_path_factory):
    """SmolLM2 + Russian, converted by the CLI to an f32 GGUF: (model, tokenizer, gguf path)."""
    root = tmp_path_factory.mktemp("smollm2-ru")
    model, tokenizer = extended(smollm2(), root / "smollm2-ru")
    gguf = root / "smollm2-ru-f32.gguf"
    assert main(["gguf", str(root / "smollm2-ru"), str(gguf), "--outtype", "f32"]) == 0
    return model, tokenizer, gguf


def mismatches(llama, tokenizer, lines: list[str]) -> list[tuple[int, str, list[int], list[int]]]:
    """(index, line, transformers' ids, llama.cpp's ids) of every line the two cut differently."""
    expected = tokenizer(lines, add_special_tokens=False)["input_ids"]
    found = [llama.tokenize(line.encode("utf-8"), add_bos=False, special=False) for line in lines]
    return [(i, lines[i], ids, found[i]) for i, ids in enumerate(expected) if found[i] != ids]


def describe(wrong: list[tuple[int, str, list[int], list[int]]], tokenizer, total: int) -> str:
    """The first mismatching lines, each from the first token where the two differ."""
    report = [f"{len(wrong)} of {total} lines tokenize differently in llama.cpp:"]
    for index, line, expected, found in wrong[:5]:
        at = next((k for k, (a, b) in enumerate(zip(expected, found)) if a != b), min(len(expected), len(found)))
        report.append(f"line {index}: {line!r}\n  transformers from token {at}: "
                      f"{tokenizer.convert_ids_to_tokens(expected[at:at + 6])}\n  llama.cpp from token {at}: "
                      f"{tokenizer.convert_ids_to_tokens(found[at:at + 6])}")
    return "\n".join(report)


def check_tokenization(gguf: Path, tokenizer, name: str) -> None:
    llama = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    for language in ("ru", "en"):
        lines = held_out(language)
        wrong = mismatches(llama, tokenizer, lines)
        print(f"\n{name}, {language}: {len(wrong)} of {len(lines)} held-out lines tokenize differently in llama.cpp")
        assert not wrong, describe(wrong, tokenizer, len(lines))


def test_llama_cpp_is_the_converters_release():
    assert llama_cpp.__version__ == LLAMA_CPP_PYTHON


def test_smollm2_tokenizes_as_transformers(smollm2_ru):
    _, tokenizer, gguf = smollm2_ru
    check_tokenization(gguf, tokenizer, "SmolLM2-135M-Instruct + Russian")


def llama_cpp_greedy(gguf: Path, prompts: list[list[int]], eos: int) -> list[list[int]]:
    """Greedy continuations in llama.cpp, up to NEW_TOKENS each, ending after `eos` as transformers' do. The KV
    cache is f32 (its default is f16, which rounds the keys and values transformers keeps in f32)."""
    llama = llama_cpp.Llama(model_path=str(gguf), n_ctx=128, n_threads=1, n_threads_batch=1, seed=1234, verbose=False,
                            type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    continuations = []
    for prompt in prompts:
        llama.reset()
        tokens = []
        for token in llama.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            tokens.append(token)
            if token == eos or len(tokens) == NEW_TOKENS:
                break
        continuations.append(tokens)
    return continuations


def transformers_greedy(model, prompts: list[list[int]], eos: int) -> list[list[int]]:
    continuations = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            output = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos)
        continuations.append(output[0, len(prompt):].tolist())
    return continuations


def test_smollm2_greedy_generation_matches_transformers(smollm2_ru):
    """Right after extend_vocabulary some steps are exact ties: `subword` gives a new token made of one old token
    repeated (ее = е + е) that token's row, so both logits are equal, and both runtimes take the lower id."""
    model, tokenizer, gguf = smollm2_ru
    prompts = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in PROMPTS]
    assert all(max(prompt) >= vocabshift.get_record(model).old_vocab_size for prompt in prompts)  # new rows read
    expected = transformers_greedy(model, prompts, tokenizer.eos_token_id)
    found = llama_cpp_greedy(gguf, prompts, tokenizer.eos_token_id)
    for prompt, want, got in zip(PROMPTS, expected, found):
        print(f"\n{prompt} | {tokenizer.decode(want)!r}" + ("" if got == want else f"\n  llama.cpp: {got}"))
    assert found == expected
    assert sum(len(tokens) for tokens in found) > 2 * NEW_TOKENS  # not all cut short by end of sequence


def test_gemma3_tokenizes_as_transformers(tmp_path):
    """Gemma-3's folder has no tokenizer.model: llama.cpp's BPE path, its pre-tokenizer named from the original
    tokenizer. llama.cpp knows Gemma-3's by the name of a Granite embedding model that uses the same tokenizer, and
    runs it as Gemma-4's: BPE on raw UTF-8, split at newlines only."""
    _, tokenizer = extended(gemma3(), tmp_path / "gemma3-ru")
    gguf = vocabshift.export_gguf(tmp_path / "gemma3-ru", tmp_path / "gemma3-ru.gguf", vocab_only=True)
    fields = GGUFReader(gguf).fields
    names = [fields[f"tokenizer.ggml.{key}"].contents() for key in ("model", "pre")]
    assert names == ["gpt2", "granite-embed-multi-311m"]
    check_tokenization(gguf, tokenizer, "Gemma-3-270M + Russian")


def test_llama2_without_tokenizer_model_tokenizes_as_transformers(tmp_path):
    """A Llama-2 folder with tokenizer.json alone (replace mode writes no tokenizer.model): the converter reads it
    with `LlamaHfVocab`, which scored every token -1000, and llama.cpp cut 859 of 1,000 Russian lines otherwise.
    Tiny model of the real Llama-2 tokenizer, its vocabulary replaced by a Russian one trained like it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from vocabshift_testing.real_tokenizers import real_tokenizer_dir

    source = AutoTokenizer.from_pretrained(real_tokenizer_dir("llama2"))
    config = LlamaConfig(vocab_size=len(source), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    russian = vocabshift.train_tokenizer(read_corpus("ru")[:3000], like=source, vocab_size=4000)
    tokenizer = model.extend_vocabulary(russian, mode="replace", method="mean", source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "llama2-ru")
    assert not (tmp_path / "llama2-ru" / "tokenizer.model").exists()
    gguf = vocabshift.export_gguf(tmp_path / "llama2-ru", tmp_path / "llama2-ru.gguf", vocab_only=True,
                                  source_tokenizer=real_tokenizer_dir("llama2"))
    check_tokenization(gguf, tokenizer, "Llama-2 tokenizer, replaced by Russian")


def test_llama3_extended_tokenizes_as_transformers(tmp_path):
    """Llama-3's tokenizer.json hashes as llama.cpp's smaug-bpe, which llama.cpp runs without ignore_merges: the new
    tokens that only ignore_merges reaches ('ĠMethoden', whose merge comes after 'ĠMethod') were never produced, and
    llama.cpp cut 349 of 1,000 Russian lines otherwise. Tiny model of the real Llama-3 tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from vocabshift_testing.real_tokenizers import real_tokenizer_dir

    source = AutoTokenizer.from_pretrained(real_tokenizer_dir("llama3"))
    config = LlamaConfig(vocab_size=len(source), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    russian = vocabshift.train_tokenizer(read_corpus("ru")[:3000], like=source, vocab_size=4000)
    tokenizer = model.extend_vocabulary(russian, method="mean", source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "llama3-ru")
    gguf = vocabshift.export_gguf(tmp_path / "llama3-ru", tmp_path / "llama3-ru.gguf", vocab_only=True)
    check_tokenization(gguf, tokenizer, "Llama-3 tokenizer, extended with Russian")
