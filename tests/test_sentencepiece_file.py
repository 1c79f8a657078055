"""tokenizer.model in step with tokenizer.json: a real SentencePiece BPE model with byte fallback (as Llama-2,
Mistral and Gemma have), trained on English and extended with a Russian vocabulary, cuts held-out text exactly as
the saved fast tokenizer does; no folder vocabshift writes holds one that disagrees with its tokenizer.json."""

from __future__ import annotations

import io
import logging
import shutil
from pathlib import Path

import pytest
import sentencepiece
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaTokenizer
from transformers.tokenization_utils_base import generate_merges

import vocabshift
from conftest import make_model, read_lines
from vocabshift.vocab.spm_file import sentencepiece_mismatch

EN_TRAIN, RU_TRAIN, HELD = 3000, 3000, 1000


def held_out() -> list[str]:
    return read_lines("ru", HELD, skip=RU_TRAIN) + read_lines("en", HELD, skip=EN_TRAIN)


def from_model_file(path: Path) -> LlamaTokenizer:
    """What `LlamaTokenizer.from_pretrained` builds from a tokenizer.model alone: its pieces, and merges generated
    from them (transformers' own conversion reads the file with protobuf, which vocabshift does not need)."""
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    return LlamaTokenizer(vocab=vocab, merges=generate_merges(vocab))


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> Path:
    """A Llama-2-style tokenizer folder: a SentencePiece BPE model with byte fallback trained on English (Llama-2's
    trainer settings) and the tokenizer.json transformers converts from it; both files, as Hub repos have them."""
    folder = tmp_path_factory.mktemp("llama-tokenizer")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(read_lines("en", EN_TRAIN)), model_writer=model, model_type="bpe", vocab_size=1200,
        byte_fallback=True, split_digits=True, character_coverage=0.9995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, num_threads=1, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    from_model_file(folder / "tokenizer.model").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def russian(llama_folder):
    return vocabshift.train_tokenizer(read_lines("ru", RU_TRAIN), like=AutoTokenizer.from_pretrained(llama_folder),
                                      vocab_size=1500)


def extend_and_save(source, russian, folder: Path, **options) -> Path:
    model = make_model("llama-untied", AutoTokenizer.from_pretrained(source))
    tokenizer = model.extend_vocabulary(russian, source_tokenizer=source, method="mean", **options)
    return vocabshift.save_pretrained_atomic(model, tokenizer, folder)


def without_tokenizer_model(folder: Path, destination: Path) -> Path:
    shutil.copytree(folder, destination, ignore=shutil.ignore_patterns("tokenizer.model"))
    return destination


def test_the_source_files_agree(llama_folder):
    """The baseline: the trained model and the tokenizer.json transformers made of it cut text alike."""
    processor = sentencepiece.SentencePieceProcessor(model_file=str(llama_folder / "tokenizer.model"))
    fast = AutoTokenizer.from_pretrained(llama_folder)
    assert fast.vocab_file == str(llama_folder / "tokenizer.model")
    assert processor.encode(held_out()) == fast(held_out(), add_special_tokens=False)["input_ids"]


def test_extended_tokenizer_model_is_the_new_vocabulary(llama_folder, russian, tmp_path):
    folder = extend_and_save(llama_folder, russian, tmp_path / "extended")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    fast, old = AutoTokenizer.from_pretrained(folder), len(AutoTokenizer.from_pretrained(llama_folder))
    assert processor.get_piece_size() == len(fast) > old + 500
    assert [processor.id_to_piece(i) for i in range(len(fast))] == fast.convert_ids_to_tokens(list(range(len(fast))))
    lines = held_out()
    ids = processor.encode(lines)
    assert ids == fast(lines, add_special_tokens=False)["input_ids"]
    used = {i for line in ids for i in line}
    assert any(i >= old for i in used) and any(processor.is_byte(i) for i in used)  # new pieces and byte fallback
    assert processor.is_unknown(0) and processor.is_control(fast.bos_token_id) and processor.is_control(
        fast.eos_token_id)
    assert all(processor.is_byte(fast.convert_tokens_to_ids(f"<0x{b:02X}>")) for b in range(256))
    placeholders = {i for i in range(old, len(fast)) if fast.convert_ids_to_tokens(i).startswith("<|vocabshift_unused")}
    assert not any(processor.is_byte(i) or processor.is_control(i) or processor.is_unused(i)
                   for i in range(old, len(fast)) if i not in placeholders)
    assert all(processor.is_control(i) for i in placeholders)  # rows up to the multiple of 128: special tokens
    assert sentencepiece_mismatch(folder) is None


def test_transformers_conversion_of_the_file_cuts_as_its_tokenizer_json(llama_folder, russian, tmp_path):
    """transformers rebuilds a tokenizer from tokenizer.model alone (merges in the order of the pieces): same ids."""
    folder = extend_and_save(llama_folder, russian, tmp_path / "extended")
    lines = held_out()
    assert from_model_file(folder / "tokenizer.model")(lines, add_special_tokens=False)["input_ids"] == \
        AutoTokenizer.from_pretrained(folder)(lines, add_special_tokens=False)["input_ids"]


def test_no_tokenizer_model_from_a_source_without_one(llama_folder, russian, tmp_path):
    source = without_tokenizer_model(llama_folder, tmp_path / "plain")
    folder = extend_and_save(source, russian, tmp_path / "extended")
    assert getattr(AutoTokenizer.from_pretrained(folder), "vocab_file", None) is None
    assert not (folder / "tokenizer.model").exists()


def test_replace_mode_writes_none_and_says_why(llama_folder, russian, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        folder = extend_and_save(llama_folder, russian, tmp_path / "replaced", mode="replace")
    assert "none is written for the new vocabulary: in replace mode" in caplog.text
    assert not (folder / "tokenizer.model").exists()


def test_a_tokenizer_changed_after_extend_gets_none(llama_folder, russian, tmp_path, caplog):
    model = make_model("llama-untied", AutoTokenizer.from_pretrained(llama_folder))
    tokenizer = model.extend_vocabulary(russian, source_tokenizer=llama_folder, method="mean")
    tokenizer.add_tokens(["<extra>"])
    model.resize_token_embeddings(len(tokenizer))  # a row for it (without one, the save is refused)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "changed")
    assert "the tokenizer was changed after extend_vocabulary checked its tokenizer.model" in caplog.text
    assert f"{folder} holds no tokenizer.model" in caplog.text and ".vocabshift-tmp-" not in caplog.text
    assert not (folder / "tokenizer.model").exists()


def test_a_stale_tokenizer_model_that_save_pretrained_wrote_is_removed(llama_folder, russian, tmp_path, caplog):
    """transformers 4 (and slow tokenizers) copied the file a tokenizer was loaded with into every save."""
    model = make_model("llama-untied", AutoTokenizer.from_pretrained(llama_folder))
    tokenizer = model.extend_vocabulary(russian, source_tokenizer=without_tokenizer_model(llama_folder, tmp_path / "p"),
                                        method="mean")
    save = tokenizer.save_pretrained

    def save_with_the_old_file(folder, **options):
        shutil.copy(llama_folder / "tokenizer.model", folder)
        return save(folder, **options)

    tokenizer.save_pretrained = save_with_the_old_file
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "stale")
    assert "the tokenizer.model that save_pretrained wrote disagrees with tokenizer.json (it holds 1,200 pieces" \
        in caplog.text
    assert not (folder / "tokenizer.model").exists()


def test_a_loaded_tokenizer_keeps_its_file_and_propagate_carries_it(llama_folder, russian, tmp_path, caplog):
    """Base and instruct hold the source's tokenizer.model; the adapted folder its extension, which a re-save (as
    `vocabshift train` does) and propagate's output carry; the instruct's old one goes nowhere."""
    base = make_model("llama-untied", AutoTokenizer.from_pretrained(llama_folder))
    folders = {role: tmp_path / role for role in ("base", "instruct", "adapted", "output", "resaved")}
    vocabshift.save_pretrained_atomic(base, AutoTokenizer.from_pretrained(llama_folder), folders["base"])
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in base.parameters():
            parameter.add_(0.2 * parameter.std() * torch.randn(parameter.shape, generator=generator))
    vocabshift.save_pretrained_atomic(base, AutoTokenizer.from_pretrained(llama_folder), folders["instruct"])
    assert (folders["base"] / "tokenizer.model").read_bytes() == (llama_folder / "tokenizer.model").read_bytes()
    adapted = AutoModelForCausalLM.from_pretrained(folders["base"])
    vocabshift.save_pretrained_atomic(adapted, adapted.extend_vocabulary(russian, method="mean"), folders["adapted"])
    extended = (folders["adapted"] / "tokenizer.model").read_bytes()
    assert extended != (llama_folder / "tokenizer.model").read_bytes()
    vocabshift.save_pretrained_atomic(AutoModelForCausalLM.from_pretrained(folders["adapted"]),
                                      AutoTokenizer.from_pretrained(folders["adapted"]), folders["resaved"])
    vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=folders["output"])
    for role in ("resaved", "output"):
        assert (folders[role] / "tokenizer.model").read_bytes() == extended
        assert sentencepiece_mismatch(folders[role]) is None
    stale = shutil.copytree(folders["adapted"], tmp_path / "stale")  # holding base's file: none goes to the output
    shutil.copy(folders["base"] / "tokenizer.model", stale)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        output = vocabshift.propagate(stale, folders["base"], folders["instruct"], output_dir=tmp_path / "from-stale")
    assert f"{output} holds no tokenizer.model: the tokenizer.model its source was loaded with disagrees" in caplog.text
    assert ".vocabshift-tmp-" not in caplog.text and not (output / "tokenizer.model").exists()


def test_push_uploads_the_file_in_step_and_never_a_stale_one(llama_folder, russian, tmp_path, loopback_hub, caplog):
    folder = extend_and_save(llama_folder, russian, tmp_path / "tiny-ru")
    vocabshift.push_to_hub(folder, "loopback-user/tiny-ru")
    assert loopback_hub.files("loopback-user/tiny-ru")["tokenizer.model"] == (folder / "tokenizer.model").read_bytes()
    shutil.copy(llama_folder / "tokenizer.model", folder)  # the source's, as a copy of its Hub repo would leave it
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        vocabshift.push_to_hub(folder, "loopback-user/tiny-ru")
    assert "tokenizer.model is left out of the upload: it disagrees with tokenizer.json (it holds 1,200" in caplog.text
    files = loopback_hub.files("loopback-user/tiny-ru")
    assert "tokenizer.model" not in files and "tokenizer.json" in files


@pytest.mark.parametrize("damage", ["{broken", '{"model": {"type": "BPE"}}'])
def test_a_damaged_tokenizer_json_beside_a_tokenizer_model(llama_folder, russian, tmp_path, damage):
    """push and gguf compare tokenizer.model with tokenizer.json, which they parsed by hand: a damaged one was a raw
    JSONDecodeError (or KeyError 'vocab'). The comparison now leaves it to the tokenizer's loader, which names it."""
    folder = extend_and_save(llama_folder, russian, tmp_path / "out")
    (folder / "tokenizer.json").write_text(damage, encoding="utf-8")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert sentencepiece_mismatch(folder) is None
    with pytest.raises(vocabshift.errors.ModelFolderError, match="the tokenizer cannot be loaded") as info:
        vocabshift.push_to_hub(folder, "me/x", token="hf_unused")
    assert f"{str(folder)!r} would publish a model that does not load" in str(info.value)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before


def test_a_gemma_tokenizer_without_vocab_file_gets_its_folders_file_extended(tmp_path):
    """transformers 5's GemmaTokenizer keeps no `vocab_file`: the tokenizer.model of the folder it was loaded from is
    extended (Gemma's settings: no dummy prefix), where the extended folder held none, without a word."""
    from transformers import GemmaTokenizer

    folder, model_file = tmp_path / "gemma", io.BytesIO()
    folder.mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(read_lines("en", 1500)), model_writer=model_file, model_type="bpe", vocab_size=800,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, add_dummy_prefix=False, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", num_threads=1, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model_file.getvalue())
    vocab = {piece: i for i, piece in enumerate(from_model_file(folder / "tokenizer.model").convert_ids_to_tokens(
        list(range(800))))}
    GemmaTokenizer(vocab=vocab, merges=generate_merges(vocab)).save_pretrained(folder)
    source = AutoTokenizer.from_pretrained(folder)
    assert getattr(source, "vocab_file", None) is None
    russian = vocabshift.train_tokenizer(read_lines("ru", 1500), like=source, vocab_size=1000)
    saved = extend_and_save(folder, russian, tmp_path / "extended")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(saved / "tokenizer.model"))
    lines = held_out()[:300] + held_out()[-300:]
    assert processor.encode(lines) == AutoTokenizer.from_pretrained(saved)(lines, add_special_tokens=False)["input_ids"]
    assert processor.get_piece_size() > 1200 and sentencepiece_mismatch(saved) is None


def test_a_sources_plain_added_tokens_leave_the_file_out(llama_folder, russian, tmp_path, caplog):
    """A token added to the source (not special) is no piece of its tokenizer.model: appended as a user-defined
    piece, sentencepiece cut 'Москва, да' unlike tokenizer.json, on lines the check skipped (the source's own two
    files disagree there)."""
    from tokenizers import AddedToken

    source = AutoTokenizer.from_pretrained(llama_folder)
    source.add_tokens([AddedToken("Москва", special=False), AddedToken("да", special=False, lstrip=True)])
    source.save_pretrained(tmp_path / "source")
    shutil.copy(llama_folder / "tokenizer.model", tmp_path / "source")
    with caplog.at_level(logging.WARNING):
        folder = extend_and_save(tmp_path / "source", russian, tmp_path / "extended")
    assert "none is written for the new vocabulary: tokenizer.json has added tokens that are not special beyond the " \
           "source's pieces (e.g. 'Москва')" in caplog.text
    assert not (folder / "tokenizer.model").exists()


def test_a_folder_with_tokenizer_model_alone_names_protobuf(llama_folder, tmp_path):
    """Without protobuf transformers reads such a tokenizer.model as tiktoken, and its error asked for tiktoken."""
    try:
        import google.protobuf  # noqa: F401
        pytest.skip("protobuf is installed: transformers converts the file")
    except ImportError:
        pass
    from vocabshift.errors import TokenizerLoadError

    folder = tmp_path / "model-file-only"
    folder.mkdir()
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(llama_folder / name, folder)
    with pytest.raises(TokenizerLoadError, match="holds a SentencePiece tokenizer.model and no tokenizer.json, and "
                       "transformers converts that file with the protobuf package, which is not installed: pip "
                       "install protobuf sentencepiece"):
        vocabshift.train_tokenizer(["привет мир"], like=folder, vocab_size=1000)
