"""LEP on a real sibling pair built here: a tiny base LM pretrained on English and Russian, an instruct sibling
fine-tuned from it on a copy task (with chat markers it adds), and the base adapted to Russian (extend + embedding-only
CPT). The propagated instruct model must reach the adapted base's Russian loss and keep the instruct behaviour."""

from __future__ import annotations

import pytest
import torch
from tokenizers import AddedToken
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

import vocabshift
from conftest import make_tokenizer
from vocabshift.propagation import METHODS
from vocabshift.record import add_cpt_entry
from vocabshift.training import freeze_for_embedding_training
from vocabshift_testing.corpora import read_sample

CONTEXT, COPY_WORDS = 64, 1


@pytest.fixture
def one_thread():
    """Tiny models train faster on one thread (and the same on every machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def blocks(tokenizer, lines) -> torch.Tensor:
    ids = []
    for line in lines:
        ids += tokenizer(line, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    count = len(ids) // CONTEXT
    return torch.tensor(ids[: count * CONTEXT]).view(count, CONTEXT)


def lm_batches(data, size, generator):
    while True:
        batch = data[torch.randint(len(data), (size,), generator=generator)]
        yield batch, batch


def copy_batch(tokenizer, words, size, generator):
    """`<|im_start|> word <|im_end|> word </s>`; labels on the answer only."""
    start, end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    sequences, labels = [], []
    for index in torch.randint(len(words), (size, COPY_WORDS), generator=generator).tolist():
        body = tokenizer(" ".join(words[i] for i in index), add_special_tokens=False)["input_ids"]
        prompt, answer = [start, *body, end], [*body, tokenizer.eos_token_id]
        sequences.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, sequences))
    pad = lambda rows, value: torch.tensor([row + [value] * (width - len(row)) for row in rows])  # noqa: E731
    return pad(sequences, tokenizer.eos_token_id), pad(labels, -100)


def train(model, parameters, batches, steps, lr) -> None:
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        ids, labels = next(batches)
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


@torch.no_grad()
def copy_accuracy(model, tokenizer, words) -> float:
    """Answer tokens predicted right (teacher forcing), in percent, on held-out words."""
    ids, labels = copy_batch(tokenizer, words, 400, torch.Generator().manual_seed(123))
    predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
    mask = labels[:, 1:] != -100
    return 100 * (predicted[mask] == labels[:, 1:][mask]).float().mean().item()


@torch.no_grad()
def russian_loss(model, tokenizer, lines) -> float:
    data = blocks(tokenizer, lines)
    return model(input_ids=data, labels=data).loss.item()


def make_siblings(root, en, ru, generator):
    """Save base (pretrained on English and Russian); return the instruct model to fine-tune (base + chat markers)."""
    tokenizer = make_tokenizer("sentencepiece", en[:3000] + ru[:1500], 1000)
    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=256,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        tie_word_embeddings=False))
    mixed = torch.cat([blocks(tokenizer, en[:3500]), blocks(tokenizer, ru[:3000])])
    train(base, base.parameters(), lm_batches(mixed, 16, generator), 400, 3e-3)
    base.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    markers = [AddedToken(t, special=True, normalized=False) for t in ("<|im_start|>", "<|im_end|>")]
    tokenizer.add_tokens(markers, special_tokens=True)
    instruct = AutoModelForCausalLM.from_pretrained(root / "base")
    instruct.resize_token_embeddings(len(tokenizer))
    return instruct, tokenizer, mixed


def instruct_batches(tokenizer, words, mixed, generator):
    """Copy examples interleaved with language-modelling batches (instruction tuning keeps the LM ability)."""
    text = lm_batches(mixed, 8, generator)
    while True:
        yield copy_batch(tokenizer, words, 8, generator)
        yield next(text)


@pytest.mark.slow
def test_propagated_instruct_model_keeps_the_behaviour_and_gains_the_language(tmp_path, one_thread, capsys):
    en, ru = list(read_sample("en")), list(read_sample("ru"))
    words = sorted({w for line in en for w in line.split() if w.isalpha() and w.islower() and 3 <= len(w) <= 8})
    train_words, test_words = words[: len(words) * 4 // 5], words[len(words) * 4 // 5 :]
    generator = torch.Generator().manual_seed(0)
    instruct, instruct_tokenizer, mixed = make_siblings(tmp_path, en, ru, generator)
    base_accuracy = copy_accuracy(instruct, instruct_tokenizer, test_words)  # before the fine-tune
    train(instruct, instruct.parameters(), instruct_batches(instruct_tokenizer, train_words, mixed, generator), 600,
          1e-3)
    instruct.save_pretrained(tmp_path / "instruct")
    instruct_tokenizer.save_pretrained(tmp_path / "instruct")

    adapted = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    adapted_tokenizer = adapted.extend_vocabulary(make_tokenizer("sentencepiece", ru[:6000], 1500))
    with freeze_for_embedding_training(adapted, rows="new") as trainable:
        train(adapted, trainable.parameters, lm_batches(blocks(adapted_tokenizer, ru[:8000]), 16, generator), 150,
              3e-3)
    add_cpt_entry(adapted, {"rows": "new", "steps": 150})
    vocabshift.save_pretrained_atomic(adapted, adapted_tokenizer, tmp_path / "adapted")

    held = ru[-200:]
    instruct_accuracy = copy_accuracy(instruct, instruct_tokenizer, test_words)
    adapted_loss = russian_loss(adapted, adapted_tokenizer, held)
    lines = [f"base (chat markers added, before the fine-tune): copy accuracy {base_accuracy:.1f}%",
             f"instruct: copy accuracy {instruct_accuracy:.1f}%",
             f"adapted base: Russian held-out loss {adapted_loss:.4f} ({len(vocabshift.get_record(adapted).new_ids)} "
             "new tokens)"]
    figures = {}
    for method in METHODS:
        out = vocabshift.propagate(tmp_path / "adapted", tmp_path / "base", tmp_path / "instruct",
                                   output_dir=tmp_path / method, method=method)
        model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
        figures[method] = (russian_loss(model, tokenizer, held), copy_accuracy(model, tokenizer, test_words))
        fit = vocabshift.get_record(model).propagation[-1]["fit"]
        lines.append(f"{method}: Russian loss {figures[method][0]:.4f} ({figures[method][0] / adapted_loss - 1:+.1%}),"
                     f" copy accuracy {figures[method][1]:.1f}%, fit residual input "
                     f"{fit['input']['residual']:.3f} output {fit['output']['residual']:.3f}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert instruct_accuracy >= base_accuracy + 20  # the behaviour is the instruct model's own
    for method, (loss, accuracy) in figures.items():
        assert abs(loss / adapted_loss - 1) <= 0.05, method
        assert abs(accuracy - instruct_accuracy) <= 5, method
