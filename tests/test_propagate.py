"""`vocabshift.propagate` on tiny sibling folders: the rows against a dense reference, the output model, streaming."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tokenizers import AddedToken
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    Gemma3Config,
    Gemma3ForConditionalGeneration,
)

import conftest
import vocabshift
from conftest import ROOT, kill_once_written, make_model, shards_into_subfolder
from vocabshift.record import add_cpt_entry
from vocabshift.training.cpt import embedding_parameters, trainable_row_ids

SHARD = "60KB"
INSTRUCT_TEMPLATE = "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"


def _perturb_(module: torch.nn.Module, scale: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * parameter.std() * torch.randn(parameter.shape, generator=generator))


def build_family(root: Path, architecture: str, source: object, new: object, *, dtype: torch.dtype = torch.float32,
                 mode: str = "extend", cpt_rows: str = "new", chat_markers: bool = False) -> dict[str, Path]:
    """base, its instruct sibling (base + noise; optionally with two chat markers added and its own chat template)
    and adapted (base extended with `new`, then its trainable rows moved as CPT would), saved as sharded folders."""
    folders = {role: root / role for role in ("base", "instruct", "adapted")}
    base = make_model(architecture, source).to(dtype)
    base.save_pretrained(folders["base"], max_shard_size=SHARD)
    source.save_pretrained(folders["base"])
    instruct, tokenizer = make_model(architecture, source).to(dtype), AutoTokenizer.from_pretrained(folders["base"])
    if chat_markers:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|user|>", "<|end|>")],
                             special_tokens=True)
        tokenizer.chat_template, tokenizer.eos_token = INSTRUCT_TEMPLATE, "<|end|>"
        instruct.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        instruct.config.eos_token_id = instruct.generation_config.eos_token_id = tokenizer.eos_token_id
    _perturb_(instruct, 0.2, seed=1)
    instruct.save_pretrained(folders["instruct"], max_shard_size=SHARD)
    tokenizer.save_pretrained(folders["instruct"])
    adapted = AutoModelForCausalLM.from_pretrained(folders["base"], dtype=torch.float32)
    adapted_tokenizer = adapted.extend_vocabulary(new, mode=mode)
    rows = trainable_row_ids(adapted, cpt_rows)
    for parameter in embedding_parameters(adapted):
        with torch.no_grad():
            noise = 0.3 * parameter.std() * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(2))
            parameter[rows if rows is not None else slice(None)] += noise[rows if rows is not None else slice(None)]
    add_cpt_entry(adapted, {"rows": cpt_rows, "steps": 1})
    vocabshift.save_pretrained_atomic(adapted, adapted_tokenizer, folders["adapted"], max_shard_size=SHARD)
    return folders


def matrices(folder: Path) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """(input rows, untied head rows or None, tied) of a saved model, in float64."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    inputs, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    tied = head is inputs
    return inputs.detach().double(), None if tied else head.detach().double(), tied


def reference(method: str, folders: dict[str, Path], output_tokenizer, side: int) -> torch.Tensor:
    """The LEP rows computed densely (whole matrices, lstsq in float64), as the module docstrings define them."""
    record = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(folders["adapted"]))
    base, instruct, adapted = (matrices(folders[role])[side] for role in ("base", "instruct", "adapted"))
    base_tokenizer = AutoTokenizer.from_pretrained(folders["base"])
    specials = set(base_tokenizer.backend_tokenizer.get_added_tokens_decoder())
    single = sorted({old for _, old in record.shared_pairs() if old not in specials})
    a, b = base[single], instruct[single]
    if method == "conversion":
        groups = [ids for ids in record.decomposition_lists() if ids]
        a = torch.cat([a, torch.stack([base[ids].mean(0) for ids in groups])])
        b = torch.cat([b, torch.stack([instruct[ids].mean(0) for ids in groups])])
    weight = torch.eye(a.shape[1], dtype=torch.float64) if method == "swap" else torch.linalg.lstsq(a, b).solution
    rows = max(adapted.shape[0], len(output_tokenizer))
    expected = torch.zeros(rows, a.shape[1], dtype=torch.float64)
    expected[: adapted.shape[0]] = adapted @ weight
    for new_id, old_id in record.shared_pairs():
        expected[new_id] = instruct[old_id] + (adapted[new_id] - base[old_id]) @ weight
    instruct_tokenizer = AutoTokenizer.from_pretrained(folders["instruct"])
    for instruct_id, token in instruct_tokenizer.backend_tokenizer.get_added_tokens_decoder().items():
        if instruct_id < len(instruct):  # a special token beyond the rows (Gemma-3's image token) keeps E_a W
            expected[output_tokenizer.convert_tokens_to_ids(token.content)] = instruct[instruct_id]
    return expected


def tensor_bytes(folder: Path) -> int:
    total = 0
    for path in folder.glob("*.safetensors"):
        with safe_open(path, framework="pt") as handle:
            total += sum(handle.get_tensor(key).nbytes for key in handle.keys())
    return total


def shard_tensors(folder: Path) -> dict[str, tuple[str, set[str]]]:
    """shard file -> (its bytes' hash, its tensor names)."""
    found = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            found[path.name] = (hashlib.sha256(path.read_bytes()).hexdigest(), set(handle.keys()))
    return found


CASES = {
    "tied-extend": ("qwen2-tied", "bytelevel", {}),
    "untied-extend-bf16-all-rows": ("llama-untied", "sentencepiece", {"dtype": torch.bfloat16, "cpt_rows": "all"}),
    "untied-replace-chat-markers": ("llama-untied", "sentencepiece", {"mode": "replace", "chat_markers": True}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def family(request, tmp_path_factory, tokenizers_en, tokenizers_ru):
    architecture, kind, options = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    return build_family(root, architecture, tokenizers_en[kind], tokenizers_ru[kind], **options), options


@pytest.mark.parametrize("method", ["swap", "overlap", "conversion"])
def test_rows_follow_the_lep_formulas(family, method, tmp_path):
    folders, options = family
    out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=tmp_path / "out",
                               method=method)
    tokenizer = AutoTokenizer.from_pretrained(out)
    inputs, head, tied = matrices(out)
    expected_tied = matrices(folders["instruct"])[2]
    assert tied == expected_tied
    dtype = options.get("dtype", torch.float32)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for side, found in enumerate([inputs] if tied else [inputs, head]):
        expected = reference(method, folders, tokenizer, side)
        assert found.shape == expected.shape
        scale = expected.abs().max()
        assert torch.allclose(found, expected.to(dtype).double(), atol=tolerance * scale, rtol=0), (side, method)

    entry = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(out)).propagation[-1]
    assert entry["method"] == method and set(entry["fit"]) == ({"input"} if tied else {"input", "output"})
    residual = entry["fit"]["input"]
    assert residual["residual"] <= residual["identity_residual"] + 1e-9
    assert (residual["residual"] == residual["identity_residual"]) == (method == "swap")


def test_output_is_the_instruct_model_with_the_adapted_vocabulary(family, tmp_path):
    folders, options = family
    out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=tmp_path / "out")
    assert vocabshift.inspect_folder(out).ok, str(vocabshift.inspect_folder(out))
    instruct_tokenizer = AutoTokenizer.from_pretrained(folders["instruct"])
    tokenizer, adapted_tokenizer = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(folders["adapted"])
    text = "Съешь же ещё этих мягких французских булок"
    assert tokenizer(text)["input_ids"] == adapted_tokenizer(text)["input_ids"]
    assert tokenizer.chat_template == instruct_tokenizer.chat_template
    assert tokenizer.eos_token == instruct_tokenizer.eos_token
    config = json.loads((out / "config.json").read_text())
    instruct_config = json.loads((folders["instruct"] / "config.json").read_text())
    assert config["vocab_size"] == matrices(out)[0].shape[0] >= len(tokenizer)
    assert config["eos_token_id"] == tokenizer.convert_tokens_to_ids(instruct_tokenizer.eos_token)
    assert {k: v for k, v in config.items() if k not in ("vocab_size", "vocabshift") and not k.endswith("_token_id")
            } == {k: v for k, v in instruct_config.items() if k != "vocab_size" and not k.endswith("_token_id")}
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation.keys() == json.loads((folders["instruct"] / "generation_config.json").read_text()).keys()
    assert generation.get("eos_token_id", config["eos_token_id"]) == config["eos_token_id"]
    if options.get("chat_markers"):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": "привет"}])["input_ids"]
        assert tokenizer.convert_ids_to_tokens(ids)[0] == "<|user|>" and len(tokenizer) > len(adapted_tokenizer)

    # Streaming: shards without embedding tensors are byte-identical copies, the others hold the same tensors.
    found, original = shard_tensors(out), shard_tensors(folders["instruct"])
    assert found.keys() == original.keys() and len(found) > 2
    embeddings = {"model.embed_tokens.weight", "lm_head.weight"}
    for name, (digest, keys) in found.items():
        assert keys == original[name][1]
        assert (digest == original[name][0]) == (not keys & embeddings), name
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == tensor_bytes(out)
    assert index["weight_map"] == json.loads((folders["instruct"] / "model.safetensors.index.json").read_text()
                                             )["weight_map"]


def test_hard_linked_shards_keep_the_mode_of_the_instruct_files(family, tmp_path):
    """The output's files get the umask's permissions (safetensors writes its files 0600), except the shards
    linked from instruct: changing their mode would change instruct's files."""
    folders, _ = family
    shards = sorted(folders["instruct"].glob("*.safetensors"))
    shared_mode = shards[0].stat().st_mode & 0o777
    shards[0].chmod(0o640)
    before = {path.name: path.stat().st_mode & 0o777 for path in shards}
    try:
        out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"],
                                   output_dir=tmp_path / "out", hardlink=True)
        assert {path.name: path.stat().st_mode & 0o777 for path in shards} == before
    finally:  # the family is shared with the other tests
        shards[0].chmod(shared_mode)
    linked = [path for path in out.glob("*.safetensors") if path.stat().st_nlink > 1]
    assert linked and all(path.stat().st_mode & 0o777 == before[path.name] for path in linked)


def test_swap_measures_its_identity_residual_on_spread_runs(monkeypatch):
    from vocabshift.propagation import fit

    monkeypatch.setattr(fit, "_SWAP_SAMPLE", 64)
    ids = torch.arange(1000) * 3
    sample = fit.spread_runs(ids, runs=4)
    assert len(sample) == 64 and set(sample.tolist()) <= set(ids.tolist())
    assert sample[0] == 0 and sample[-1] == ids[-1]  # the runs reach both ends
    assert len(torch.unique(sample)) == 64 and torch.equal(fit.spread_runs(ids[:50], runs=4), ids[:50])


def test_a_small_fit_residual_is_recorded_to_its_digits():
    """The residual comes from the accumulated products (‖B‖² − 2⟨W, AᵀB⟩ + ⟨W, AᵀA W⟩), which cancel to a small
    number: ‖B‖² summed from float32 row norms was off by a part in 10⁷, which made a residual of 0.00694 read
    0.006938 instead of 0.006943 (SmolLM2 in bfloat16, by hand); now every term is float64."""
    from vocabshift.propagation.fit import _NormalEquations

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(4000, 64, generator=generator)
    b = a @ torch.randn(64, 64, generator=generator) + 1e-3 * torch.randn(4000, 64, generator=generator)
    equations = _NormalEquations(64)
    equations.add(a, b)
    weight, error, _ = equations.solve()
    direct = torch.linalg.vector_norm(a.double() @ weight - b.double()) / torch.linalg.vector_norm(b.double())
    assert abs((error / equations.target_norm) ** 0.5 / float(direct) - 1) < 1e-6


def test_the_map_skips_rows_cpt_left_unchanged():
    from vocabshift.propagation.fit import Fit

    generator = torch.Generator().manual_seed(0)
    weight, rows = torch.randn(6, 6, generator=generator), torch.randn(5, 6, generator=generator)
    rows[[1, 3]] = 0
    fit, out = Fit(weight, rows=10, residual=0.1, identity_residual=0.2), torch.full((8, 6), float("nan"))
    mapped = fit.apply(rows, out=out)
    assert torch.equal(mapped[[1, 3]], torch.zeros(2, 6))  # exact zeros, not the buffer's leftovers
    torch.testing.assert_close(mapped, rows @ weight, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fit.apply(rows[[0, 2]], out=out), rows[[0, 2]] @ weight, rtol=1e-6, atol=1e-6)
    assert fit.apply(rows, out=out).data_ptr() == out.data_ptr()
    assert Fit(None, rows=10, residual=0.2, identity_residual=0.2).apply(rows, out=out) is rows


def test_a_head_bias_is_carried_like_the_rows(tmp_path, tokenizers_en, tokenizers_ru):
    """Phi's head has a bias: shared tokens keep instruct's (plus CPT's change), new tokens get instruct's mean."""
    folders = build_family(tmp_path, "phi-untied-bias", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"])
    out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=tmp_path / "out")
    bias = {role: AutoModelForCausalLM.from_pretrained(folder).get_output_embeddings().bias.detach().double()
            for role, folder in {**folders, "out": out}.items()}
    record = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(folders["adapted"]))
    old = record.old_vocab_size
    assert not torch.equal(bias["instruct"][:old], bias["base"][:old])  # the sibling's bias differs from base's
    assert torch.allclose(bias["out"][:old], bias["instruct"][:old], atol=1e-6)  # CPT left the bias as it was
    new = torch.tensor(record.new_ids)
    assert torch.allclose(bias["out"][new], bias["instruct"][:old].mean().expand(len(new)), atol=1e-6)
    assert vocabshift.inspect_folder(out).ok


def test_a_head_bias_stored_under_another_name_is_carried(tmp_path, tokenizers_en, tokenizers_ru):
    """BertForMaskedLM's head bias is one parameter under two names, stored as `cls.predictions.bias`: propagate did
    not find it, and its output kept the instruct bias at the old width (from_pretrained refused the folder)."""
    source, new = tokenizers_en["wordpiece"], tokenizers_ru["wordpiece"]
    config = BertConfig(vocab_size=len(source), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64)
    for role, seed in (("base", 0), ("instruct", 1)):
        torch.manual_seed(seed)
        BertForMaskedLM(config).save_pretrained(tmp_path / role)
        source.save_pretrained(tmp_path / role)
    adapted = BertForMaskedLM.from_pretrained(tmp_path / "base")
    vocabshift.save_pretrained_atomic(adapted, adapted.extend_vocabulary(new), tmp_path / "adapted")
    out = vocabshift.propagate(tmp_path / "adapted", tmp_path / "base", tmp_path / "instruct",
                               output_dir=tmp_path / "out")
    bias = BertForMaskedLM.from_pretrained(out).get_output_embeddings().bias.detach()
    instruct = BertForMaskedLM.from_pretrained(tmp_path / "instruct").get_output_embeddings().bias.detach()
    assert bias.shape == adapted.get_output_embeddings().bias.shape
    assert torch.allclose(bias[: len(source)], instruct, atol=1e-6)


def _gemma3_with_vision(vocab_size: int) -> torch.nn.Module:
    text = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, sliding_window=16)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    return Gemma3ForConditionalGeneration(Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=vocab_size - 1,
        boi_token_index=vocab_size - 3, eoi_token_index=vocab_size - 2))


def test_embeddings_stored_under_other_names_than_the_parameters(tmp_path, tokenizers_en, tokenizers_ru,
                                                                 monkeypatch):
    """Gemma-3 with its vision tower names its input embeddings `model.language_model.embed_tokens.weight`, which
    save_pretrained stores as `language_model.model.embed_tokens.weight`: propagate found no embedding tensor and
    said the weights were incomplete."""
    monkeypatch.setitem(conftest.ARCHITECTURES, "gemma3-vision", ("sentencepiece", _gemma3_with_vision))
    folders = build_family(tmp_path, "gemma3-vision", tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"],
                           chat_markers=True)
    processor = '{"image_seq_length": 4, "processor_class": "Gemma3Processor"}'
    (folders["instruct"] / "processor_config.json").write_text(processor, encoding="utf-8")
    out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=tmp_path / "out",
                               method="overlap")
    expected = reference("overlap", folders, AutoTokenizer.from_pretrained(out), 0)
    found = matrices(out)[0]
    assert found.shape == expected.shape
    assert torch.allclose(found, expected, atol=1e-5 * expected.abs().max(), rtol=0)
    assert vocabshift.inspect_folder(out).ok, str(vocabshift.inspect_folder(out))
    assert (out / "processor_config.json").read_text(encoding="utf-8") == processor  # it was left out


@pytest.mark.parametrize(("architecture", "mode"), [("gemma3-tied", "extend"), ("llama-untied", "replace")])
def test_siblings_with_a_special_token_beyond_their_rows(architecture, mode, tmp_path, tokenizers_en, tokenizers_ru,
                                                         monkeypatch):
    """Gemma-3's tokenizer has one special token (its image token) past the embedding rows: propagate said instruct's
    folder was inconsistent, and with that check relaxed it read instruct rows that do not exist (IndexError)."""
    family, builder = conftest.ARCHITECTURES[architecture]
    monkeypatch.setitem(conftest.ARCHITECTURES, "with-image-token", (family, lambda v: builder(v - 1)))
    source = copy.deepcopy(tokenizers_en[family])
    source.add_special_tokens({"additional_special_tokens": ["<image>"]})
    folders = build_family(tmp_path, "with-image-token", source, tokenizers_ru[family], mode=mode)
    instruct = matrices(folders["instruct"])
    assert len(instruct[0]) == len(source) - 1
    record = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(folders["adapted"]))
    pairs = torch.tensor(record.shared_pairs())
    for method in ("swap", "overlap", "conversion"):
        out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"],
                                   output_dir=tmp_path / method, method=method)
        tokenizer, found = AutoTokenizer.from_pretrained(out), matrices(out)
        assert found[0].shape[0] >= len(tokenizer) and tokenizer.convert_tokens_to_ids("<image>") is not None
        for side, rows in enumerate(found[:2]):
            if rows is not None:
                expected = reference(method, folders, tokenizer, side)
                assert torch.allclose(rows, expected, atol=1e-5 * expected.abs().max(), rtol=0), (method, side)
                assert torch.equal(rows[pairs[:, 0]], instruct[side][pairs[:, 1]])  # CPT trained only new rows
        assert vocabshift.inspect_folder(out).ok, str(vocabshift.inspect_folder(out))


def grow(adapted: Path, target: Path, *, resize: bool = True) -> Path:
    """A copy of `adapted` whose tokenizer gained a chat marker instruct has, a tool token and an ordinary word after
    the extension, with rows trained for them (unless `resize` is False)."""
    model, tokenizer = AutoModelForCausalLM.from_pretrained(adapted), AutoTokenizer.from_pretrained(adapted)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|user|>", "<tool_call>")],
                         special_tokens=True)
    tokenizer.add_tokens(["новоеслово"])
    if not resize:  # save_pretrained_atomic refuses tokens beyond the rows
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        return target
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        for parameter in embedding_parameters(model):
            parameter[-3:] = torch.linspace(-0.1, 0.1, 3 * parameter.shape[1]).view(3, -1)
    return vocabshift.save_pretrained_atomic(model, tokenizer, target)


def test_tokens_added_to_adapted_after_the_extension(tmp_path, tokenizers_en, tokenizers_ru):
    """Tokens added to the adapted tokenizer after extend_vocabulary (rows grown and trained for them) are propagated
    as the new tokens are (E_a W), chat markers instruct has keep instruct's rows: propagate refused the folder and
    advised saving the tokenizer extend_vocabulary returned, which would have dropped their rows."""
    folders = build_family(tmp_path, "llama-untied", tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"],
                           chat_markers=True)
    grown = grow(folders["adapted"], tmp_path / "grown")
    adapted_tokenizer = AutoTokenizer.from_pretrained(grown)
    for method in ("swap", "overlap", "conversion"):
        out = vocabshift.propagate(grown, folders["base"], folders["instruct"], output_dir=tmp_path / method,
                                   method=method)
        tokenizer, found = AutoTokenizer.from_pretrained(out), matrices(out)
        added = tokenizer.convert_tokens_to_ids(["<|user|>", "<tool_call>", "новоеслово"])
        assert added == adapted_tokenizer.convert_tokens_to_ids(["<|user|>", "<tool_call>", "новоеслово"])
        for side in (0, 1):
            expected = reference(method, {**folders, "adapted": grown}, tokenizer, side)
            assert torch.allclose(found[side], expected, atol=1e-5 * expected.abs().max(), rtol=0), (method, side)
        user = AutoTokenizer.from_pretrained(folders["instruct"]).convert_tokens_to_ids("<|user|>")
        assert torch.equal(found[0][added[0]], matrices(folders["instruct"])[0][user])
        assert vocabshift.inspect_folder(out).ok, str(vocabshift.inspect_folder(out))


CHILD_PROPAGATE = """
import sys, time, vocabshift
from vocabshift.propagation import core
def stall(folder, *args):
    open(sys.argv[5], "w").write(str(folder))
    time.sleep(120)
core.write_configs = stall
vocabshift.propagate(sys.argv[1], sys.argv[2], sys.argv[3], output_dir=sys.argv[4])
"""


def test_a_propagate_killed_midway_leaves_no_output(tmp_path, tokenizers_en, tokenizers_ru):
    """kill -9 after the shards are written: no output folder, and the next call to it goes through."""
    folders = build_family(tmp_path, "qwen2-tied", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"])
    output, marker = tmp_path / "out", tmp_path / "marker"
    argv = [str(folders[role]) for role in ("adapted", "base", "instruct")] + [str(output), str(marker)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD_PROPAGATE, *argv], env=env, stderr=subprocess.DEVNULL)
    temporary = kill_once_written(child, marker)
    assert any(temporary.glob("*.safetensors"))  # killed with the shards written
    assert not output.exists() and temporary.exists()
    vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=output)
    assert not temporary.exists() and AutoModelForCausalLM.from_pretrained(output) is not None


def test_shards_in_a_subfolder_of_the_index(tmp_path, tokenizers_en, tokenizers_ru):
    """Shards an index names in a subfolder (as transformers loads them) are read from there and written there: the
    copy into the temporary folder failed with a raw FileNotFoundError naming that folder."""
    folders = build_family(tmp_path, "qwen2-tied", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"])
    shards_into_subfolder(folders["instruct"])
    shards_into_subfolder(folders["adapted"], "sub")
    out = vocabshift.propagate(folders["adapted"], folders["base"], folders["instruct"], output_dir=tmp_path / "out")
    assert vocabshift.inspect_folder(out).ok, str(vocabshift.inspect_folder(out))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert all(shard.startswith("weights/") for shard in index["weight_map"].values())
    assert matrices(out)[0].shape == matrices(folders["adapted"])[0].shape
