"""focus, salt, ofa and hyperofa: agreement with the reference FOCUS, exactness, diagnostics, bad inputs."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from conftest import make_model, make_tokenizer
from vocabshift import word_vector_training
from vocabshift.errors import (
    CorpusError,
    HelperModelError,
    MethodOptionError,
    RecordError,
    WordVectorsError,
    WordVectorsNotFoundError,
)
from vocabshift.methods.base import median_norm
from vocabshift.training.metrics import bits_per_byte
from vocabshift_testing.deepfocus import deepfocus_rows

HAS_DEEPFOCUS = importlib.util.find_spec("deepfocus") is not None


def _rows(model, ids):
    head = model.get_output_embeddings()
    rows = {"input": model.get_input_embeddings().weight.detach()[ids]}
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        rows["output"] = head.weight.detach()[ids]
    return rows


@pytest.mark.skipif(not HAS_DEEPFOCUS, reason="deepfocus is not installed (a benchmark-only dependency)")
@pytest.mark.parametrize(("family", "architecture"), [("unigram", "llama-untied"), ("bytelevel", "qwen2-tied")])
def test_focus_gives_the_rows_of_deepfocus(tokenizers_en, tokenizers_ru, token_vectors_ru, family, architecture):
    """Same tokenizers, embeddings and fastText model: every row FOCUS combines matches (cosine > 0.999).

    On Unigram tokenizers deepfocus finds exactly our shared tokens. On byte-level ones its decoded-string
    canonicalization maps partial UTF-8 tokens to U+FFFD and copies wrong rows (e.g. a lone byte from an unrelated
    CJK piece), so there deepfocus is given our shared pairs: the comparison is then of FOCUS itself.
    deepfocus also takes fastText's line-end word "</s>" for the vector of the tokenizer's "</s>" token (an anchor we
    do not have); that is turned off in it. Rows of tokens without a vector are random in both (from different
    generators) and are not compared.
    """
    source, new, vectors = tokenizers_en[family], tokenizers_ru[family], token_vectors_ru[family]
    model = make_model(architecture, source)
    before = {side: rows.clone() for side, rows in _rows(model, torch.arange(len(source))).items()}
    tokenizer = model.extend_vocabulary(new, method="focus", mode="replace", source_tokenizer=source,
                                        word_vectors=vectors.source)
    record = vocabshift.get_record(model)
    shared = dict(record.shared_pairs())
    if family == "unigram":
        from deepfocus.focus import get_overlapping_tokens

        overlap, _ = get_overlapping_tokens(target_tokenizer=tokenizer, source_tokenizer=source, match_symbols=False,
                                            exact_match_all=True, fuzzy_match_all=False)
        assert {info.target.id: info.source[0].id for info in overlap.values()} == shared
    with_vector = [i for i in record.new_ids if tokenizer.convert_ids_to_tokens(i) in set(vectors.words)]
    assert len(with_vector) == record.diagnostics["new_with_vector"] > 100
    ours = _rows(model, torch.tensor(with_vector))
    for side, matrix in before.items():
        theirs = deepfocus_rows(tokenizer, source, matrix, vectors.source,
                                shared=None if family == "unigram" else shared)
        cosine = torch.cosine_similarity(ours[side], theirs[with_vector], dim=1)
        assert cosine.min() > 0.999, (side, cosine.min())


def test_salt_refuses_a_helper_of_another_vocabulary(tokenizers_en, tokenizers_ru, token_vectors_ru, ru_lines,
                                                     tmp_path):
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    before = model.get_input_embeddings().weight.detach().clone()
    english_helper = make_model("qwen2-tied", source)
    with pytest.raises(HelperModelError,
                       match=r"has \d+ embedding rows but new_tokenizer has \d+ tokens: its vocabulary does not match"):
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, helper_model=english_helper,
                                word_vectors=token_vectors_ru["bytelevel"])
    other = make_tokenizer("bytelevel", ru_lines[::-1][:1500], 900)  # same size, other vocabulary
    make_model("qwen2-tied", other).save_pretrained(tmp_path)
    other.save_pretrained(tmp_path)
    helper = AutoModelForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(HelperModelError, match="differs from new_tokenizer"):
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, helper_model=helper,
                                word_vectors=token_vectors_ru["bytelevel"])
    with pytest.raises(MethodOptionError, match="helper_model=Linear.* expected PreTrainedModel or Tensor"):
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, helper_model=torch.nn.Linear(2, 2),
                                word_vectors=token_vectors_ru["bytelevel"])
    assert torch.equal(model.get_input_embeddings().weight, before)
    with pytest.raises(RecordError):
        vocabshift.get_record(model)


def _helper_rows(new, rows, value):
    helper = make_model("qwen2-tied", new).get_input_embeddings().weight.detach().clone()
    helper[rows] = value
    return helper


@pytest.mark.parametrize(("helper", "match"), [
    (lambda new: _helper_rows(new, [100, 104], float("nan")), r"input embedding rows \[100, 104\] \(2 in all\) hold"),
    (lambda new: _helper_rows(new, [3], 1e5).half(), r"input embedding rows \[3\] \(1 in all\) hold NaN or inf"),
    (lambda new: make_model("qwen2-tied", new).to("meta"), "input embeddings are on the meta device: their values"),
], ids=["NaN rows", "float16 overflow", "meta"])
def test_salt_refuses_a_helper_without_finite_values(tokenizers_en, tokenizers_ru, token_vectors_ru, helper, match):
    """Were a raw LinAlgError (eigh failed to converge) and a raw NotImplementedError (copy out of a meta tensor)."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    before = model.get_input_embeddings().weight.detach().clone()
    with pytest.raises(HelperModelError, match="helper_model's " + match):
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, helper_model=helper(new),
                                word_vectors=token_vectors_ru["bytelevel"])
    assert torch.equal(model.get_input_embeddings().weight, before)


def test_missing_or_wrong_word_vectors_and_corpora_are_refused(tokenizers_en, tokenizers_ru, token_vectors_ru,
                                                               tmp_path):
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    before = model.get_input_embeddings().weight.detach().clone()

    def extend(method, **options):
        model.extend_vocabulary(new, method=method, source_tokenizer=source, **options)

    with pytest.raises(MethodOptionError, match=r"needs exactly one of word_vectors=.* neither given"):
        extend("focus")
    with pytest.raises(MethodOptionError, match="both given"):
        extend("focus", word_vectors=token_vectors_ru["bytelevel"], corpus=["текст"])
    with pytest.raises(MethodOptionError, match="needs helper_model="):
        extend("salt", word_vectors=token_vectors_ru["bytelevel"])
    with pytest.raises(MethodOptionError, match="needs word_vectors="):
        extend("ofa")
    with pytest.raises(WordVectorsNotFoundError, match="does not exist"):
        extend("focus", word_vectors=tmp_path / "cc.ru.300.bin")
    unrelated = tmp_path / "unrelated.vec"
    unrelated.write_text("2 3\nxyzzy 0.1 0.2 0.3\nplugh 0.3 0.2 0.1\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match="cover none of the .* new tokens"):
        extend("focus", word_vectors=unrelated)
    with pytest.raises(WordVectorsError, match="needs word-level multilingual vectors"):
        extend("ofa", word_vectors=token_vectors_ru["bytelevel"])
    with pytest.raises(CorpusError, match="holds no text"):
        extend("focus", corpus=[])
    legacy = tmp_path / "ru-cp1251.txt"
    legacy.write_bytes("Привет, мир\n".encode("cp1251"))
    with pytest.raises(CorpusError, match="not UTF-8 text"):
        extend("focus", corpus=legacy)
    assert torch.equal(model.get_input_embeddings().weight, before)


def test_token_vectors_without_a_family_are_read_in_the_new_tokenizer_s(tokenizers_en, tokenizers_ru,
                                                                       token_vectors_ru):
    """Extending a byte-level tokenizer with a SentencePiece one: vectors whose family is unknown (a .bin without
    the metadata beside it) hold the new tokenizer's `▁` strings, not the merged target's `Ġ` ones (before, focus
    found none of the new tokens and blamed the vectors)."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["sentencepiece"]
    known = token_vectors_ru["sentencepiece"]
    unknown = vocabshift.WordVectors(known.words, known.vectors, level="token")
    rows = []
    for vectors in (known, unknown):
        model = make_model("qwen2-tied", source)
        model.extend_vocabulary(new, method="focus", source_tokenizer=source, word_vectors=vectors)
        rows.append(model.get_input_embeddings().weight.detach())
    assert vocabshift.get_record(model).diagnostics["new_with_vector"] > 0
    assert torch.equal(rows[0], rows[1])


def test_focus_trains_its_vectors_from_a_corpus_once(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, monkeypatch):
    monkeypatch.setenv("VOCABSHIFT_CACHE", str(tmp_path / "cache"))
    source, new = tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"]
    corpus = tmp_path / "ru.txt"
    corpus.write_text("\n".join(ru_lines) + "\n", encoding="utf-8")
    first = make_model("llama-untied", source)
    first.extend_vocabulary(new, method="focus", source_tokenizer=source, corpus=corpus)
    record = vocabshift.get_record(first)
    assert record.method_config == {"word_vectors": None, "corpus": str(corpus), "temperature": 1.0}
    assert record.diagnostics["word_vectors"]["source"].startswith(str(tmp_path / "cache" / "fasttext"))
    assert record.diagnostics["new_with_vector"] > 0 and record.diagnostics["random_fallback"] > 0
    monkeypatch.setattr(word_vector_training, "_train", None)  # a second run must come from the cache
    second = make_model("llama-untied", source)
    second.extend_vocabulary(new, method="focus", source_tokenizer=source, corpus=corpus)
    assert torch.equal(second.get_input_embeddings().weight, first.get_input_embeddings().weight)


def test_salt_records_its_least_squares_and_guards_norms(tokenizers_en, tokenizers_ru, token_vectors_ru,
                                                         method_options):
    source, new = tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"]
    # the paper's unregularized least squares on peaked supports, where the norm guard has work to do
    options = {**method_options("salt", "sentencepiece"), "temperature": 1.0, "ridge": 0.0, "max_anchors": None}
    results = {}
    runs = {"guarded": {"norm_guard": 1.01}, "unguarded": {"norm_guard": None}, "capped": {"max_anchors": 2}}
    for name, extra in runs.items():
        model = make_model("llama-untied", source)
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, **{**options, **extra})
        record = vocabshift.get_record(model)
        results[name] = (record.diagnostics, _rows(model, torch.tensor(record.new_ids)), model)
    diagnostics, rows, model = results["guarded"]
    assert diagnostics["anchors"] > 50 and diagnostics["support_size"]["min"] >= 1
    assert 0 <= diagnostics["relative_residual"]["min"] <= diagnostics["relative_residual"]["max"] <= 1
    assert diagnostics["condition_number"]["min"] >= 1 and diagnostics["rank_deficient"] >= 0
    source_rows = make_model("llama-untied", source).get_input_embeddings().weight.detach()[: len(source)]
    median = median_norm(source_rows)
    norms = rows["input"].norm(dim=1)
    within = ((norms >= median / 1.01 * (1 - 1e-5)) & (norms <= median * 1.01 * (1 + 1e-5))).sum()
    assert 0 < diagnostics["norm_guarded"][0] <= within  # a tight guard moves rows into [median / 1.01, median * 1.01]
    assert not torch.equal(results["unguarded"][1]["input"], rows["input"])
    capped = results["capped"][0]
    assert capped["support_size"]["max"] == 2 and capped["support_capped"] > 0


def _spread(vectors):
    """The words of `vectors` with random Gaussian vectors: the tiny fastText vectors of the fixtures are nearly
    parallel (cosines within float32 rounding of 1), which leaves nearest neighbours undefined."""
    rng = np.random.default_rng(0)
    return vocabshift.WordVectors(vectors.words, rng.standard_normal(vectors.vectors.shape).astype(np.float32),
                                  level="word", source="random")


def test_ofa_rows_are_softmax_mixtures_of_the_nearest_old_tokens(tokenizers_en, tokenizers_ru, multilingual_vectors):
    """A direct (dense, per-token) OFA computation gives the same rows."""
    multilingual_vectors = _spread(multilingual_vectors)
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    old = model.get_input_embeddings().weight.detach()[: len(source)].clone()
    tokenizer = model.extend_vocabulary(new, method="ofa", mode="replace", source_tokenizer=source,
                                        word_vectors=multilingual_vectors)
    record = vocabshift.get_record(model)

    def word_space(tok):
        sums, counts = torch.zeros(len(tok), multilingual_vectors.dim, dtype=torch.float64), torch.zeros(len(tok))
        for word, vector in zip(multilingual_vectors.words, torch.from_numpy(multilingual_vectors.vectors)):
            variants = {word, " " + word, " " + word[:1].upper() + word[1:]}
            for token in {i for v in variants for i in tok(v, add_special_tokens=False)["input_ids"]}:
                sums[token] += vector
                counts[token] += 1
        return sums / counts.clamp_min(1)[:, None], counts > 0

    target_space, covered = word_space(tokenizer)
    source_space, source_covered = word_space(source)
    keys = source_covered.nonzero().squeeze(1)
    sample = torch.tensor([i for i in record.new_ids if covered[i]])
    similarity = torch.nn.functional.normalize(target_space[sample], dim=1) @ torch.nn.functional.normalize(
        source_space[keys], dim=1).T
    top, index = similarity.topk(11, dim=1)
    # the tiny vectors put many cosines within float32 rounding of each other: compare the rows whose 10th and
    # 11th neighbours are clearly apart (the method ranks in float32, this reference in float64)
    clear = (top[:, 9] - top[:, 10]) > 1e-5
    assert clear.sum() >= 25
    sample, top, index = sample[clear][:50], top[clear][:50, :10], index[clear][:50, :10]
    expected = torch.einsum("nk,nkh->nh", torch.softmax(top / 0.1, dim=1), old[keys[index]].double())
    got = model.get_input_embeddings().weight.detach()[sample].double()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert record.diagnostics["new_in_words"] == int(covered[record.new_ids].sum())


def test_ofa_rank_keeps_rows_in_the_top_singular_subspace(tokenizers_en, tokenizers_ru, multilingual_vectors):
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    old = model.get_input_embeddings().weight.detach()[: len(source)].clone()
    model.extend_vocabulary(new, method="ofa", source_tokenizer=source, word_vectors=multilingual_vectors, rank=8)
    record = vocabshift.get_record(model)
    basis = torch.linalg.svd(old.double(), full_matrices=False).Vh[:8]
    rows = model.get_input_embeddings().weight.detach()[record.new_ids].double()
    torch.testing.assert_close(rows @ basis.T @ basis, rows, atol=1e-4, rtol=1e-4)
    assert 0 < record.diagnostics["explained_variance"][0] < 1


def test_hyperofa_set_encoder_ignores_word_order_and_training_stops_early(tokenizers_en, tokenizers_ru,
                                                                          multilingual_vectors):
    multilingual_vectors = _spread(multilingual_vectors)
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    diagnostics = {}
    for encoder in ("set", "bilstm"):
        model = make_model("qwen2-tied", source)
        model.extend_vocabulary(new, method="hyperofa", source_tokenizer=source, word_vectors=multilingual_vectors,
                                encoder=encoder, rank=16, hidden_size=8, max_words=6, max_epochs=40, patience=1)
        diagnostics[encoder] = vocabshift.get_record(model).diagnostics
    assert diagnostics["set"]["permutation_cosine"]["min"] > 0.9999
    assert diagnostics["bilstm"]["permutation_cosine"]["median"] < 0.9999  # the BiLSTM reads the order
    for result in diagnostics.values():
        assert result["stopped_early"] and result["epochs"] < 40
        assert result["training_pairs"] > 300 and result["new_in_words"] > 300


@pytest.mark.integration
def test_focus_beats_random_rows_on_smollm2(smollm2_dir, ru_lines, ru_held):
    """SmolLM2 extended with a Russian tokenizer: FOCUS rows predict held-out Russian better than random rows."""
    source = AutoTokenizer.from_pretrained(smollm2_dir)
    new = vocabshift.train_tokenizer(ru_lines, like=source, vocab_size=3000)
    vectors = vocabshift.train_word_vectors(ru_lines, tokenizer=new, dim=32, min_count=3,
                                            cache_dir=smollm2_dir.parent / "test-fasttext")
    scores = {}
    for method, options in (("random", {}), ("focus", {"word_vectors": vectors})):
        model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
        tokenizer = model.extend_vocabulary(new, method=method, source_tokenizer=source, **options)
        scores[method] = bits_per_byte(model, tokenizer, ru_held[:60], context_length=256)
    assert scores["focus"] < scores["random"] - 0.2, scores


def test_salt_global_map_learns_a_linear_helper_and_flags_a_useless_one(tokenizers_en, tokenizers_ru,
                                                                          token_vectors_ru, caplog):
    """A helper whose shared-token rows are a linear image of the model's rows is predicted on held-out anchors
    (R² near 1, no warning); a random helper is not, and the call says so."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    old = make_model("qwen2-tied", source).get_input_embeddings().weight.detach()[: len(source)]
    generator = torch.Generator().manual_seed(0)
    linear = torch.randn(len(new), 96, generator=generator)
    old_vocab = source.get_vocab()
    shared = [(i, old_vocab[token]) for token, i in new.get_vocab().items() if token in old_vocab]
    linear[[i for i, _ in shared]] = old[[j for _, j in shared]] @ torch.randn(old.shape[1], 96, generator=generator)
    found = {}
    for name, helper in (("linear", linear), ("random", torch.randn(len(new), 96, generator=generator))):
        model = make_model("qwen2-tied", source)
        caplog.clear()
        with caplog.at_level("WARNING", logger="vocabshift.methods.salt"):
            model.extend_vocabulary(new, method="salt", source_tokenizer=source, helper_model=helper,
                                    word_vectors=token_vectors_ru["bytelevel"])
        found[name] = (vocabshift.get_record(model).diagnostics["global_map"], caplog.text)
    assert found["linear"][0]["held_out_r2"][0] > 0.99 and "no better than" not in found["linear"][1]
    assert found["random"][0]["held_out_r2"][0] <= 0.0 and "no better than their mean row" in found["random"][1]


def test_salt_rows_are_the_global_map_corrected_by_each_tokens_anchors(tokenizers_en, tokenizers_ru,
                                                                        token_vectors_ru, method_options):
    """The global map is fitted per side (input and untied output) and changes the rows; without it, rows are the
    per-token least squares alone and the record has no map."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    rows = {}
    for global_map in (True, False):
        model = make_model("llama-untied", source)
        model.extend_vocabulary(new, method="salt", source_tokenizer=source, global_map=global_map,
                                **method_options("salt", "bytelevel"))
        record = vocabshift.get_record(model)
        rows[global_map] = _rows(model, torch.tensor(record.new_ids))
        assert (record.diagnostics["global_map"] is None) == (not global_map)
        if global_map:
            assert len(record.diagnostics["global_map"]["ridge"]) == 2  # input and untied output
    for side in ("input", "output"):
        assert torch.isfinite(rows[True][side]).all() and not torch.allclose(rows[True][side], rows[False][side])


def test_hyperofa_rows_are_ofa_rows_plus_a_correction_in_the_top_singular_subspace(tokenizers_en, tokenizers_ru,
                                                                                  multilingual_vectors):
    multilingual_vectors = _spread(multilingual_vectors)
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    rows = {}
    for method, options in (("ofa", {}), ("hyperofa", {"rank": 8, "hidden_size": 8, "max_epochs": 2})):
        model = make_model("qwen2-tied", source)
        old = model.get_input_embeddings().weight.detach()[: len(source)].clone()
        model.extend_vocabulary(new, method=method, source_tokenizer=source, word_vectors=multilingual_vectors,
                                **options)
        record = vocabshift.get_record(model)
        rows[method] = model.get_input_embeddings().weight.detach()[record.new_ids].double()
    covered = torch.tensor([not torch.equal(a, b) for a, b in zip(rows["ofa"], rows["hyperofa"])])
    assert covered.sum() > 300 and record.diagnostics["residual_on_ofa"] and record.diagnostics["encoder"] == "set"
    basis = torch.linalg.svd(old.double(), full_matrices=False).Vh[:8]
    correction = rows["hyperofa"] - rows["ofa"]
    torch.testing.assert_close(correction @ basis.T @ basis, correction, atol=1e-4, rtol=1e-4)
    assert correction.norm(dim=1).max() > 0


def test_ofa_leave_one_out_weights_never_pick_the_query_itself():
    from vocabshift.methods.ofa import ofa_weights

    keys = torch.randn(30, 5, generator=torch.Generator().manual_seed(0))
    keys[1] = keys[0]  # a duplicate: its twin is a fine neighbour, itself is not
    ids = torch.arange(100, 130)
    weights, similarity = ofa_weights(keys, keys, neighbors=4, temperature=0.1, query_ids=ids, key_ids=ids)
    assert similarity.shape == (30, 4) and not (weights.cols == weights.rows).any()
    assert 1 in weights.cols[weights.rows == 0].tolist()
    plain, _ = ofa_weights(keys, keys, neighbors=4, temperature=0.1)
    assert (plain.cols == plain.rows).sum() >= 29


def test_salt_norm_guard_wider_than_the_dtype_bounds_nothing(tokenizers_en, tokenizers_ru, method_options):
    """norm_guard=1e300 (finite, > 1: accepted) put median * guard past float32's range, and torch's clamp raised a
    raw RuntimeError; it guards nothing, as None does."""
    source, new = tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"]
    rows = []
    for guard in (1e300, None):
        model = make_model("llama-untied", source)
        model.extend_vocabulary(new, method="salt", source_tokenizer=source,
                                **{**method_options("salt", "sentencepiece"), "norm_guard": guard})
        rows.append(model.get_input_embeddings().weight.detach())
        assert vocabshift.get_record(model).diagnostics["norm_guarded"] in ([0, 0], [0], 0)
    assert torch.equal(rows[0], rows[1])
