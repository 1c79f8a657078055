"""A bad-input suite across the public API and the CLI: each bad input gets its typed error, the message names the
input, and nothing is modified or half-written. The CLI cases run as real subprocesses."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset, DatasetDict, IterableDataset
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models
from transformers import (
    CLIPImageProcessor,
    LlavaProcessor,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainingArguments,
)

import vocabshift
from conftest import ROOT, make_model, make_tokenizer
from vocabshift import errors
from vocabshift.cli import main
from vocabshift.training import (
    DistillationCollator,
    DistillationTrainer,
    DistillationWeights,
    EmbeddingOnlyCallback,
    SecondStage,
    TeacherSchedule,
    bits_per_byte,
    pack_texts,
)


@pytest.fixture(scope="module")
def w(tmp_path_factory, tokenizers_en, tokenizers_ru, ru_lines):
    """Models, tokenizers and hostile files shared by the cases (none of them may change)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    (root / "file.txt").write_text("not a model\n", encoding="utf-8")
    (root / "empty.txt").write_text("\n \n", encoding="utf-8")
    (root / "ru.txt").write_text("\n".join(ru_lines[:100]) + "\n", encoding="utf-8")
    (root / "junk").mkdir()
    (root / "junk" / "notes.txt").write_text("unrelated data\n", encoding="utf-8")
    (root / "project" / "src").mkdir(parents=True)  # a config.json that is no model's, beside the user's work
    (root / "project" / "config.json").write_text('{"learning_rate": 0.001}', encoding="utf-8")
    (root / "project" / "NOTES.md").write_text("my notes\n", encoding="utf-8")
    (root / "broken-json").mkdir()
    (root / "broken-json" / "tokenizer.json").write_text("{not json", encoding="utf-8")
    (root / "empty").mkdir()
    (root / "index-of-nothing").mkdir()  # config.json added below
    (root / "index-of-nothing" / "model.safetensors.index.json").write_text('{"weight_map": {}}', encoding="utf-8")
    (root / "garbage.vec").write_text("3 4\nword 1 2\n", encoding="utf-8")
    (root / "texts.zip").write_bytes(b"PK\x03\x04" + bytes(26))  # a zip archive's first bytes
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    extended = make_model("qwen2-tied", source)
    extended_tokenizer = extended.extend_vocabulary(new, source_tokenizer=source)
    vocabshift.save_pretrained_atomic(extended, extended_tokenizer, root / "extended")
    make_model("qwen2-tied", source).save_pretrained(root / "plain")  # never extended
    source.save_pretrained(root / "plain")
    grown = _resized(extended, extended.get_input_embeddings().weight.shape[0] + 64)  # padded after extend
    vocabshift.save_pretrained_atomic(grown, extended_tokenizer, root / "grown")
    for damaged in ("broken-config", "truncated", "no-tokenizer", "no-embeddings", "short-embeddings", "bad-record",
                    "bad-evaluation", "relative-source", "float-vocab-size", "no-weights", "bad-history",
                    "utf16-readme", "unknown-architecture", "bogus-dtype", "text-max-length",
                    "helper-broken-tokenizer"):
        shutil.copytree(root / "extended", root / damaged)
    _edit_json(root / "unknown-architecture" / "config.json", architectures=["FooForCausalLM"])
    _edit_json(root / "bogus-dtype" / "config.json", dtype="bogus")
    _edit_json(root / "text-max-length" / "tokenizer_config.json", model_max_length="abc")
    (root / "helper-broken-tokenizer" / "tokenizer.json").write_text("{not json", encoding="utf-8")
    make_model("llama-untied", tokenizers_en["sentencepiece"]).save_pretrained(root / "headless")
    _edit_json(root / "headless" / "config.json", architectures=None)  # lost: AutoModel would drop the untied head
    shutil.copy(root / "extended" / "config.json", root / "index-of-nothing")
    tensors = load_file(root / "extended" / "model.safetensors")
    embeddings = tensors.pop("model.embed_tokens.weight")
    save_file(tensors, root / "no-embeddings" / "model.safetensors", metadata={"format": "pt"})
    save_file({**tensors, "model.embed_tokens.weight": embeddings[:-64].contiguous()},
              root / "short-embeddings" / "model.safetensors", metadata={"format": "pt"})
    (root / "broken-config" / "config.json").write_text("{\"model_type\": ", encoding="utf-8")
    config = json.loads((root / "float-vocab-size" / "config.json").read_text(encoding="utf-8"))
    config["vocab_size"] = float(config["vocab_size"])  # a hand edit transformers' strict config validation refuses
    (root / "float-vocab-size" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    config = json.loads((root / "bad-record" / "config.json").read_text(encoding="utf-8"))
    config["vocabshift"]["new_token_ranges"] = "all the new ones"  # as a hand edit might leave it
    (root / "bad-record" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    config = json.loads((root / "relative-source" / "config.json").read_text(encoding="utf-8"))
    config["vocabshift"]["source_model"] = "base-model"  # extend was run where a folder base-model/ was
    (root / "relative-source" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (root / "utf16-readme" / "README.md").write_bytes("# my notes\n".encode("utf-16"))  # not UTF-8
    config = json.loads((root / "bad-history" / "config.json").read_text(encoding="utf-8"))
    config["vocabshift"]["cpt"] = [{"steps": 3, "command": [1, 2]}]  # a hand edit: numbers where words go
    (root / "bad-history" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    config = json.loads((root / "bad-evaluation" / "config.json").read_text(encoding="utf-8"))
    config["vocabshift"]["evaluations"] = [{"scores": [{"label": "adapted", "bits_per_byte": "1.2"}], "num_texts": 1}]
    (root / "bad-evaluation" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (root / "no-weights" / "model.safetensors").unlink()
    (root / "loop").symlink_to(root / "loop")  # a link that leads back to itself
    (root / "blobs").mkdir()  # a Hugging Face cache: a snapshot's files are links to blobs other snapshots share
    (root / "snapshot").mkdir()
    for file in (root / "extended").iterdir():
        shutil.copy(file, root / "blobs" / file.name)
        (root / "snapshot" / file.name).symlink_to(root / "blobs" / file.name)
    (root / "blobs" / "README.md").write_text("# me/m\n", encoding="utf-8")
    cached = root / "hub" / "models--me--m" / "snapshots" / "0123abc"  # the cache's own layout
    cached.mkdir(parents=True)
    for file in (root / "blobs").iterdir():
        (cached / file.name).symlink_to(Path("../../../../blobs") / file.name)
    (root / "cached-link").symlink_to(cached)  # a handy name for a cached model: `ln -s ~/.cache/.../snapshots/abc`
    shutil.copytree(cached, root / "copied-snapshot", symlinks=True)  # `cp -r` of a snapshot: links to blobs it lacks
    shutil.copytree(root / "extended", root / "lost-template")  # its chat template's blob is gone
    (root / "lost-template" / "chat_template.jinja").unlink()
    (root / "lost-template" / "chat_template.jinja").symlink_to("../blobs/gone")
    weights = root / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for file in (root / "no-tokenizer").glob("tokenizer*"):
        file.unlink()
    shutil.copytree(root / "extended", root / "no-tokenizer-json")  # transformers loads it as an empty tokenizer
    (root / "no-tokenizer-json" / "tokenizer.json").unlink()
    get_peft_model(make_model("qwen2-tied", source), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(
        root / "adapter")  # an instruct sibling, or a tuned model, shipped as a LoRA adapter
    (root / "tokenizer-config-only").mkdir()
    shutil.copy(root / "extended" / "tokenizer_config.json", root / "tokenizer-config-only")
    return SimpleNamespace(root=root, source=source, new=new, model=make_model("qwen2-tied", source), ru=ru_lines,
                           extended=extended, extended_tokenizer=extended_tokenizer,
                           unigram=make_tokenizer("unigram", ru_lines[:300], 900))


def _edit_json(path, **changes):
    """A hand edit of a JSON file: `changes` set, a None value deletes its key."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps({key: value for key, value in data.items() if value is not None}), encoding="utf-8")


@dataclasses.dataclass(frozen=True)
class _Options:
    """The options of a method registered by a bad-input case (none is registered)."""


class At:
    """An argument taken from the shared objects when the case runs: `At(lambda w: w.source)`."""

    def __init__(self, pick):
        self.pick = pick


def _resolved(w, options):
    return {key: value.pick(w) if isinstance(value, At) else value for key, value in options.items()}


def _extend(**kwargs):
    def call(w):
        options = _resolved(w, {"source_tokenizer": At(lambda w: w.source), "new": At(lambda w: w.new), **kwargs})
        return w.model.extend_vocabulary(options.pop("new"), **options)
    return call


def _specials_only():
    """A tokenizer of two special tokens and no vocabulary, as a folder that lost its tokenizer.json loads."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.add_special_tokens(["<s>", "</s>"])
    return tokenizer


def _with_words(tokenizer, *words):
    """A copy of `tokenizer` with `words` added (`tokenizer.add_tokens`), as for a few domain terms."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_tokens(list(words))
    return tokenizer


def _with_a_marker(tokenizer):
    """A copy of `tokenizer` given one more special token, as after `tokenizer.add_tokens([...])`."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_tokens(["<|marker|>"], special_tokens=True)
    return tokenizer


def _resized(model, rows):
    """A copy of `model` resized to `rows` rows, as `resize_token_embeddings` after `extend_vocabulary` leaves it."""
    model = copy.deepcopy(model)
    model.resize_token_embeddings(rows, mean_resizing=False)
    return model


def _wrapped_by_peft(**config):
    def call(w):
        model = get_peft_model(copy.deepcopy(w.model), LoraConfig(r=2, **config))
        return model.extend_vocabulary(w.new, source_tokenizer=w.source)
    return call


def _args(w, **overrides):
    options = dict(max_steps=1, report_to=[], use_cpu=True, save_strategy="no", per_device_train_batch_size=2)
    return TrainingArguments(str(w.root / "runs"), **{**options, **overrides})


def _distill(**kwargs):
    def call(w):
        options = dict(model=w.extended, args=_args(w), train_dataset=w.ru[:4], processing_class=w.extended_tokenizer,
                       teacher_tokenizer=w.source, callbacks=[EmbeddingOnlyCallback()])
        options.update(_resolved(w, kwargs))
        trainer = DistillationTrainer(**options)
        return trainer.train() if kwargs.get("train_dataset") is not None else trainer
    return call


def _scored(method, dataset, **kwargs):
    """`DistillationTrainer.evaluate` or `.predict` (`method`) of `dataset`, the trainer built with `kwargs`."""
    return lambda w: getattr(_distill(**kwargs)(w), method)(_resolved(w, {"dataset": dataset})["dataset"])


def _bits(**kwargs):
    """bits_per_byte of the extended model on Russian lines, with `kwargs` overriding its arguments."""
    def call(w):
        options = {"texts": w.ru[:4], **kwargs}
        return bits_per_byte(w.extended, w.extended_tokenizer, options.pop("texts"), **options)
    return call


def _callback_trainer(**kwargs):
    return lambda w: Trainer(model=w.extended, args=_args(w), callbacks=[EmbeddingOnlyCallback(**kwargs)])


def _with_an_id(tokenizer, new_id):
    """`tokenizer`'s backend with its last model piece renumbered to `new_id` (as a hand edit of tokenizer.json)."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    state["model"]["vocab"][list(state["model"]["vocab"])[-1]] = new_id
    return Tokenizer.from_str(json.dumps(state))


def _content_rows():
    """A streamed dataset's rows whose text is in a 'content' column (its columns are unknown until read)."""
    yield from ({"content": "привет мир"} for _ in range(8))


def _after_a_run(w, **entry):
    """A copy of the extended model whose record has one more CPT run, as the callback writes it."""
    model = copy.deepcopy(w.extended)
    vocabshift.record.add_cpt_entry(model, entry)
    return model


def _on_meta(w):
    """A model of the shared one's architecture built on the meta device, as under init_empty_weights."""
    with torch.device("meta"):
        return make_model("qwen2-tied", w.source)


E = errors
API = {
    # extend_vocabulary
    "method=''": (_extend(method=""), E.UnknownMethodError, "Unknown method ''"),
    "method=None": (_extend(method=None), E.UnknownMethodError, "Unknown method None"),
    "method=subwords": (_extend(method="subwords"), E.UnknownMethodError, "Unknown method 'subwords'"),
    "mode=append": (_extend(mode="append"), E.InvalidArgumentError, "mode='append' is invalid"),
    "mode=None": (_extend(mode=None), E.InvalidArgumentError, "mode=None is invalid"),
    "mode=EXTEND": (_extend(mode="EXTEND"), E.InvalidArgumentError, "mode='EXTEND' is invalid"),
    "pad=0": (_extend(pad_to_multiple_of=0), E.InvalidArgumentError, "pad_to_multiple_of=0"),
    "pad=-64": (_extend(pad_to_multiple_of=-64), E.InvalidArgumentError, "pad_to_multiple_of=-64"),
    "pad=True": (_extend(pad_to_multiple_of=True), E.InvalidArgumentTypeError, "pad_to_multiple_of=True"),
    "pad=2.5": (_extend(pad_to_multiple_of=2.5), E.InvalidArgumentTypeError, "pad_to_multiple_of=2.5"),
    "pad='64'": (_extend(pad_to_multiple_of="64"), E.InvalidArgumentTypeError, "pad_to_multiple_of='64'"),
    "pad=10**12": (_extend(pad_to_multiple_of=10**12), E.InvalidArgumentError,  # rows for a trillion tokens
                   "pad_to_multiple_of=1000000000000 is invalid: pass a positive int up to 65,536 (e.g. 64) or None"),
    "seed=-1": (_extend(seed=-1), E.InvalidArgumentError, "seed=-1"),
    "seed=2**70": (_extend(seed=2**70, method="random"), E.InvalidArgumentError,  # torch's seeds end at 2**64
                   "seed=1180591620717411303424 is invalid: pass an int in [0, 2**32)"),
    "seed='0'": (_extend(seed="0"), E.InvalidArgumentTypeError, "seed='0'"),
    "seed=1.0": (_extend(seed=1.0), E.InvalidArgumentTypeError, "seed=1.0"),
    "seed=None": (_extend(seed=None), E.InvalidArgumentTypeError, "seed=None"),
    "keep='yes'": (_extend(keep_source_segmentation="yes"), E.InvalidArgumentError, "keep_source_segmentation='yes'"),
    "keep=1": (_extend(keep_source_segmentation=1), E.InvalidArgumentError, "keep_source_segmentation=1"),
    "keep in replace mode": (_extend(keep_source_segmentation=True, mode="replace"), E.InvalidArgumentError,
                             "keep_source_segmentation=True works in mode='extend' only"),
    "source_texts=str": (_extend(source_texts="a line"), E.CorpusError, "source_texts is a str"),
    "source_texts=[1, 2]": (_extend(source_texts=[1, 2]), E.CorpusError, "source_texts is a list"),
    "source_texts=[]": (_extend(source_texts=[]), E.CorpusError, "source_texts is a list"),
    "source_texts=Path": (_extend(source_texts=Path("en.txt")), E.CorpusError, "source_texts is a PosixPath"),
    "source_texts=42": (_extend(source_texts=42), E.CorpusError, "source_texts is a int"),
    "new=''": (_extend(new=""), E.TokenizerLoadError, "new_tokenizer is an empty path"),
    "new=a tokenizer folder copied out of the cache": (  # it blamed sentencepiece or tiktoken, not installed
        _extend(new=At(lambda w: w.root / "copied-snapshot")), E.TokenizerLoadError,
        "copied-snapshot' holds links that lead nowhere (README.md -> '../../../../blobs/README.md', and 6 more), so "
        "the files they stand for are missing: it was copied out of a Hugging Face cache"),
    "new=missing folder": (_extend(new=At(lambda w: str(w.root / "nowhere"))), E.TokenizerLoadError, "new_tokenizer="),
    "new=broken tokenizer.json": (_extend(new=At(lambda w: w.root / "broken-json")), E.TokenizerLoadError,
                                  "Could not load new_tokenizer="),
    "new=empty folder": (_extend(new=At(lambda w: w.root / "empty")), E.TokenizerLoadError, "load new_tokenizer"),
    "new=text file": (_extend(new=At(lambda w: w.root / "file.txt")), E.TokenizerLoadError, "load new_tokenizer"),
    "new=folder of tokenizer_config.json alone": (_extend(new=At(lambda w: w.root / "tokenizer-config-only")),
                                                  E.TokenizerLoadError, "(a folder without tokenizer.json): "),
    "source=model folder without tokenizer.json": (
        _extend(source_tokenizer=At(lambda w: w.root / "no-tokenizer-json")), E.TokenizerLoadError,
        "no-tokenizer-json' has no vocabulary: besides its 3 added tokens"),
    "new=tokenizer of special tokens only": (_extend(new=At(lambda w: _specials_only())), E.TokenizerLoadError,
                                             "new_tokenizer=a Tokenizer has no vocabulary: besides its 2 added "
                                             "tokens (</s>, <s>) it holds no token"),
    "a quantized head": (lambda w: torch.ao.quantization.quantize_dynamic(copy.deepcopy(w.model), {torch.nn.Linear})
                         .extend_vocabulary(w.new, source_tokenizer=w.source), E.UnsupportedModelError,
                         "output head is a torch.ao.nn.quantized.dynamic.modules.linear.Linear without a floating"),
    **{f"embeddings wrapped by peft ({name})": (_wrapped_by_peft(**config), E.UnsupportedModelError,
                                                f"embeddings are wrapped by a peft adapter ({kind}), whose weights "
                                                "keep the old vocabulary's width: call extend_vocabulary on the model "
                                                "before get_peft_model")
       for name, config, kind in [
           ("LoRA on the embeddings", {"target_modules": ["embed_tokens"]}, "peft.tuners.lora.layer.Embedding"),
           ("LoRA on the head", {"target_modules": ["lm_head"]}, "peft.tuners.lora.layer.Linear"),
           ("modules_to_save", {"target_modules": ["q_proj"], "modules_to_save": ["embed_tokens"]},
            "peft.utils.other.ModulesToSaveWrapper"),
           ("trainable tokens", {"target_modules": ["q_proj"], "trainable_token_indices": [1, 2]},
            "peft.utils.other.TrainableTokensWrapper")]},
    "new=ids up to ten million": (_extend(new=At(lambda w: _with_an_id(w.new, 10**7))), E.UnsupportedTokenizerError,
                                  "ids up to 10,000,000: 9,99"),
    "new=None": (_extend(new=None), E.InvalidTokenizerError, "new_tokenizer is a NoneType"),
    "new=42": (_extend(new=42), E.InvalidTokenizerError, "new_tokenizer is a int"),
    "new=a model": (_extend(new=At(lambda w: w.model)), E.InvalidTokenizerError, "new_tokenizer is a Qwen2ForCausalLM"),
    "new=dict": (_extend(new={"vocab": {}}), E.InvalidTokenizerError, "new_tokenizer is a dict"),
    "new=the source itself": (_extend(new=At(lambda w: w.source)), E.NoNewTokensError, "adds no token"),
    "new=the source with words added by add_tokens": (  # it said all 703 tokens were present
        _extend(new=At(lambda w: _with_words(w.source, "COVID-19", "mRNA"))), E.NoNewTokensError,
        "new_tokenizer's only tokens that the model's tokenizer lacks are added tokens ('COVID-19', 'mRNA'), which "
        "extend_vocabulary leaves out (it merges the pieces of a tokenizer's model): give the model those tokens "
        "with tokenizer.add_tokens([...]) and model.resize_token_embeddings(len(tokenizer)), or extend with a "
        "tokenizer trained on target-language text"),
    "new=Unigram into BPE": (_extend(new=At(lambda w: w.unigram)), E.IncompatibleTokenizerError, "Unigram tokenizer"),
    "source=42": (_extend(source_tokenizer=42), E.InvalidTokenizerError, "source_tokenizer is a int"),
    "source=a vision-language model's processor": (  # the fix listed tokenizer forms, not the one the user held
        _extend(source_tokenizer=At(lambda w: LlavaProcessor(image_processor=CLIPImageProcessor(), tokenizer=w.source,
                                                             patch_size=16))),
        E.InvalidTokenizerError, "source_tokenizer is a LlavaProcessor, which holds a tokenizer: pass its .tokenizer "
        "(processor.tokenizer)"),
    "source=another model's": (_extend(source_tokenizer=At(lambda w: w.new)), E.TokenizerMismatchError,
                               "source_tokenizer has"),
    "source=a tokenizer thousands of rows short": (
        lambda w: _resized(w.model, len(w.source) + 5000).extend_vocabulary(w.new, source_tokenizer=w.source),
        E.TokenizerMismatchError, "5000 rows would have no token, more than padding explains"),
    "source=the returned tokenizer, rows grown after": (  # the new tokens would overwrite the grown rows
        lambda w: _resized(w.extended, len(w.extended_tokenizer) + 1).extend_vocabulary(
            w.new, source_tokenizer=w.extended_tokenizer),
        E.TokenizerMismatchError, "1 more than its last extend_vocabulary call gave it (1408): rows added after"),
    "unknown option": (_extend(foo=1), E.MethodOptionError, "Unknown option 'foo' for method 'subword'"),
    "option of a wrong value": (_extend(input_weighting=3), E.MethodOptionError, "Option input_weighting=3"),
    "option of another method": (_extend(method="mean", input_weighting="uniform"), E.MethodOptionError,
                                 "Unknown option 'input_weighting' for method 'mean'"),
    "focus corpus of one word": (  # the fix was a smaller min_count, which extend_vocabulary does not take
        _extend(method="focus", corpus=["привет"]), E.CorpusError,
        "a smaller min_count (now 10): extend_vocabulary's corpus= option takes none, so there train the vectors with "
        "train_word_vectors(corpus, tokenizer=new_tokenizer, min_count=...) and pass them as word_vectors="),
    "focus without vectors": (_extend(method="focus"), E.MethodOptionError, "focus"),
    "model=str": (lambda w: vocabshift.extend_vocabulary("model", w.new, source_tokenizer=w.source),
                  E.UnsupportedModelError, "str has no input embedding matrix"),
    "model=Linear": (lambda w: vocabshift.extend_vocabulary(torch.nn.Linear(2, 2), w.new, source_tokenizer=w.source),
                     E.UnsupportedModelError, "Linear has no input embedding matrix"),
    "model=None": (lambda w: vocabshift.extend_vocabulary(None, w.new, source_tokenizer=w.source),
                   E.UnsupportedModelError, "NoneType has no input embedding matrix"),
    "model=DataParallel": (  # the fix said "pass a transformers model", which the user thought they did
        lambda w: vocabshift.extend_vocabulary(torch.nn.DataParallel(w.model), w.new, source_tokenizer=w.source),
        E.UnsupportedModelError, "DataParallel has no input embedding matrix (get_input_embeddings() gave NoneType): "
        "pass the Qwen2ForCausalLM it wraps (model.module)"),
    # EmbeddingOnlyCallback and SecondStage
    "rows='old'": (lambda w: EmbeddingOnlyCallback(rows="old"), E.InvalidArgumentError, "rows='old'"),
    "rows=5": (lambda w: EmbeddingOnlyCallback(rows=5), E.InvalidArgumentError, "rows=5"),
    "rows=None": (lambda w: EmbeddingOnlyCallback(rows=None), E.InvalidArgumentError, "rows=None"),
    "rows=a 0-d tensor": (lambda w: EmbeddingOnlyCallback(rows=torch.tensor(5)), E.InvalidArgumentError,
                          "rows=tensor(5) is invalid: pass 'new', 'all' or a list of row ids"),
    "rows=[]": (_callback_trainer(rows=[]), E.InvalidArgumentError, "rows=[]"),
    "rows=[-1]": (_callback_trainer(rows=[-1]), E.InvalidArgumentError, "rows holds ids from -1"),
    "rows=[10**9]": (_callback_trainer(rows=[10**9]), E.InvalidArgumentError, "rows holds ids from 1000000000"),
    "rows=['a']": (_callback_trainer(rows=["a"]), E.InvalidArgumentError, "rows=['a']"),
    "rows=[1.5]": (_callback_trainer(rows=[1.5]), E.InvalidArgumentError, "rows=[1.5]"),
    "rows=[True]": (_callback_trainer(rows=[True]), E.InvalidArgumentError, "rows=[True]"),
    "head_learning_rate=0": (lambda w: EmbeddingOnlyCallback(head_learning_rate=0.0), E.InvalidArgumentError,
                             "head_learning_rate=0.0"),
    "head_learning_rate<0": (lambda w: EmbeddingOnlyCallback(head_learning_rate=-1e-3), E.InvalidArgumentError,
                             "head_learning_rate=-0.001"),
    "head_learning_rate=nan": (lambda w: EmbeddingOnlyCallback(head_learning_rate=float("nan")),
                               E.InvalidArgumentError, "head_learning_rate=nan"),
    "head_learning_rate=inf": (lambda w: EmbeddingOnlyCallback(head_learning_rate=float("inf")),
                               E.InvalidArgumentError, "head_learning_rate=inf"),
    "head_learning_rate='1e-3'": (lambda w: EmbeddingOnlyCallback(head_learning_rate="1e-3"),
                                  E.InvalidArgumentError, "head_learning_rate='1e-3'"),
    "head_learning_rate on a tied head": (_callback_trainer(head_learning_rate=1e-3), E.InvalidArgumentError,
                                          "head_learning_rate needs an untied output head"),
    "second_stage='lora'": (lambda w: EmbeddingOnlyCallback(second_stage="lora"), E.InvalidArgumentError,
                            "second_stage is a str"),
    "command as one string": (lambda w: EmbeddingOnlyCallback(command="vocabshift train m t o"),
                              E.InvalidArgumentError, "command='vocabshift train m t o' is invalid: pass the words"),
    "command=[1]": (lambda w: EmbeddingOnlyCallback(command=[1]), E.InvalidArgumentError, "command=[1] is invalid"),
    "after_step=-1": (lambda w: SecondStage(after_step=-1), E.InvalidArgumentError, "after_step=-1"),
    "after_step='5'": (lambda w: SecondStage(after_step="5"), E.InvalidArgumentTypeError, "after_step='5'"),
    "lora=3": (lambda w: SecondStage(after_step=1, lora=3), E.InvalidArgumentError, "lora is a int"),
    "a callback without a record": (lambda w: Trainer(model=w.model, args=_args(w),
                                                      callbacks=[EmbeddingOnlyCallback()]),
                                    E.RecordError, "carries no vocabshift record"),
    # DistillationWeights and DistillationTrainer
    "teacher_share=0": (lambda w: DistillationWeights(teacher_share=0), E.InvalidArgumentError, "teacher_share=0"),
    "teacher_share=1.5": (lambda w: DistillationWeights(teacher_share=1.5), E.InvalidArgumentError,
                          "teacher_share=1.5"),
    "hidden=-1": (lambda w: DistillationWeights(hidden=-1), E.InvalidArgumentError, "hidden=-1"),
    "next_token=nan": (lambda w: DistillationWeights(next_token=float("nan")), E.InvalidArgumentError,
                       "next_token=nan"),
    "layer='last'": (lambda w: DistillationWeights(layer="last"), E.InvalidArgumentError, "layer='last'"),
    "gate='yes'": (lambda w: DistillationWeights(gate="yes"), E.InvalidArgumentError, "gate='yes'"),
    "every weight 0": (lambda w: DistillationWeights(hidden=0, chunk=0, next_piece=0, piece_tree=0, next_token=0),
                       E.InvalidArgumentError, "Every weight is 0"),
    "weights='default'": (_distill(weights="default"), E.InvalidArgumentTypeError, "weights is a str"),
    "data_collator past the teacher's positions": (
        _distill(data_collator=At(lambda w: DistillationCollator(w.extended_tokenizer, w.source, max_length=5000))),
        E.InvalidArgumentError, "data_collator reads up to 40000 teacher tokens per sequence (max_teacher_length "
        "unset: 8 x max_length), past the 32768 positions of the teacher (Qwen2ForCausalLM): pass "
        "DistillationCollator(..., max_teacher_length=32768)"),
    "data_collator past the model's positions": (
        _distill(data_collator=At(lambda w: DistillationCollator(w.extended_tokenizer, w.source, max_length=40000,
                                                                 max_teacher_length=100))),
        E.InvalidArgumentError, "data_collator.max_length=40000 is longer than the 32768 positions of model"),
    "DistillationTrainer model=None, model_init": (_distill(model=None, model_init=At(lambda w: lambda: w.extended)),
                                                   E.InvalidArgumentTypeError, "model is a NoneType: pass the model "
                                                   "after extend_vocabulary, loaded"),
    "max_length=0": (_distill(max_length=0), E.InvalidArgumentError, "max_length=0"),
    "max_length=1": (_distill(max_length=1), E.InvalidArgumentError, "max_length=1"),
    "max_length beyond the model's positions": (_distill(max_length=10**7), E.InvalidArgumentError,
                                                "max_length=10000000 is longer than the "),
    "teacher_model of another width": (
        _distill(teacher_model=At(lambda w: Qwen2ForCausalLM(Qwen2Config(
            vocab_size=len(w.source), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2))), callbacks=[]),
        E.InvalidArgumentError, "its hidden states have 32 values, the model's 64"),
    "teacher_model of a smaller vocabulary": (
        _distill(teacher_model=At(lambda w: Qwen2ForCausalLM(Qwen2Config(
            vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2))), callbacks=[]),
        E.InvalidArgumentError, "teacher_model (Qwen2ForCausalLM) is not the original model: its 100 embedding rows"),
    "teacher_model = the extended model": (_distill(teacher_model=At(lambda w: w.extended), callbacks=[]),
                                           E.InvalidArgumentError, "it carries the record of an extend_vocabulary"),
    "teacher_dtype=int8": (_distill(teacher_dtype="int8"), E.InvalidArgumentError, "dtype='int8'"),
    "layer beyond the model's": (_distill(weights=DistillationWeights(layer=40)), E.InvalidArgumentError,
                                 "weights.layer=40 is outside the hidden states of"),
    "own teacher after old rows trained": (_distill(model=At(lambda w: _after_a_run(w, rows="all"))),
                                           E.TrainingSetupError, "cannot be its own teacher: an earlier embedding-only "
                                           "run (rows='all', per its record) trained what the teacher reads"),
    "own teacher after a second stage": (_distill(model=At(lambda w: _after_a_run(w, rows="new", second_stage={
        "after_step": 1}))), E.TrainingSetupError, "(rows='new', then a second stage on the body"),
    "teacher_model=path": (_distill(teacher_model="original/"), E.InvalidArgumentTypeError, "teacher_model is a str"),
    "distillation without a record": (_distill(model=At(lambda w: w.model)), E.RecordError, "carries no vocabshift"),
    "processing_class=original": (_distill(processing_class=At(lambda w: w.source)), E.TokenizerMismatchError,
                                  "processing_class is not"),
    "teacher_tokenizer=extended": (_distill(teacher_tokenizer=At(lambda w: w.extended_tokenizer)),
                                   E.TokenizerMismatchError, "teacher_tokenizer is not"),
    "teacher_tokenizer=None": (_distill(teacher_tokenizer=None), E.InvalidTokenizerError,
                               "teacher_tokenizer is a NoneType"),
    "source_texts='x'": (_distill(weights=DistillationWeights(source=1.0), source_texts="x"), E.CorpusError,
                         "source_texts is a str"),
    "source_texts without replay": (_distill(source_texts=["a line"], weights=DistillationWeights(source=0.0)),
                                    E.InvalidArgumentError, "source_texts"),
    "dataset of ints": (_distill(train_dataset=[1, 2, 3, 4]), E.InvalidArgumentError, "A training example is a int"),
    "dataset of empty texts": (_distill(train_dataset=["", "", "", ""]), E.InvalidArgumentError, "holds no text"),
    "dataset without text column": (_distill(train_dataset=[{"content": "x"}] * 4), E.InvalidArgumentError,
                                    "train_dataset has the columns ['content'] and no 'text'"),
    "pre-tokenized dataset": (_distill(train_dataset=At(lambda w: Dataset.from_dict({"input_ids": [[1, 2]] * 4}))),
                              E.InvalidArgumentError, "columns ['input_ids'] and no 'text', the column the collator "
                              "reads: the trainer tokenizes raw text itself, with both tokenizers"),
    "streamed dataset without text column": (
        _distill(train_dataset=At(lambda w: IterableDataset.from_generator(_content_rows))), E.InvalidArgumentError,
        "e.g. dataset.rename_column('content', 'text')"),
    "dataset whose text column has a gap": (  # the fix was "rename_column('text', 'text')"
        _distill(train_dataset=At(lambda w: Dataset.from_dict({"text": [w.ru[0], None, w.ru[1], w.ru[2]]}))),
        E.InvalidArgumentError, "A training example's 'text' is None (a NoneType), not a string: drop such rows, e.g. "
        "dataset.filter(lambda row: isinstance(row['text'], str)"),
    # saving, propagating, publishing, inspecting
    "save model=None": (lambda w: vocabshift.save_pretrained_atomic(None, w.source, w.root / "out-1"),
                        E.InvalidArgumentTypeError, "model is a NoneType"),
    "save model=DataParallel": (  # the fix said "pass a transformers model", which the user thought they did
        lambda w: vocabshift.save_pretrained_atomic(torch.nn.DataParallel(w.extended), w.extended_tokenizer,
                                                    w.root / "out-1"),
        E.InvalidArgumentTypeError, "model is a DataParallel, which has no save_pretrained: pass the "
        "Qwen2ForCausalLM it wraps (model.module)"),
    "save tokenizer=path": (lambda w: vocabshift.save_pretrained_atomic(w.model, "tok/", w.root / "out-2"),
                            E.InvalidArgumentTypeError, "tokenizer is a str"),
    "save into a file": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / "file.txt"),
                         E.ModelFolderError, "is a file"),
    "save over unrelated data": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / "junk"),
                                 E.ModelFolderError, "holds no saved model"),
    "save over a project with a config.json": (
        lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / "project"), E.ModelFolderError,
        "project' holds 'NOTES.md', 'src/', which a saved model does not have: vocabshift replaces output folders as "
        "a whole and would delete them"),
    **{f"save into a Hugging Face cache snapshot{how}": (  # it replaced the snapshot: from_pretrained("me/m") loaded
        lambda w, path=path: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / path),  # the new model
        E.InvalidArgumentError, "is in a Hugging Face cache snapshot ('")
       for how, path in (("", "hub/models--me--m/snapshots/0123abc"), (" through a link", "cached-link"))},
    "save folder=''": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, ""), E.InvalidArgumentError,
                       "folder is an empty path"),
    "save folder=42": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, 42),
                       E.InvalidArgumentTypeError, "folder=42"),
    "max_shard_size='lots'": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / "out-3",
                                                                          max_shard_size="lots"),
                              E.InvalidArgumentError, "max_shard_size='lots'"),
    "max_shard_size=0": (lambda w: vocabshift.save_pretrained_atomic(w.model, w.source, w.root / "out-4",
                                                                     max_shard_size=0),
                         E.InvalidArgumentError, "max_shard_size=0"),
    "propagate method": (lambda w: vocabshift.propagate(w.root, w.root, w.root, output_dir=w.root / "out-5",
                                                        method="average"), E.InvalidArgumentError, "method='average'"),
    "propagate missing folder": (lambda w: vocabshift.propagate(w.root / "a", w.root / "b", w.root / "c",
                                                                output_dir=w.root / "out-6"),
                                 E.ModelFolderError, "adapted="),
    "propagate hardlink='yes'": (lambda w: vocabshift.propagate(w.root, w.root, w.root, output_dir=w.root / "out-7",
                                                                hardlink="yes"),
                                 E.InvalidArgumentTypeError, "hardlink='yes'"),
    "propagate unrelated folders": (lambda w: vocabshift.propagate(w.root / "junk", w.root / "junk", w.root / "junk",
                                                                   output_dir=w.root / "out-8"),
                                    E.ModelFolderError, "has no config.json"),
    **{f"{what} a peft adapter folder": (call, E.ModelFolderError, "adapter' has no config.json: it holds a peft "
                                          "adapter (adapter_config.json), not a model: merge the adapter into its base")
       for what, call in [
           ("propagate into", lambda w: vocabshift.propagate(w.root / "extended", w.root / "extended",
                                                             w.root / "adapter", output_dir=w.root / "out-9")),
           ("gguf of", lambda w: vocabshift.export_gguf(w.root / "adapter", w.root / "out.gguf")),
           ("inspect", lambda w: vocabshift.inspect_folder(w.root / "adapter")),
           ("card of", lambda w: vocabshift.model_card(w.root / "adapter"))]},
    "push a peft adapter folder": (lambda w: vocabshift.push_to_hub(w.root / "adapter", "me/x"), E.ModelFolderError,
                                   "adapter' lacks config.json or *.safetensors weights: it holds a peft adapter"),
    "propagate into unrelated data": (lambda w: vocabshift.propagate(w.root / "extended", w.root / "extended",
                                                                     w.root / "extended", output_dir=w.root / "junk"),
                                      E.OutputExistsError, "output_dir="),
    "push a missing folder": (lambda w: vocabshift.push_to_hub(w.root / "nowhere", "me/x"), E.ModelFolderError,
                              "is not a folder"),
    "push repo_id a/b/c": (lambda w: vocabshift.push_to_hub(w.root / "extended", "a/b/c"), E.InvalidArgumentError,
                           "repo_id='a/b/c'"),
    "push a file": (lambda w: vocabshift.push_to_hub(w.root / "file.txt", "me/x"), E.ModelFolderError,
                    "is not a folder"),
    "push unrelated data": (lambda w: vocabshift.push_to_hub(w.root / "junk", "me/x"), E.ModelFolderError,
                            "lacks config.json"),
    "inspect a missing folder": (lambda w: vocabshift.inspect_folder(w.root / "nowhere"), E.ModelFolderError,
                                 "nowhere' does not exist: pass a folder written by save_pretrained."),
    "inspect a file": (lambda w: vocabshift.inspect_folder(w.root / "file.txt"), E.ModelFolderError,
                       "file.txt' is a file, not a folder: pass a folder"),
    "inspect a Hub id": (lambda w: vocabshift.inspect_folder("me/smollm2-ru"), E.ModelFolderError,
                         "'me/smollm2-ru' does not exist (this step reads local folders only): pass a folder written "
                         "by save_pretrained; for a Hub repo, download it first (hf download me/smollm2-ru"),
    "card of unrelated data": (lambda w: vocabshift.model_card(w.root / "junk"), E.ModelFolderError,
                               "has no config.json"),
    "get_record(42)": (lambda w: vocabshift.get_record(42), E.RecordError, "int carries no vocabshift record"),
    # tokenizers, corpora, word vectors, methods
    "train_tokenizer texts=[]": (lambda w: vocabshift.train_tokenizer([], like=w.source, vocab_size=800),
                                 E.CorpusError, "texts holds no text"),
    "train_tokenizer texts=str": (lambda w: vocabshift.train_tokenizer("text", like=w.source, vocab_size=800),
                                  E.CorpusError, "texts is a str"),
    "train_tokenizer texts=[1]": (lambda w: vocabshift.train_tokenizer([1], like=w.source, vocab_size=800),
                                  E.CorpusError, "texts holds a int"),
    "train_tokenizer vocab_size=0": (lambda w: vocabshift.train_tokenizer(w.ru, like=w.source, vocab_size=0),
                                     E.InvalidArgumentError, "vocab_size=0"),
    "train_tokenizer vocab_size=10": (lambda w: vocabshift.train_tokenizer(w.ru, like=w.source, vocab_size=10),
                                      E.InvalidArgumentError, "vocab_size=10"),
    "train_tokenizer vocab_size=16000.0": (lambda w: vocabshift.train_tokenizer(w.ru, like=w.source,
                                                                                vocab_size=16000.0),
                                           E.InvalidArgumentTypeError, "vocab_size=16000.0 is a float: pass an int"),
    "callback rows of a float tensor": (lambda w: EmbeddingOnlyCallback(rows=torch.tensor([1.0])),
                                        E.InvalidArgumentError, "rows=tensor([1.]) is invalid"),
    "train_tokenizer like=42": (lambda w: vocabshift.train_tokenizer(w.ru, like=42, vocab_size=800),
                                E.InvalidTokenizerError, "like is a int"),
    "train_tokenizer min_frequency=0": (lambda w: vocabshift.train_tokenizer(w.ru, like=w.source, vocab_size=800,
                                                                             min_frequency=0),
                                        E.InvalidArgumentError, "min_frequency=0"),
    "merge source=42": (lambda w: vocabshift.merge_tokenizers(42, w.new), E.InvalidTokenizerError, "source is a int"),
    "merge new=None": (lambda w: vocabshift.merge_tokenizers(w.source, None), E.InvalidTokenizerError,
                       "new is a NoneType"),
    "merge keep without texts": (lambda w: vocabshift.merge_tokenizers(w.source, w.new, keep_source_segmentation=True),
                                 E.InvalidArgumentError, "keep_source_segmentation=True needs source_texts"),
    "align source=42": (lambda w: vocabshift.align(42, w.new), E.InvalidTokenizerError, "source is a int"),
    "probe with another model's source_tokenizer": (  # the original was scored with it: a raw IndexError
        lambda w: vocabshift.probe(w.model, w.new, w.ru[:30], w.ru[30:40], methods=["mean"], steps=1,
                                   source_tokenizer=w.new), E.TokenizerMismatchError,
        "source_tokenizer has 900 tokens but Qwen2ForCausalLM has"),
    "probe output_dir inside the model's folder": (
        lambda w: vocabshift.probe(Qwen2ForCausalLM.from_pretrained(w.root / "extended"), w.new, w.ru[:30],
                                   w.ru[30:40], methods=["mean"], steps=1, output_dir=w.root / "extended" / "probe"),
        E.InvalidArgumentError,
        "/probe' is inside the input model="),
    "probe objectives twice": (
        lambda w: vocabshift.probe(w.model, w.new, w.ru[:30], w.ru[30:40], methods=["mean"], steps=1,
                                   objectives=["next_token", "next_token"]), E.InvalidArgumentError,
        "objectives=['next_token', 'next_token'] names an objective more than once"),
    "tokens_per_word texts=a dataset's batch": (lambda w: vocabshift.tokens_per_word(w.source, {"text": w.ru}),
                                                E.CorpusError, "texts is a dict (a dataset's batch of columns?): "
                                                "pass its column of lines, e.g. batch['text']"),
    "train_tokenizer texts=a dataset's batch": (
        lambda w: vocabshift.train_tokenizer({"text": w.ru}, like=w.source, vocab_size=800), E.CorpusError,
        "texts is a dict (a dataset's batch of columns?)"),
    "train_tokenizer vocab_size=10**9": (  # the trainer reserved memory for them and aborted the process
        lambda w: vocabshift.train_tokenizer(w.ru, like=w.source, vocab_size=10**9), E.InvalidArgumentError,
        "vocab_size=1,000,000,000 is invalid: pass at most 1,048,576"),
    "evaluate texts=a 0-d tensor": (lambda w: vocabshift.evaluate(w.extended, w.extended_tokenizer,
                                                                  torch.tensor(1)),
                                    E.InvalidArgumentTypeError, "texts is a Tensor"),
    **{f"{function} texts with a lone surrogate": (call, error, message) for function, call, error, message in [
        ("train_tokenizer", lambda w: vocabshift.train_tokenizer(["аб", "вг \udcff"], like=w.source, vocab_size=800),
         E.CorpusError, "texts[1] holds a lone surrogate ('\\udcff' at character 3), which is no text"),
        ("tokens_per_word", lambda w: vocabshift.tokens_per_word(w.source, ["аб \ud800"]), E.CorpusError,
         "texts[0] holds a lone surrogate"),
        ("train_word_vectors", lambda w: vocabshift.train_word_vectors(["аб \ud800"] * 50, cache_dir=w.root / "wv"),
         E.CorpusError, "corpus item 1 holds a lone surrogate"),
        ("evaluate", lambda w: vocabshift.evaluate(w.extended, w.extended_tokenizer, ["аб \ud800"]),
         E.InvalidArgumentError, "texts[0] holds a lone surrogate")]},
    "tokens_per_word texts=[]": (lambda w: vocabshift.tokens_per_word(w.source, []), E.CorpusError, "texts holds no"),
    "tokens_per_word texts=str": (lambda w: vocabshift.tokens_per_word(w.source, "a b"), E.CorpusError,
                                  "texts is a str"),
    "tokens_per_word tokenizer=None": (lambda w: vocabshift.tokens_per_word(None, w.ru), E.InvalidTokenizerError,
                                       "tokenizer is a NoneType"),
    "tokens_per_word tokenizer=a missing path": (lambda w: vocabshift.tokens_per_word(w.root / "no" / "where", w.ru),
                                                 E.TokenizerLoadError, "does not exist, and it is not a Hub repo id"),
    "evaluate texts=[]": (lambda w: vocabshift.evaluate(w.extended, w.extended_tokenizer, []),
                          E.InvalidArgumentError, "texts is empty"),
    "evaluate against itself": (lambda w: vocabshift.evaluate(w.extended, w.extended_tokenizer, w.ru[:4],
                                                              original_model=w.extended,
                                                              original_tokenizer=w.extended_tokenizer),
                                E.InvalidArgumentError, "original_model is model itself, so the comparison would show"),
    "evaluate model=None": (lambda w: vocabshift.evaluate(None, w.extended_tokenizer, w.ru[:4]),
                            E.InvalidArgumentTypeError, "model is a NoneType"),
    "evaluate with the original tokenizer": (lambda w: vocabshift.evaluate(w.extended, w.source, w.ru[:4]),
                                             E.TokenizerMismatchError, "tokenizer is not the tokenizer returned"),
    "get_method('nope')": (lambda w: vocabshift.get_method("nope"), E.UnknownMethodError, "Unknown method 'nope'"),
    "word vectors path=None": (lambda w: vocabshift.load_word_vectors(None), E.InvalidArgumentTypeError,
                               "path=None is a NoneType: pass a path"),
    "word vectors missing": (lambda w: vocabshift.load_word_vectors(w.root / "nowhere.vec"),
                             E.WordVectorsNotFoundError, "nowhere.vec' does not exist"),
    "word vectors of garbage": (lambda w: vocabshift.load_word_vectors(w.root / "garbage.vec"), E.WordVectorsError,
                                "garbage.vec"),
    "train_word_vectors corpus=[]": (lambda w: vocabshift.train_word_vectors([], dim=8), E.CorpusError,
                                     "holds no text"),
    "tokens_per_word texts=[None]": (lambda w: vocabshift.tokens_per_word(w.source, ["a", None]), E.CorpusError,
                                     "texts holds a NoneType"),
    # the held-out metrics and the packing helper of vocabshift.training
    "bits_per_byte texts=str": (_bits(texts="a line"), E.InvalidArgumentTypeError, "texts is a str"),
    "bits_per_byte texts=[None]": (_bits(texts=["a", None]), E.InvalidArgumentTypeError, "texts[1] is a NoneType"),
    "bits_per_byte batch_size=0": (_bits(batch_size=0), E.InvalidArgumentError, "batch_size=0"),
    "bits_per_byte context_length=1": (_bits(context_length=1), E.InvalidArgumentError, "context_length=1"),
    "bits_per_byte context_length=-5": (_bits(context_length=-5), E.InvalidArgumentError, "context_length=-5"),
    "bits_per_byte prefix beyond the rows": (_bits(prefix_token_id=10**9), E.InvalidArgumentError,
                                             "prefix_token_id=1000000000 is invalid"),
    "bits_per_byte context beyond the model's positions": (
        lambda w: bits_per_byte(w.model, w.source, w.ru[:2], context_length=10**7), E.InvalidArgumentError,
        "context_length=10000000 is longer than the "),
    "bits_per_byte prefix=-1": (_bits(prefix_token_id=-1), E.InvalidArgumentError, "prefix_token_id=-1"),
    "pack_texts texts=str": (lambda w: pack_texts("a b", w.source, max_length=16), E.CorpusError, "texts is a str"),
    "pack_texts texts=[None]": (lambda w: pack_texts([None], w.source, max_length=16), E.CorpusError,
                                "texts holds a NoneType"),
    "pack_texts max_length=1": (lambda w: pack_texts(w.ru[:4], w.source, max_length=1), E.InvalidArgumentError,
                                "max_length=1"),
    "pack_texts tokenizer=None": (lambda w: pack_texts(w.ru[:4], None, max_length=16), E.InvalidTokenizerError,
                                  "tokenizer is a NoneType"),
    "Evaluation.add_to_record(a folder)": (
        lambda w: vocabshift.Evaluation((), 0, 0).add_to_record(str(w.root / "extended")), E.InvalidArgumentTypeError,
        "model is a str: pass the model object this evaluation scored"),
    "Evaluation.from_dict of a damaged entry": (
        lambda w: vocabshift.Evaluation.from_dict({"scores": [{"label": 1}], "num_texts": 1, "num_bytes": 1}),
        E.RecordError, "an entry of 'evaluations' is {'scores': [{'label': 1}]"),
    "pack_texts blocks='yes'": (lambda w: pack_texts(w.ru[:4], w.source, max_length=16, blocks="yes"),
                                E.InvalidArgumentTypeError, "blocks='yes' is invalid: pass True or False"),
    "collator tokenizer=None": (lambda w: DistillationCollator(None, w.source), E.InvalidTokenizerError,
                                "tokenizer is a NoneType"),
    "collator teacher_tokenizer=None": (lambda w: DistillationCollator(w.extended_tokenizer, None),
                                        E.InvalidTokenizerError, "teacher_tokenizer is a NoneType"),
    "collator called on a str": (lambda w: DistillationCollator(w.extended_tokenizer, w.source)("a line"),
                                 E.InvalidArgumentError, "DistillationCollator got a str"),
    "TeacherSchedule(None)": (lambda w: TeacherSchedule(None), E.InvalidArgumentTypeError,
                              "weights is a NoneType"),
    "merge target_texts=str": (lambda w: vocabshift.merge_tokenizers(w.source, w.new, target_texts="a line"),
                               E.CorpusError, "target_texts is a str"),
    "merge source_texts=[None]": (lambda w: vocabshift.merge_tokenizers(w.source, w.new, source_texts=[None]),
                                  E.CorpusError, "source_texts holds a NoneType"),
    "merge keep='x'": (lambda w: vocabshift.merge_tokenizers(w.source, w.new, keep_source_segmentation="x"),
                       E.InvalidArgumentTypeError, "keep_source_segmentation='x' is invalid"),
    # found by trying more bad inputs: each was a raw error, a wrong cause, or silently accepted
    "probe output_dir=a file": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean"],
                                                           source_tokenizer=w.source, output_dir=w.root / "file.txt"),
                                E.ModelFolderError, "file.txt' is a file: pass a folder"),
    "probe methods twice": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean", "mean"]),
                            E.InvalidArgumentError, "methods=['mean', 'mean'] is invalid: pass a list of distinct"),
    "probe methods=5": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=5),
                        E.InvalidArgumentError, "methods=5 is invalid"),
    "probe output_dir=42": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean"],
                                                       source_tokenizer=w.source, output_dir=42),
                            E.InvalidArgumentTypeError, "output_dir=42"),
    "card language=5": (lambda w: vocabshift.model_card(w.root / "extended", language=5), E.InvalidArgumentTypeError,
                        "language=5 is invalid"),
    "card datasets=[None]": (lambda w: vocabshift.model_card(w.root / "extended", datasets=[None]),
                             E.InvalidArgumentTypeError, "datasets=[None] is invalid"),
    "card of ''": (lambda w: vocabshift.model_card(""), E.InvalidArgumentError,  # it described the current folder
                   "folder_or_model is an empty path"),
    "card base_model=''": (lambda w: vocabshift.model_card(w.root / "extended", base_model=""),
                           E.InvalidArgumentTypeError, "base_model='' is invalid"),
    "card base_model='org/m--v2'": (lambda w: vocabshift.model_card(w.root / "extended", base_model="org/m--v2"),
                                    E.InvalidArgumentError, "base_model='org/m--v2' is not a Hub repo id"),
    "card license=3": (lambda w: vocabshift.model_card(w.root / "extended", license=3), E.InvalidArgumentTypeError,
                       "license=3 is invalid"),
    "card repo_id='a b'": (lambda w: vocabshift.model_card(w.root / "extended", repo_id="a b"),
                           E.InvalidArgumentError, "repo_id='a b' is not a Hub repo id"),
    "inspect a config of a wrong field type": (
        lambda w: vocabshift.inspect_folder(w.root / "float-vocab-size"), E.ModelFolderError,
        "config.json' cannot be read (StrictDataclassFieldValidationError: Validation error for field 'vocab_size'"),
    "push a config of a wrong field type": (
        lambda w: vocabshift.push_to_hub(w.root / "float-vocab-size", "me/x"), E.ModelFolderError,
        "config.json' cannot be read (StrictDataclassFieldValidationError: Validation error for field 'vocab_size'"),
    "card of a damaged CPT command": (lambda w: vocabshift.model_card(w.root / "bad-history"), E.RecordError,
                                      "'cpt'[0]['command'] is [1, 2]"),
    **{f"push a token {what}": (lambda w, token=token: vocabshift.push_to_hub(w.root / "extended", "me/x",
                                                                              token=token),
                                E.InvalidArgumentError, f"token holds a character an HTTP header cannot carry (a "
                                f"space, a line break or a non-ASCII letter, at position {at} of")
       for what, token, at in [("ending in a line break", "hf_secret\n", 9), ("of Cyrillic letters", "hf_токен", 3),
                               ("with a space", "hf_se cret", 5)]},
    "push a damaged CPT command": (lambda w: vocabshift.push_to_hub(w.root / "bad-history", "me/x", token="hf_x"),
                                   E.ModelFolderError, "'cpt'[0]['command'] is [1, 2]"),
    "card of a broken config": (lambda w: vocabshift.model_card(w.root / "broken-config"), E.ModelFolderError,
                                "config.json' cannot be read (JSONDecodeError"),
    "propagate a broken config": (lambda w: vocabshift.propagate(w.root / "broken-config", w.root / "extended",
                                                                 w.root / "extended", output_dir=w.root / "out-9"),
                                  E.ModelFolderError, "config.json' cannot be read (JSONDecodeError"),
    "gguf of a folder without weights": (  # the converter wrote a GGUF without tensors
        lambda w: vocabshift.export_gguf(w.root / "no-weights", w.root / "out.gguf"), E.ModelFolderError,
        "no-weights' has no *.safetensors weights: pass a folder written by save_pretrained, or vocab_only=True"),
    "gguf of a truncated shard": (lambda w: vocabshift.export_gguf(w.root / "truncated", w.root / "out.gguf"),
                                  E.ShardError, "model.safetensors' is not a valid safetensors file"),
    "inspect gguf='yes'": (lambda w: vocabshift.inspect_folder(w.root / "extended", gguf="yes"),
                           E.InvalidArgumentTypeError, "gguf='yes'"),
    "save with the original tokenizer": (lambda w: vocabshift.save_pretrained_atomic(w.extended, w.source,
                                                                                     w.root / "out-10"),
                                         E.TokenizerMismatchError, "tokenizer is the tokenizer the model was extended"),
    "save a peft model around an extended one": (
        lambda w: vocabshift.save_pretrained_atomic(get_peft_model(copy.deepcopy(w.extended), LoraConfig(
            r=2, target_modules=["q_proj"])), w.extended_tokenizer, w.root / "out-12"), E.UnsupportedModelError,
        "model is a peft PeftModel around an extended model, and its save_pretrained writes the adapter alone"),
    "save after resize_token_embeddings deleted new rows": (
        lambda w: vocabshift.save_pretrained_atomic(_resized(w.extended, len(w.source)), w.extended_tokenizer,
                                                    w.root / "out-14"),
        E.TokenizerMismatchError, "model has 700 embedding rows but extend_vocabulary gave it 1408 (its record says "
        "so): a resize after it deleted the rows of 708 tokens of the extended vocabulary"),
    "save a tokenizer given a token after extend_vocabulary": (
        lambda w: vocabshift.save_pretrained_atomic(w.extended, _with_a_marker(w.extended_tokenizer),
                                                    w.root / "out-13"),
        E.TokenizerMismatchError, "Give them rows first (model.resize_token_embeddings(len(tokenizer)), then train"),
    "save with the new tokenizer": (lambda w: vocabshift.save_pretrained_atomic(w.extended, w.new, w.root / "out-11"),
                                    E.TokenizerMismatchError, "tokenizer is the new tokenizer given to extend_vocab"),
    "train_word_vectors cache_dir=a file": (
        lambda w: vocabshift.train_word_vectors(w.ru, cache_dir=w.root / "file.txt"), E.InvalidArgumentError,
        "file.txt' is a file: pass a folder"),
    "train_word_vectors cache_dir=3": (lambda w: vocabshift.train_word_vectors(w.ru, cache_dir=3),
                                       E.InvalidArgumentTypeError, "cache_dir=3 is a int"),
    "gguf llama_cpp=3": (lambda w: vocabshift.export_gguf(w.root / "extended", w.root / "o.gguf", llama_cpp=3),
                         E.InvalidArgumentTypeError, "llama_cpp=3 is a int"),
    "probe objectives=5": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean"],
                                                      objectives=5), E.InvalidArgumentError, "objectives=5 is invalid"),
    "probe method_options of a number": (  # dict(3) raised a raw TypeError
        lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["subword"],
                                   method_options={"subword": 3}), E.InvalidArgumentError,
        "method_options['subword']=3 is invalid: pass a dict of that method's options"),
    "probe method_options='x'": (lambda w: vocabshift.probe(w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean"],
                                                            method_options="x"),
                                 E.InvalidArgumentError, "method_options='x' is invalid: pass a dict"),
    "distillation args=42": (_distill(args=42), E.InvalidArgumentTypeError, "args is a int: pass TrainingArguments"),
    "train_word_vectors dim=0": (lambda w: vocabshift.train_word_vectors(w.ru, dim=0), E.InvalidArgumentError,
                                 "dim=0"),
    "train_word_vectors epochs=-1": (lambda w: vocabshift.train_word_vectors(w.ru, epochs=-1),
                                     E.InvalidArgumentError, "epochs=-1"),
    "train_word_vectors min_count=True": (lambda w: vocabshift.train_word_vectors(w.ru, min_count=True),
                                          E.InvalidArgumentTypeError, "min_count=True"),
    "train_word_vectors bucket=2**31": (lambda w: vocabshift.train_word_vectors(w.ru, bucket=2**31),
                                        E.InvalidArgumentError, "bucket=2147483648 is invalid: pass an int in [1, "
                                        "2**31) (fastText's range)"),
    "train_word_vectors of a dim beyond memory": (  # fastText's std::bad_alloc was blamed on the corpus
        lambda w: vocabshift.train_word_vectors(w.ru, dim=10**9, cache_dir=w.root / "junk"), E.InvalidArgumentError,
        "fastText ran out of memory: its matrices hold (words + bucket) x dim floats, with bucket=100000 and "
        "dim=1000000000. Pass a smaller dim or bucket."),
    "train_word_vectors model='glove'": (lambda w: vocabshift.train_word_vectors(w.ru, model="glove"),
                                         E.InvalidArgumentError, "model='glove' is invalid"),
    "word vectors level='chars'": (lambda w: vocabshift.load_word_vectors(w.root / "garbage.vec", level="chars"),
                                   E.InvalidArgumentError, "level='chars' is invalid"),
    "word vectors from a folder": (lambda w: vocabshift.load_word_vectors(w.root / "junk"), E.WordVectorsError,
                                   "junk' is a folder"),
    "bits_per_byte model=a tokenizer": (lambda w: bits_per_byte(w.source, w.source, w.ru[:2]),
                                        E.InvalidArgumentTypeError, "model is a"),
    "bits_per_byte tokenizer=42": (lambda w: bits_per_byte(w.extended, 42, w.ru[:2]), E.InvalidTokenizerError,
                                   "tokenizer is a int"),
    "distillation DatasetDict": (_distill(train_dataset=At(lambda w: DatasetDict({"train": Dataset.from_dict(
        {"text": w.ru[:4]})}))), E.InvalidArgumentTypeError, "train_dataset is a DatasetDict of ['train']: pass one"),
    "distillation dataset without text column": (
        _distill(train_dataset=At(lambda w: Dataset.from_dict({"content": w.ru[:4]}))), E.InvalidArgumentError,
        "train_dataset has the columns ['content'] and no 'text'"),
    "distillation eval dataset without text column": (
        _distill(eval_dataset=At(lambda w: {"ru": Dataset.from_dict({"body": w.ru[:4]})})), E.InvalidArgumentError,
        "eval_dataset['ru'] has the columns ['body'] and no 'text'"),
    "distillation train_dataset=str": (_distill(train_dataset="a line"), E.InvalidArgumentTypeError,
                                       "train_dataset is a str"),
    "distillation evaluate of one string": (  # a raw TypeError: the Trainer reads a string as a dataset's name
        _scored("evaluate", "a line of text"), E.InvalidArgumentTypeError, "eval_dataset is a str: pass a list"),
    "distillation evaluate of a name it was not given": (_scored("evaluate", "de", eval_dataset=At(lambda w: {
        "ru": w.ru[4:6]})), E.InvalidArgumentError, "eval_dataset='de' names none of the trainer's eval datasets "
        "['ru']"),
    "distillation evaluate of a dataset without text column": (  # the Trainer's ValueError told to keep the column
        _scored("evaluate", At(lambda w: Dataset.from_dict({"content": w.ru[:4]}))), E.InvalidArgumentError,
        "eval_dataset has the columns ['content'] and no 'text'"),
    "distillation predict of one string": (  # scored its characters, one a sequence
        _scored("predict", "a line of text"), E.InvalidArgumentTypeError, "test_dataset is a str: pass a list"),
    "distillation predict of a DatasetDict": (_scored("predict", At(lambda w: DatasetDict({"test": Dataset.from_dict(
        {"text": w.ru[:4]})}))), E.InvalidArgumentTypeError, "test_dataset is a DatasetDict of ['test']: pass one"),
    "distillation with label smoothing": (_distill(args=At(lambda w: _args(w, label_smoothing_factor=0.1))),
                                          E.InvalidArgumentError, "label_smoothing_factor=0.1"),
    "distillation compute_loss_func": (_distill(compute_loss_func=lambda outputs, labels, num_items_in_batch: 0),
                                       E.InvalidArgumentError, "compute_loss_func is given"),
    "distillation data_collator=function": (_distill(data_collator=lambda examples: examples),
                                            E.InvalidArgumentTypeError, "data_collator is a function"),
    "distillation with two callbacks": (_distill(callbacks=[EmbeddingOnlyCallback(), EmbeddingOnlyCallback()]),
                                        E.TrainingSetupError, "more than one EmbeddingOnlyCallback"),
    "register_method name=None": (lambda w: vocabshift.register_method(None, config_class=_Options, pretty_name="X"),
                                  E.InvalidArgumentError, "Method name None is invalid"),
    "register_method pretty_name=None": (lambda w: vocabshift.register_method("bad_name", config_class=_Options,
                                                                              pretty_name=None),
                                         E.InvalidArgumentError, "pretty_name=None for 'bad_name' is invalid"),
    "register_method on a non-function": (lambda w: vocabshift.register_method("bad_target", config_class=_Options,
                                                                               pretty_name="X")(42),
                                          E.InvalidArgumentTypeError, "register_method('bad_target') decorates a int"),
    "align keep_source_ids='yes'": (lambda w: vocabshift.align(w.source, w.new, keep_source_ids="yes"),
                                    E.InvalidArgumentTypeError, "keep_source_ids='yes'"),
    "align new=42": (lambda w: vocabshift.align(w.source, w.new, new=42), E.InvalidTokenizerError, "new is a int"),
    "LoRA on no module of the model": (_callback_trainer(second_stage=SecondStage(
        after_step=1, lora=LoraConfig(r=2, target_modules=["nonexistent"]))), E.InvalidArgumentError,
        "LoraConfig(target_modules={'nonexistent'}) names no module of Qwen2ForCausalLM"),
    "WordVectors words=None": (lambda w: vocabshift.WordVectors(None, torch.zeros(2, 3)), E.WordVectorsError,
                               "words=None is invalid: pass a list of strings"),
    "WordVectors vectors='x'": (lambda w: vocabshift.WordVectors(["a"], "x"), E.WordVectorsError,
                                "vectors is a str that is no matrix of numbers"),
    "distillation max_length=None": (_distill(max_length=None), E.InvalidArgumentError, "max_length=None"),
    "WordVectors level='chars'": (lambda w: vocabshift.WordVectors(["a"], [[1.0]], level="chars"),
                                  E.InvalidArgumentError, "level='chars' is invalid"),
    "push a folder without its embeddings": (lambda w: vocabshift.push_to_hub(w.root / "no-embeddings", "me/x"),
                                             E.ModelFolderError, "no input embedding tensor"),
    "push a folder whose embeddings are short": (lambda w: vocabshift.push_to_hub(w.root / "short-embeddings",
                                                                                  "me/x"),
                                                 E.ModelFolderError, "would publish a model that does not load"),
    "gguf output_path=''": (lambda w: vocabshift.export_gguf(w.root / "extended", ""), E.InvalidArgumentError,
                            "output_path is an empty path"),
    "gguf under a file": (lambda w: vocabshift.export_gguf(w.root / "extended", w.root / "file.txt" / "out.gguf"),
                          E.InvalidArgumentError, "file.txt/out.gguf' cannot be written: "),
    "save under a file": (lambda w: vocabshift.save_pretrained_atomic(w.extended, w.extended_tokenizer,
                                                                      w.root / "file.txt" / "a" / "out"),
                          E.InvalidArgumentError, "file.txt' is a file, not a folder"),
    "propagate a loaded model": (  # the message held the repr of the whole module tree
        lambda w: vocabshift.propagate(w.extended, w.model, w.model, output_dir=w.root / "out-15"),
        E.InvalidArgumentTypeError, "adapted is a Qwen2ForCausalLM object: this step reads saved folders, so save it "
        "first (its save_pretrained(folder), or vocabshift.save_pretrained_atomic"),
    "inspect a loaded tokenizer": (lambda w: vocabshift.inspect_folder(w.source), E.InvalidArgumentTypeError,
                                   " object: this step reads saved folders, so save it first"),
    "propagate under a file": (lambda w: vocabshift.propagate(w.root / "extended", w.root / "extended",
                                                              w.root / "extended", output_dir=w.root / "file.txt/o"),
                               E.InvalidArgumentError, "file.txt/o' cannot be written"),
    "bits_per_byte of a model on the meta device": (  # the fix named extend_vocabulary, which this call is not
        lambda w: bits_per_byte(_on_meta(w), w.source, w.ru[:2]), E.UnsupportedModelError,
        "Qwen2ForCausalLM holds its input embeddings on the meta device: the values are not loaded (a model built "
        "under torch.device('meta') or init_empty_weights, or offloaded by device_map / cpu_offload). Load the "
        "weights first: from_pretrained(...) without a device_map that offloads, then pass that model."),
    "probe under a file (before training)": (lambda w: vocabshift.probe(
        w.model, w.new, w.ru[:8], w.ru[8:10], methods=["mean"], steps=1, output_dir=w.root / "file.txt" / "probe"),
        E.InvalidArgumentError, "file.txt' is a file, not a folder"),
}


def _record(**changes):
    """`get_record` of a copy of the extended model's config whose record has `changes` (`record=` replaces it)."""
    def call(w):
        config = copy.deepcopy(w.extended.config)
        record = changes.get("record", {**config.vocabshift, **changes})
        config.vocabshift = record
        return vocabshift.get_record(config).decomposition_lists()
    return call


DAMAGED_RECORDS = {
    "record that is a str": (_record(record="garbage"), "it is a str ('garbage'), where vocabshift writes"),
    "record lacking its keys": (_record(record={"mode": "extend"}), "it lacks ['decompositions'"),
    "record ranges as a str": (_record(new_token_ranges="1-2"), "'new_token_ranges' is '1-2'"),
    "record ranges past the matrix": (_record(new_token_ranges=[[10, 10**6]]),
                                      "'new_token_ranges' holds [10, 1000000]"),
    "record ranges reversed": (_record(new_token_ranges=[[20, 10]]), "'new_token_ranges' holds [20, 10]"),
    "record of an unknown mode": (_record(mode="sideways"), "'mode' is 'sideways'"),
    "record history of a str": (_record(cpt="trained"), "'cpt' is 'trained'"),
    "record seed of a str": (_record(seed="0"), "'seed' is '0'"),
    "record decompositions of other ids": (_record(new_token_ranges=[[10, 11]]),
                                           "'decompositions' holds "),
    "record decompositions unpacked": (_record(decompositions={"ids": "x", "lengths": "y"}),
                                       "a packed id list is corrupted"),
    "record CPT command of numbers": (_record(cpt=[{"command": [1, 2]}]), "'cpt'[0]['command'] is [1, 2], where "
                                      "vocabshift writes a list of strings"),
    "record propagation command of a number": (_record(propagation=[{"command": 5}]),
                                               "'propagation'[0]['command'] is 5"),
    "record propagation command of an open quote": (_record(propagation=[{"command": "vocabshift 'propagate"}]),
                                                    "'propagation'[0]['command'] is \"vocabshift 'propagate\""),
    "record tokens_dropped of a str": (_record(tokenizer_report={"tokens_dropped": "many"}),
                                       "'tokenizer_report'['tokens_dropped'] is 'many', where vocabshift writes a "
                                       "whole number"),
    "record source_lines_changed of a str": (_record(tokenizer_report={"source_lines_changed": "0.5"}),
                                             "'tokenizer_report'['source_lines_changed'] is '0.5', where vocabshift "
                                             "writes a number or null"),
    "record source_is_folder of a str": (_record(source_is_folder="yes"), "'source_is_folder' is 'yes'"),
    "record of an extension that shrank": (_record(old_vocab_size=10**6), "not above 'old_vocab_size' (1000000), "
                                           "where an extension adds tokens"),
}
API.update({name: (call, E.RecordError, message) for name, (call, message) in DAMAGED_RECORDS.items()})


def _state(w):
    return ({k: v.clone() for k, v in w.model.state_dict().items()}, w.model.config.to_dict(),
            sorted(str(p.relative_to(w.root)) for p in w.root.rglob("*") if "runs" not in p.parts))


@pytest.mark.parametrize("case", sorted(API))
def test_api(w, case):
    call, error, message = API[case]
    before = _state(w)
    with pytest.raises(error, match=None) as info:
        call(w)
    assert message in str(info.value), str(info.value)
    after = _state(w)
    assert after[2] == before[2]  # nothing written or half-written
    assert after[1] == before[1] and all(torch.equal(after[0][k], v) for k, v in before[0].items())


CLI = {
    "extend into its own folder": (["extend", "{extended}", "{extended}", "{extended}"], "is the folder of the input"),
    "extend a missing model": (["extend", "{root}/nowhere", "{extended}", "{root}/out"], "is neither a folder"),
    "extend unrelated data": (["extend", "{root}/junk", "{extended}", "{root}/out"], "has no config.json"),
    "propagate into a peft adapter folder": (["propagate", "{extended}", "{extended}", "{root}/adapter", "{root}/out"],
                                             "/adapter' has no config.json: it holds a peft adapter"),
    "extend a peft adapter folder": (["extend", "{root}/adapter", "{extended}", "{root}/out"],
                                     "has no config.json: it holds a peft adapter (adapter_config.json), not a model"),
    "extend a model whose index maps no tensor": (["extend", "{root}/index-of-nothing", "{extended}", "{root}/out"],
                                                  "model.safetensors.index.json' is not a shard index"),
    "extend with a broken tokenizer": (["extend", "{extended}", "{root}/broken-json", "{root}/out"],
                                       "Could not load new_tokenizer"),
    "extend into unrelated data": (["extend", "{extended}", "{extended}", "{root}/junk"], "holds no saved model"),
    "extend into a project with a config.json": (["extend", "{extended}", "{extended}", "{root}/project"],
                                                 "holds 'NOTES.md', 'src/', which a saved model does not have"),
    "extend into ''": (["extend", "{extended}", "{extended}", ""], "output_dir is an empty path"),
    "extend --seed 2**32": (["extend", "{extended}", "{extended}", "{root}/out", "--seed", "4294967296"],
                            "argument --seed: '4294967296' is not an integer in [0, 2**32)"),
    "a tokenizer over a model": (["tokenizer", "{extended}", "{root}/ru.txt", "{root}/truncated", "--vocab-size",
                                  "300"], "truncated' holds 'config.json', 'generation_config.json', "
                                          "'model.safetensors', which a saved tokenizer does not have"),
    "extend unknown method": (["extend", "{extended}", "{extended}", "{root}/out", "--method", "nope"],
                              "Unknown method 'nope'"),
    "extend bad option": (["extend", "{extended}", "{extended}", "{root}/out", "--option", "foo"], "KEY=VALUE"),
    "extend --option seed=3": (["extend", "{extended}", "{extended}", "{root}/out", "--option", "seed=3"],
                               "--option seed is no method option but an argument of extend: pass --seed instead."),
    "extend with a helper_model folder that is no model": (
        ["extend", "{extended}", "{extended}", "{root}/out", "--method", "salt", "--option",
         "helper_model={root}/junk", "--option", "word_vectors={root}/file.txt"], "has no config.json"),
    "train with missing texts": (["train", "{extended}", "{root}/nowhere.txt", "{root}/out"], "nowhere.txt"),
    "train into its own folder": (["train", "{extended}", "{root}/file.txt", "{extended}"],
                                  "is the folder of the input"),
    "extend into a folder inside its input": (["extend", "{extended}", "{extended}", "{extended}/ru"],
                                              "/ru' is inside the input model='"),
    "propagate into a folder inside instruct": (["propagate", "{extended}", "{extended}", "{root}/junk",
                                                 "{root}/junk/out"], "junk/out' is inside the input instruct='"),
    "train steps=0": (["train", "{extended}", "{root}/file.txt", "{root}/out", "--max-steps", "0"],
                      "--max-steps: '0' is not an integer"),
    "train a plain model": (["train", "{root}/junk", "{root}/file.txt", "{root}/out"], "has no config.json"),
    "train a model without record": (["train", "{root}/plain", "{root}/file.txt", "{root}/out"],
                                     "plain' carries no vocabshift record (its config.json has no 'vocabshift' key): "
                                     "train the folder vocabshift extend wrote, or pass --rows all --objective "
                                     "next_token"),
    "train a model resized after extend": (["train", "{root}/grown", "{root}/file.txt", "{root}/out", "--objective",
                                            "next_token", "--context-length", "2"],
                                           "resized after extend_vocabulary. Pass the row ids to train explicitly "
                                           "(rows=[...]); vocabshift train, which takes no ids, trains the new rows "
                                           "of a model with the record's size"),
    "train next_token with teacher flags": (["train", "{extended}", "{root}/file.txt", "{root}/out", "--objective",
                                             "next_token", "--teacher-dtype", "float16", "--source-weight", "0"],
                                            "--teacher-dtype, --source-weight apply to distillation only"),
    "train all rows with a teacher share": (["train", "{extended}", "{root}/file.txt", "{root}/out", "--rows", "all",
                                             "--teacher-share", "0.5"],
                                            "--teacher-share applies to distillation only, and this run trains with "
                                            "cross-entropy (which --objective auto picks"),
    "propagate into existing data": (["propagate", "{extended}", "{extended}", "{extended}", "{root}/junk"],
                                     "output_dir="),
    "propagate a bad method": (["propagate", "{extended}", "{extended}", "{extended}", "{root}/out", "--method", "x"],
                               "invalid choice: 'x'"),
    "push a bad repo id": (["push", "{extended}", "a/b/c"], "repo_id='a/b/c' is not a Hub repo id"),
    "push a missing folder": (["push", "{root}/nowhere", "me/x"], "is not a folder"),
    "card of unrelated data": (["card", "{root}/junk"], "has no config.json"),
    "inspect a file": (["inspect", "{root}/file.txt"], "file.txt' is a file, not a folder"),
    "card of a Hub id": (["card", "me/smollm2-ru"], "download it first (hf download me/smollm2-ru --local-dir DIR)"),
    "gguf of a Hub id": (["gguf", "me/smollm2-ru", "{root}/out.gguf"],
                         "model_dir='me/smollm2-ru' does not exist (this step reads local folders only)"),
    "tokenizer from a missing file": (["tokenizer", "{extended}", "{root}/nowhere.txt", "{root}/out",
                                       "--vocab-size", "800"], "nowhere.txt"),
    "evaluate missing texts": (["evaluate", "{extended}", "{root}/nowhere.txt"], "nowhere.txt"),
    "tokenizer over its texts file": (["tokenizer", "{extended}", "{root}/file.txt", "{root}/file.txt"],
                                      "file.txt' is the input texts='"),
    "train where the record's source model is not": (
        ["train", "{root}/relative-source", "{root}/file.txt", "{root}/out"],
        "the record's source_model 'base-model' (where extend read the model), which cannot be loaded from here ("),
    "evaluate against itself": (["evaluate", "{extended}", "{root}/file.txt", "--original-model", "{extended}/"],
                                "is the model itself, so the comparison would show two equal rows"),
    "evaluate a cache snapshot into its record": (  # it wrote into the blob every snapshot links to
        ["evaluate", "{root}/snapshot", "{root}/ru.txt", "--add-to-record"],
        "/blobs/config.json' that other copies (a Hugging Face cache's snapshots) share and the cache checks by hash"),
    "card into a cache snapshot": (  # with --force it wrote through README.md's link, into the shared blob
        ["card", "{root}/hub/models--me--m/snapshots/0123abc", "--force"],
        "models--me--m/snapshots/0123abc/README.md' is in a Hugging Face cache snapshot ('"),
    # each replaced the snapshot's links to blobs by the new model, which from_pretrained("me/m") then loaded
    **{f"{words[0]} into a Hugging Face cache snapshot": (
        words, f"{words[-1].format(root='')}' is in a Hugging Face cache snapshot ('")
       for words in (["extend", "{extended}", "{extended}", "{root}/hub/models--me--m/snapshots/0123abc"],
                     ["propagate", "{extended}", "{extended}", "{extended}", "{root}/cached-link"],
                     ["train", "{extended}", "{root}/file.txt", "{root}/hub/models--me--m/snapshots/0123abc/cpt"],
                     ["gguf", "{extended}", "{root}/cached-link/model.gguf"])},
    # a file of the model folder: transformers' JSON error (extend), the tokenizer's "stream did not contain valid
    # UTF-8" (train), or "check the path, the repo id, instruct_revision and the token" (propagate)
    **{f"{words[0]} a file of the model folder": (words, f"/extended/{name}' is a file, not a folder: pass a folder "
                                                  "written by save_pretrained")
       for name, words in (("model.safetensors", ["extend", "{extended}/model.safetensors", "{extended}",
                                                  "{root}/out"]),
                           ("config.json", ["train", "{extended}/config.json", "{root}/file.txt", "{root}/out"]),
                           ("model.safetensors", ["propagate", "{extended}", "{extended}",
                                                  "{extended}/model.safetensors", "{root}/out"]))},
    # a folder with links that lead nowhere: "has no config.json" (config.json is there, as a link), or the files
    # they stand for left out of the output without a word (a chat template, a license)
    **{f"{words[0]} {words[1 if words[0] != 'propagate' else 3].rsplit('/', 1)[1]}": (
        words, f"{words[1 if words[0] != 'propagate' else 3].rsplit('/', 1)[1]}' holds links that lead nowhere (")
       for words in (["extend", "{root}/copied-snapshot", "{extended}", "{root}/out"],
                     ["extend", "{root}/lost-template", "{extended}", "{root}/out"],
                     ["propagate", "{extended}", "{extended}", "{root}/lost-template", "{root}/out"],
                     ["card", "{root}/copied-snapshot"], ["inspect", "{root}/copied-snapshot"],
                     ["push", "{root}/lost-template", "me/x"], ["gguf", "{root}/copied-snapshot", "{root}/out.gguf"])},
    # a quoted '~' (or one from a config file): "neither a folder nor a Hub repo id: check the path", or "does not
    # exist", with nothing on the '~' no shell expanded (output paths were already refused so)
    **{f"{words[0]} {word} quoted": (words, f"{word}' {said} (it starts with '~', which vocabshift does not expand: "
                                     "a shell does, unquoted at the start of a word; pass '")
       for word, said, words in (
           ("~/vocabshift-nowhere", "is neither a folder nor a Hub repo id",
            ["extend", "~/vocabshift-nowhere", "{extended}", "{root}/out"]),
           ("~/vocabshift-nowhere", "does not exist",
            ["propagate", "~/vocabshift-nowhere", "{extended}", "{extended}", "{root}/out"]),
           ("~/vocabshift-nowhere.txt", "does not exist",
            ["train", "{extended}", "~/vocabshift-nowhere.txt", "{root}/out"]),
           ("~/vocabshift-nowhere", "does not exist", ["card", "~/vocabshift-nowhere"]))},
    "evaluate a Hub id into its record": (["evaluate", "me/model", "{root}/file.txt", "--add-to-record"],
                                          "--add-to-record writes into the config.json of model='me/model', which is "
                                          "no local folder"),
    "evaluate a model folder without tokenizer.json": (["evaluate", "{root}/no-tokenizer-json", "{root}/file.txt"],
                                                       "no-tokenizer-json' has no vocabulary: besides its 3 added"),
    "train at a learning rate that diverges": (["train", "{extended}", "{root}/ru.txt", "{root}/out", "--objective",
                                                "next_token", "--max-steps", "3", "--learning-rate", "1e30",
                                                "--batch-size", "2", "--context-length", "32"],
                                               "Training diverged at step 2: "),
    "evaluate a folder as texts": (["evaluate", "{extended}", "{root}/junk"], "junk' is a folder: pass a UTF-8"),
    "train on a zip archive": (["train", "{extended}", "{root}/texts.zip", "{root}/out", "--objective", "next_token"],
                               "texts.zip' is a zip archive: decompress it first"),
    "propagate into its own base": (["propagate", "{extended}", "{extended}", "{extended}", "{root}/out"],
                                    "pass as base the model adapted was extended from (its record names"),
    "unknown command": (["extnd"], "invalid choice: 'extnd'"),
    "train a truncated model": (["train", "{root}/truncated", "{root}/file.txt", "{root}/out"],
                                "model.safetensors' is not a valid safetensors file"),
    "train without a known original tokenizer": (["train", "{extended}", "{root}/file.txt", "{root}/out"],
                                                 "names no source model"),
    "evaluate a folder without tokenizer": (["evaluate", "{root}/no-tokenizer", "{root}/file.txt"],
                                            "holds no tokenizer"),
    "card of a broken config": (["card", "{root}/broken-config"], "config.json' cannot be read (JSONDecodeError"),
    "extend a config of a wrong field type": (["extend", "{root}/float-vocab-size", "{extended}", "{root}/out"],
                                              "cannot be loaded (StrictDataclassFieldValidationError: Validation "
                                              "error for field 'vocab_size': TypeError: Field 'vocab_size' expected "
                                              "int, got float"),
    "evaluate a config of a wrong field type": (["evaluate", "{root}/float-vocab-size", "{root}/ru.txt"],
                                                "config.json' cannot be read (StrictDataclassFieldValidationError"),
    "gguf over a text file": (["gguf", "{extended}", "{root}/file.txt"], "file.txt' exists and is not a GGUF file"),
    "gguf of a truncated model": (["gguf", "{root}/truncated", "{root}/out.gguf"],
                                  "model.safetensors' is not a valid safetensors file"),
    "probe a method twice": (["probe", "{extended}", "{extended}", "{root}/file.txt", "--methods", "mean", "subword",
                              "mean"], "--methods names mean more than once: name each once."),
    "probe into the model's folder": (["probe", "{extended}", "{extended}", "{root}/file.txt", "--methods", "mean",
                                       "--output-dir", "{extended}/probe"], "is inside the input model="),
    "card into a folder": (["card", "{extended}", "--output", "{root}/junk"], "junk' is a folder"),
    "card under a file": (["card", "{extended}", "--output", "{root}/file.txt/README.md"],
                          "file.txt/README.md' cannot be written"),
    "evaluate a model without its embeddings": (["evaluate", "{root}/no-embeddings", "{root}/file.txt"],
                                                "model.embed_tokens.weight (missing)"),
    "train a model whose embeddings are short": (["train", "{root}/short-embeddings", "{root}/file.txt",
                                                  "{root}/out"], "model.embed_tokens.weight (["),
    **{f"{words[0]} into a symbolic link loop": (words, f"/{words[-1].split('/', 1)[1]}' cannot be written: it is, "
                                                 "or lies under, a symbolic link that leads back to itself")
       # each was a traceback (RuntimeError: Symlink loop)
       for words in (["extend", "{extended}", "{extended}", "{root}/loop"],
                     ["gguf", "{extended}", "{root}/loop/x.gguf"],
                     ["propagate", "{extended}", "{extended}", "{extended}", "{root}/loop"])},
    "extend into ~/out": (["extend", "{extended}", "{extended}", "~/out"],  # it wrote into a new folder named '~'
                          "output_dir='~/out' starts with '~', which vocabshift does not expand (a shell does, "
                          "unquoted at the start of a word): it would write into a new folder named '~' here. Pass '"),
    "extend under a file": (["extend", "{extended}", "{extended}", "{root}/file.txt/out"],
                            "file.txt/out' cannot be written: "),
    "extend with an option twice": (["extend", "{extended}", "{extended}", "{root}/out", "--option",
                                     "input_weighting=uniform", "--option", "input_weighting=char_length"],
                                    "--option input_weighting is given 2 times ('uniform', 'char_length')"),
    "extend with empty source texts": (["extend", "{extended}", "{extended}", "{root}/out", "--source-texts",
                                        "{root}/empty.txt"], "--source-texts='"),
    "train a context longer than the model's positions": (["train", "{extended}", "{root}/file.txt", "{root}/out",
                                                           "--context-length", "10000000"],
                                                          "--context-length=10000000 is longer than the "),
    "card of a damaged record": (["card", "{root}/bad-record"], "'new_token_ranges' is 'all the new ones'"),
    "card of a damaged evaluation": (["card", "{root}/bad-evaluation"], "damaged: an entry of 'evaluations' is "),
    "card of a damaged CPT command": (["card", "{root}/bad-history"], "'cpt'[0]['command'] is [1, 2]"),
    "card over a README that is not UTF-8": (["card", "{root}/utf16-readme"], "utf16-readme/README.md' exists and "
                                             "was not generated by vocabshift: pass --force to overwrite it."),
    **{f"card over the model's {name} with --force": (
        ["card", "{extended}", "--output", f"{{extended}}/{name}", "--force"],
        f"/extended/{name}' is a file of the model folder itself (its config, weights or tokenizer): the card would "
        "replace it, --force or not") for name in ("config.json", "model.safetensors", "tokenizer.json")},
    "train a damaged record": (["train", "{root}/bad-record", "{root}/file.txt", "{root}/out"],
                               "Restore config.json from the folder vocabshift saved"),
    # hand-edited config.json and tokenizer_config.json: each was a raw error, a wrong cause, or a silent loss
    "extend a model whose config lost its architectures": (  # AutoModel loaded it headless: the untied head was lost
        ["extend", "{root}/headless", "{extended}", "{root}/out"], "headless' holds an output head its config.json's "
        "class does not load (lm_head.weight): it would be left out of what vocabshift writes"),
    "train a model of an unknown architecture": (
        ["train", "{root}/unknown-architecture", "{root}/file.txt", "{root}/out"],
        "has \"architectures\": ['FooForCausalLM'] in its config.json, which names no model class of transformers"),
    "evaluate a config of an unknown dtype": (  # the tokenizer's loader was blamed
        ["evaluate", "{root}/bogus-dtype", "{root}/file.txt"],
        "config.json' has \"dtype\": 'bogus', which names no torch dtype"),
    "inspect a config of an unknown dtype": (["inspect", "{root}/bogus-dtype"], "names no torch dtype"),  # raw error
    "evaluate a tokenizer_config of a text model_max_length": (  # a raw TypeError on the first text encoded
        ["evaluate", "{root}/text-max-length", "{root}/file.txt"],
        "text-max-length' has \"model_max_length\": 'abc' in its tokenizer_config.json"),
    "inspect a tokenizer_config of a text model_max_length": (
        ["inspect", "{root}/text-max-length", "--json"],
        "has \"model_max_length\": 'abc' in its tokenizer_config.json, where a number of tokens belongs"),
    "extend with a helper whose tokenizer.json is damaged": (  # a raw JSONDecodeError (or KeyError: 'vocab')
        ["extend", "{extended}", "{extended}", "{root}/out", "--method", "salt", "--option",
         "helper_model={root}/helper-broken-tokenizer", "--option", "word_vectors={root}/file.txt"],
        "helper-broken-tokenizer/tokenizer.json) cannot be read"),
    "train with a weight decay that flips the weights": (  # the message blamed the learning rate
        ["train", "{extended}", "{root}/ru.txt", "{root}/out", "--objective", "next_token", "--max-steps", "3",
         "--weight-decay", "1e30", "--batch-size", "2", "--context-length", "32"],
        "with a weight_decay below 1 / learning_rate (0 to 0.1 is usual): weight_decay=1e+30 with learning_rate=0.001"),
    **{f"{words[0]} {words[-2]} ''": (words, f"argument {words[-2]}: '' is an empty path: pass a path, or leave the "
                                      "flag out for its default")  # each was read as the flag left out: its default
       for words in (["extend", "{extended}", "{extended}", "{root}/out", "--source-texts", ""],  # (the card was
                     ["evaluate", "{extended}", "{root}/ru.txt", "--original-model", ""],  # written into the
                     ["card", "{extended}", "--output", ""],  # model's folder; the comparison left out)
                     ["train", "{extended}", "{root}/ru.txt", "{root}/out", "--teacher-tokenizer", ""])},
    "probe a one-line file": (["probe", "{extended}", "{extended}", "{root}/file.txt", "--methods", "mean"],  # it said
                              "--held-out 200 leaves no line to train on: texts='"),  # "between 1 and 0"
    "extend over a file an option names": (["extend", "{extended}", "{extended}", "{root}/junk", "--method", "focus",
                                            "--option", "word_vectors={root}/junk/notes.txt"],
                                           "is a folder holding the input --option word_vectors="),
}


# transformers said it "couldn't connect to 'https://huggingface.co'" (check the internet connection) for a repo id
# offline mode had kept it from downloading
_NOT_CACHED = "HF_HUB_OFFLINE is set (offline mode), and 'me/x' is neither a local path nor wholly in the Hugging Face "

# Hub ids when the Hub does not answer: (argv, environment, what stderr must say).
WITHOUT_HUB = {
    **{f"{words[0]} under a launcher": (words, {"WORLD_SIZE": "2"}, f"vocabshift {words[0]} runs in one process, and "
                                        "this one was started by a launcher with WORLD_SIZE=2")
       for words in (["probe", "{extended}", "{extended}", "{root}/ru.txt", "--methods", "mean"],
                     ["push", "{extended}", "me/x"], ["extend", "{extended}", "{extended}", "{root}/out"])},
    "push to a Hub that does not answer": (["push", "{extended}", "me/x"],
                                           {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_unused"},
                                           "the Hub at http://127.0.0.1:9 could not be reached (ConnectError"),
    "push with an HF_TOKEN of Cyrillic letters": (["push", "{extended}", "me/x"],
                                                  {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_токен"},
                                                  "HF_TOKEN holds a character an HTTP header cannot carry"),
    "propagate a Hub id offline": (["propagate", "me/adapted", "{extended}", "{extended}", "{root}/out"],
                                   {"HF_HUB_OFFLINE": "1"}, "adapted='me/adapted' is not a local folder, and the Hub "
                                   "could not be asked for it (OfflineModeIsEnabled"),
    # transformers said it "couldn't connect to 'https://huggingface.co'": check the internet connection
    "extend a Hub id offline": (["extend", "me/x", "{extended}", "{root}/out"], {"HF_HUB_OFFLINE": "1"},
                                f"model='me/x' cannot be loaded: {_NOT_CACHED}"),
    "extend with a new tokenizer by Hub id offline": (["extend", "{extended}", "me/x", "{root}/out"],
                                                      {"HF_HUB_OFFLINE": "1"},
                                                      f"Could not load new_tokenizer='me/x': {_NOT_CACHED}"),
    "evaluate a Hub id offline": (["evaluate", "me/x", "{root}/ru.txt"], {"HF_HUB_OFFLINE": "1"},
                                  f"Could not load the tokenizer of model='me/x': {_NOT_CACHED}"),
    "SALT helper by a Hub id that does not answer": (
        ["extend", "{extended}", "{extended}", "{root}/out", "--method", "salt", "--option", "helper_model=me/helper",
         "--option", "word_vectors={root}/file.txt"], {"HF_ENDPOINT": "http://127.0.0.1:9"},
        "--option helper_model='me/helper' is not a local folder, and the Hub could not be asked for it (ConnectError"),
}


@pytest.mark.parametrize("case", sorted(WITHOUT_HUB))
def test_cli_without_the_hub(w, case, tmp_path):
    """A network failure is named as one (the Hub's address, what to check), not a raw httpx traceback."""
    argv, environment, message = WITHOUT_HUB[case]
    before = _state(w)
    words = [word.format(root=w.root, extended=w.root / "extended") for word in argv]
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    done = subprocess.run([sys.executable, "-m", "vocabshift", *words], capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT / "src"), "HF_HOME": str(tmp_path),
                               **environment})
    assert done.returncode == 1 and "Traceback" not in done.stderr and message in done.stderr, done.stderr
    assert _state(w)[2] == before[2] and not (w.root / "out").exists()


@pytest.mark.parametrize("case", sorted(CLI))
def test_cli(w, case):
    argv, message = CLI[case]
    before = _state(w)
    words = [word.format(root=w.root, extended=w.root / "extended") for word in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "vocabshift", *words], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr and message in done.stderr, done.stderr
    assert _state(w)[2] == before[2] and not (w.root / "out").exists()


def test_a_refused_token_is_never_printed(w):
    with pytest.raises(errors.InvalidArgumentError) as info:
        vocabshift.push_to_hub(w.root / "extended", "me/x", token="hf_sécret")
    assert "sécret" not in str(info.value) and "at position 4 of 9" in str(info.value)


def test_evaluate_into_the_record_of_a_read_only_folder(w, tmp_path, monkeypatch, capsys):
    """Refused before the evaluation, naming the folder and the fixes: it ended after the evaluation in a raw
    PermissionError naming the temporary sibling of config.json. (os.access stands for the folder's mode, which root
    would write through.)"""
    folder = shutil.copytree(w.root / "extended", tmp_path / "model")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    folder.chmod(0o555)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != folder)
    try:
        code = main(["evaluate", str(folder), str(w.root / "ru.txt"), "--add-to-record"])
    finally:
        folder.chmod(0o755)
    out, err = capsys.readouterr()
    assert code == 1 and not out and f"model={str(folder)!r}, a folder this user may not write in: make it writable " \
        "(chmod u+w), evaluate a copy, or leave --add-to-record out." in err, err
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before


def test_card_output_in_folders_to_create(w, tmp_path):
    """`--output` in folders that do not exist yet creates them, as `ModelCard.save` does (it ended in a raw
    FileNotFoundError naming the temporary file); a README that is not UTF-8 is replaced with --force."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    for argv in (["--output", str(tmp_path / "new" / "sub" / "README.md")],
                 ["--output", str(tmp_path / "README.md"), "--force"]):
        (tmp_path / "README.md").write_bytes("# notes\n".encode("utf-16"))
        done = subprocess.run([sys.executable, "-m", "vocabshift", "card", str(w.root / "extended"), *argv],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "Generated by vocabshift" in Path(argv[1]).read_text(encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "new" / "sub").iterdir()) == ["README.md"]


def _file_size_limit(limit: int):
    """For a subprocess: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored), as on a full or FAT32 disk."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


# Writes that run out of room: (argv, what stderr must say). The tokenizer writes its output folder; extend first
# rebuilds the merged tokenizer in a scratch folder (TMPDIR).
OUT_OF_ROOM = {
    "tokenizer into a disk without room": (["tokenizer", "{extended}", "{texts}", "{root}/out", "--vocab-size", "900"],
                                           "writing '{root}/out' failed: File too large"),
    "extend with a scratch disk without room": (["extend", "{base}", "{new}", "{root}/out"],
                                                "writing vocabshift's scratch folder '{tmp}/"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_ROOM))
def test_cli_out_of_room(w, case, tmp_path):
    """A write that runs out of room is named with its folder and the fix (TMPDIR for scratch), not safetensors' or
    tokenizers' raw error, and leaves nothing behind."""
    argv, message = OUT_OF_ROOM[case]
    (tmp_path / "texts.txt").write_text("\n".join(w.ru[:300]), encoding="utf-8")
    w.model.save_pretrained(tmp_path / "base")
    w.source.save_pretrained(tmp_path / "base")
    w.new.save_pretrained(tmp_path / "new")
    (tmp_path / "tmp").mkdir()
    names = {"root": w.root, "extended": w.root / "extended", "texts": tmp_path / "texts.txt", "tmp": tmp_path / "tmp",
             "base": tmp_path / "base", "new": tmp_path / "new"}
    before = _state(w)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path / "tmp")}
    done = subprocess.run([sys.executable, "-m", "vocabshift", *[word.format(**names) for word in argv]], env=env,
                          capture_output=True, text=True, timeout=300, preexec_fn=_file_size_limit(4096))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert message.format(**names) in done.stderr and "Nothing is half-written" in done.stderr, done.stderr
    assert _state(w)[2] == before[2] and not (w.root / "out").exists() and not any((tmp_path / "tmp").iterdir())


def test_save_out_of_room_keeps_the_previous_output(w, tmp_path):
    """safetensors' own write error (EFBIG here) becomes OutputWriteError; the previous save is untouched."""
    vocabshift.save_pretrained_atomic(w.extended, w.extended_tokenizer, tmp_path / "out")
    before = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}
    script = ("import transformers, vocabshift\n"
              f"model = transformers.AutoModelForCausalLM.from_pretrained({str(tmp_path / 'out')!r})\n"
              "try:\n"
              f"    vocabshift.save_pretrained_atomic(model, None, {str(tmp_path / 'out')!r})\n"
              "except vocabshift.errors.OutputWriteError as error:\n"
              "    print(error.errno, error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, preexec_fn=_file_size_limit(65536))
    assert done.stdout.startswith("27 ") and "max_shard_size" in done.stdout, done.stdout + done.stderr
    assert {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(("code", "fix"), [(28, "free space on that disk"), (122, "free space within your quota")])
def test_atomic_file_out_of_room(tmp_path, code, fix):
    """An OSError that runs out of room is named; any other OSError is raised as it was."""
    (tmp_path / "card.md").write_text("before", encoding="utf-8")
    with pytest.raises(errors.OutputWriteError, match=fix) as info, vocabshift.atomic.atomic_file(tmp_path / "card.md"):
        raise OSError(code, os.strerror(code))
    assert info.value.errno == code and "card.md" in str(info.value)
    with pytest.raises(PermissionError) as raw, vocabshift.atomic.atomic_file(tmp_path / "card.md"):
        raise PermissionError(13, "Permission denied")
    assert not isinstance(raw.value, errors.OutputWriteError)
    assert [path.name for path in tmp_path.iterdir()] == ["card.md"] and (tmp_path / "card.md").read_text() == "before"
