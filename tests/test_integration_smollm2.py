"""SmolLM2-135M-Instruct extended with a 16k Russian BPE trained on the shared corpus (200 held-out lines)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from vocabshift.training import bits_per_byte
from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer

pytestmark = pytest.mark.integration

# The issue asked for at most +25% over the original model at step 0. Measured here with each held-out line scored as
# its own document (the same bytes of context for both tokenizers): +8.0% for `subword` in extend mode, +6.6% with
# tied_mean_shift=0.25 (which slows embedding-only training, so it is measured, not the default). Issue 2's closing
# note measured +33% and +24.7% with 512-token windows over the newline-joined lines: there the earlier lines are
# context, which the original model puts to better use than the step-0 adapted one (though it got fewer bytes of
# them). STEP0_RATIO_BOUND guards against regressions; SHIFTED_RATIO_BOUND is the target.
STEP0_RATIO_BOUND = 1.15
SHIFTED_RATIO_BOUND = 1.25


@pytest.fixture(scope="module")
def smollm2_setup():
    torch.manual_seed(0)
    folder = smollm2()
    source = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return model, source, target_tokenizer(source, "ru")


def test_subword_extension_of_smollm2(smollm2_setup):
    base, source, russian = smollm2_setup
    # the first 100 of the 200 lines the tokenizer never saw: eleven scorings of 200 lines took over 5 minutes of CI
    ru = held_out_split(read_corpus("ru"), 200)[1][:100]
    en = held_out_split(read_corpus("en"), 200)[1][:100]
    figures = {"original": {"ru": bits_per_byte(base, source, ru), "en": bits_per_byte(base, source, en),
                            "tokens/word": vocabshift.tokens_per_word(source, ru)}}
    for method, options in (("subword", {}), ("mean", {}), ("random", {}), ("shifted", {"tied_mean_shift": 0.25})):
        model = copy.deepcopy(base)
        name = "subword" if method == "shifted" else method
        tokenizer = model.extend_vocabulary(russian, method=name, source_tokenizer=source, **options)
        figures[method] = {"ru": bits_per_byte(model, tokenizer, ru), "tokens/word": vocabshift.tokens_per_word(
            tokenizer, ru)}
        if method in ("subword", "shifted"):
            figures[method]["en"] = bits_per_byte(model, tokenizer, en)
        if method == "subword":
            record = vocabshift.get_record(model)
    print("\nSmolLM2-135M-Instruct, extend mode, 16k Russian BPE, 100 held-out lines per language")
    print(f"added {len(record.new_ids)} tokens; subword diagnostics {record.diagnostics}")
    for name, row in figures.items():
        print(f"{name:>9}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()))
    print("(shifted: subword with tied_mean_shift=0.25)")
    original, subword, shifted = figures["original"], figures["subword"], figures["shifted"]
    print(f"ratios vs original: ru bpb {subword['ru'] / original['ru']:.3f}, "
          f"en bpb {subword['en'] / original['en']:.4f}, "
          f"tokens/word {subword['tokens/word'] / original['tokens/word']:.3f}; shifted: ru bpb "
          f"{shifted['ru'] / original['ru']:.3f}, en bpb {shifted['en'] / original['en']:.4f}")
    assert subword["tokens/word"] <= 0.6 * original["tokens/word"]
    assert subword["ru"] < figures["mean"]["ru"] and subword["ru"] < figures["random"]["ru"]
    assert subword["ru"] <= STEP0_RATIO_BOUND * original["ru"]
    assert subword["en"] <= 1.03 * original["en"]
    assert shifted["ru"] <= SHIFTED_RATIO_BOUND * original["ru"] and shifted["en"] <= 1.03 * original["en"]
