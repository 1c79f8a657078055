"""EmbeddingOnlyCallback in a real Trainer: old rows and body bit-identical, new rows trained, record, errors."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
from accelerate.state import AcceleratorState
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

import vocabshift
from conftest import ARCHITECTURES, make_model
from vocabshift.errors import InvalidArgumentError, RecordError, TrainingSetupError, UnsupportedModelError
from vocabshift.training import SecondStage, freeze_for_embedding_training
from vocabshift.training.cpt import embedding_parameters


def extended(architecture, tokenizers_en, tokenizers_ru):
    family = ARCHITECTURES[architecture][0]
    source = tokenizers_en[family]
    model = make_model(architecture, source)
    tokenizer = model.extend_vocabulary(tokenizers_ru[family], source_tokenizer=source)
    return model.train(), tokenizer


def blocks(tokenizer, lines, *, length=32, count=48):
    ids = tokenizer("\n".join(lines[:400]), add_special_tokens=False)["input_ids"]
    chunks = [ids[i : i + length] for i in range(0, length * count, length)]
    return [{"input_ids": torch.tensor(c), "labels": torch.tensor(c)} for c in chunks]


def arguments(tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=4, learning_rate=1e-2,
                   weight_decay=0.1, lr_scheduler_type="constant", logging_steps=1, report_to=[], save_strategy="no",
                   use_cpu=True, disable_tqdm=True, seed=0)
    return TrainingArguments(**{**options, **overrides})


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def embedding_names(model):
    ids = {id(p) for p in embedding_parameters(model)}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def assert_only_new_rows_changed(model, before):
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    old = torch.ones(model.get_input_embeddings().weight.shape[0], dtype=torch.bool)
    old[new_ids] = False
    embeddings = embedding_names(model)
    for name, parameter in model.named_parameters():
        if name in embeddings:
            assert torch.equal(parameter[old], before[name][old]), f"old rows of {name} moved"
            assert not torch.equal(parameter[new_ids], before[name][new_ids]), f"new rows of {name} did not train"
        else:
            assert torch.equal(parameter, before[name]), f"body parameter {name} moved"


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_old_rows_and_body_stay_bit_identical(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, architecture,
                                              accumulation):
    model, tokenizer = extended(architecture, tokenizers_en, tokenizers_ru)
    before = snapshot(model)
    trainer = Trainer(model=model, args=arguments(tmp_path, gradient_accumulation_steps=accumulation),
                      train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    groups = trainer.create_optimizer().param_groups
    assert [g["weight_decay"] for g in groups if g["params"]] == [0.1]  # weight decay does hit the embeddings
    assert len(groups[0]["params"]) == len(embedding_parameters(model)) == (2 if architecture == "llama-untied" else 1)
    new_rows = (len(vocabshift.get_record(model).new_ids), model.config.hidden_size)
    assert [tuple(p.shape) for p in groups[0]["params"]] == [new_rows] * len(groups[0]["params"])
    trainer.train()
    assert_only_new_rows_changed(model, before)
    assert trainer.state.global_step == 5
    moments = [t for s in trainer.optimizer.state.values() for t in s.values() if t.dim()]
    assert [tuple(t.shape) for t in moments] == [new_rows] * 2 * len(groups[0]["params"])


def test_rows_all_trains_old_rows_too(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """Control for the test above: the same run with rows='all' does move old rows (and still not the body)."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    before = snapshot(model)
    Trainer(model=model, args=arguments(tmp_path), train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[vocabshift.EmbeddingOnlyCallback(rows="all")]).train()
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) != (name in embedding_names(model)), name


def test_record_and_logs(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path, gradient_accumulation_steps=2),
                      train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    entry = vocabshift.get_record(model).cpt[-1]
    assert entry["steps"] == 5 and entry["rows"] == "new" and entry["total_batch_size"] == 8
    assert entry["tokens_seen"] == 5 * 8 * 32
    assert entry["trainable_rows"] == len(vocabshift.get_record(model).new_ids)
    assert math.isfinite(entry["final_loss"]) and entry["final_loss"] == trainer.state.log_history[-2]["loss"]
    assert entry["learning_rate"] == 1e-2 and entry["weight_decay"] == 0.1
    assert entry["objective"] == {"name": "next_token"} and "command" not in entry  # no command ran it
    logged = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logged) == 5 and all("vocabshift/embed_new_row_norm" in log for log in logged)
    assert logged[0]["vocabshift/head_old_row_norm"] == pytest.approx(entry["row_norms"]["head_old_row_norm"])
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())["vocabshift"]
    assert saved["cpt"] == [json.loads(json.dumps(entry))]


def test_the_record_names_the_label_smoothing_of_the_loss(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """label_smoothing_factor makes the Trainer's loss a smoothed cross-entropy, which reads higher than a plain
    one: the entry said a plain next-token objective beside its losses."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    Trainer(model=model, args=arguments(tmp_path, max_steps=1, label_smoothing_factor=0.1),
            train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    assert vocabshift.get_record(model).cpt[-1]["objective"] == {"name": "next_token", "label_smoothing": 0.1}


def test_the_record_has_the_batch_size_auto_find_batch_size_trained_with(tokenizers_en, tokenizers_ru, ru_lines,
                                                                         tmp_path):
    """After an out-of-memory error `auto_find_batch_size` trains on with a smaller batch: the entry said the batch
    given in the arguments (4), not the one that trained (3)."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    failed = []

    class OutOfMemoryOnce(Trainer):
        def compute_loss(self, *args, **kwargs):
            if not failed:
                failed.append(True)
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return super().compute_loss(*args, **kwargs)

    trainer = OutOfMemoryOnce(model=model, args=arguments(tmp_path, auto_find_batch_size=True, max_steps=2),
                              train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    entry = vocabshift.get_record(model).cpt[-1]
    assert failed and trainer.state.train_batch_size == 3  # accelerate takes 10% off the batch
    assert (entry["total_batch_size"], entry["tokens_seen"]) == (3, 2 * 3 * 32)


def test_the_record_says_which_step_its_final_loss_is_from(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """The Trainer logs every `logging_steps` and not at the last step: the last loss logged (the mean of steps 3-4
    here) is the entry's `final_loss`, and `final_loss_step` says so (it read as step 5's)."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path, logging_steps=2), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    entry = vocabshift.get_record(model).cpt[-1]
    last = [log for log in trainer.state.log_history if "loss" in log][-1]
    assert entry["steps"] == 5 and last["step"] == 4 and "resumed_from_step" not in entry  # it started at step 0
    assert (entry["final_loss_step"], entry["final_loss"]) == (4, last["loss"])


def test_head_learning_rate_matches_a_run_at_that_rate(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """One AdamW step with head_learning_rate=H moves the head as a run at lr=H does; the input rows as lr=L does."""
    results = []
    for lr, head in ((1e-2, 1e-3), (1e-3, None), (1e-2, None)):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        callback = vocabshift.EmbeddingOnlyCallback(head_learning_rate=head)
        Trainer(model=model, args=arguments(tmp_path, max_steps=1, learning_rate=lr),
                train_dataset=blocks(tokenizer, ru_lines), callbacks=[callback]).train()
        results.append([p.detach().clone() for p in embedding_parameters(model)])
    (inputs, head), (_, head_at_h), (inputs_at_l, head_at_l) = results
    torch.testing.assert_close(head, head_at_h, rtol=0, atol=1e-6)
    assert torch.equal(inputs, inputs_at_l) and not torch.allclose(head, head_at_l)
    trainer = Trainer(model=model, args=arguments(tmp_path, optim="adafactor"),
                      train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback(head_learning_rate=1e-3)])
    with pytest.raises(TrainingSetupError, match="SGD, Adam and AdamW .* not Adafactor"):
        trainer.train()


def test_head_learning_rate_over_the_optimizers_own_rate(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """optimizer_cls_and_kwargs sets the rate the optimizer runs at, not args.learning_rate: the head's update was
    scaled by head_learning_rate / args.learning_rate (200 times too far here), and the record named that rate."""
    results = []
    for args_rate in (1e-2, 5e-5):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        Trainer(model=model, args=arguments(tmp_path, max_steps=1, learning_rate=args_rate),
                train_dataset=blocks(tokenizer, ru_lines), optimizer_cls_and_kwargs=(torch.optim.AdamW, {"lr": 1e-2}),
                callbacks=[vocabshift.EmbeddingOnlyCallback(head_learning_rate=1e-3)]).train()
        results.append([p.detach().clone() for p in embedding_parameters(model)])
        assert vocabshift.get_record(model).cpt[-1]["learning_rate"] == 1e-2
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


class Snapshots(TrainerCallback):
    def __init__(self):
        self.steps = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps[state.global_step] = snapshot(model)


@pytest.mark.parametrize("lora", [None, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])])
def test_second_stage_unfreezes_the_body_after_the_step(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, lora):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    before, snapshots = snapshot(model), Snapshots()
    callback = vocabshift.EmbeddingOnlyCallback(second_stage=SecondStage(after_step=2, lora=lora))
    Trainer(model=model, args=arguments(tmp_path, max_steps=4), train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[callback, snapshots]).train()
    at_two = {name.replace(".base_layer", ""): p for name, p in snapshots.steps[2].items()}
    assert all(torch.equal(at_two[name], before[name]) for name in before if name not in embedding_names(model))
    assert all(torch.equal(v, torch.zeros_like(v)) for k, v in at_two.items() if "lora_B" in k)
    assert set(snapshot(model)) == set(before)  # LoRA merged away: a plain model again
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    body_changed = changed - embedding_names(model)
    if lora is None:
        assert "model.layers.0.mlp.up_proj.weight" in body_changed
    else:
        assert body_changed == {f"model.layers.{i}.self_attn.{m}_proj.weight" for i in (0, 1) for m in "qv"}
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    old = torch.ones(model.config.vocab_size, dtype=torch.bool)
    old[new_ids] = False
    assert torch.equal(model.lm_head.weight[old], before["lm_head.weight"][old])
    assert vocabshift.get_record(model).cpt[-1]["second_stage"]["mode"] == ("full" if lora is None else "lora")


class Interrupt(TrainerCallback):
    """Ctrl-C after the first step of the first run."""

    def __init__(self):
        self.done = False

    def on_step_end(self, args, state, control, **kwargs):
        if not self.done:
            self.done = True
            raise KeyboardInterrupt


def test_a_second_stage_trains_the_body_when_an_interrupted_trainer_trains_again(tokenizers_en, tokenizers_ru,
                                                                                  ru_lines, tmp_path):
    """train() again on a Trainer interrupted before its second stage: the first run's gate, never opened, kept
    zeroing the body's gradients, so the body never trained while the record said it had."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    callback = vocabshift.EmbeddingOnlyCallback(second_stage=SecondStage(after_step=2))
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=4, weight_decay=0.0),
                      train_dataset=blocks(tokenizer, ru_lines), callbacks=[callback, Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    interrupted = snapshot(model)
    trainer.train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, interrupted[name])}
    assert "model.layers.0.mlp.up_proj.weight" in changed
    assert vocabshift.get_record(model).cpt[-1]["second_stage"]["after_step"] == 2


def test_a_run_after_a_trainer_interrupted_before_its_second_stage_trains_the_body(tokenizers_en, tokenizers_ru,
                                                                                   ru_lines, tmp_path):
    """A new Trainer after one interrupted before its second stage: the first one's gate, left on the body closed,
    zeroed the body's gradients, so the new run's second stage trained nothing of it."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    first = Trainer(model=model, args=arguments(tmp_path, max_steps=4), train_dataset=blocks(tokenizer, ru_lines),
                    callbacks=[vocabshift.EmbeddingOnlyCallback(second_stage=SecondStage(after_step=2)), Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        first.train()
    interrupted = snapshot(model)
    Trainer(model=model, args=arguments(tmp_path, max_steps=2, weight_decay=0.0),
            train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[vocabshift.EmbeddingOnlyCallback(second_stage=SecondStage(after_step=1))]).train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, interrupted[name])}
    assert "model.layers.0.mlp.up_proj.weight" in changed


def test_a_run_after_an_abandoned_lora_stage_leaves_a_plain_model(tokenizers_en, tokenizers_ru, ru_lines, tmp_path,
                                                                   caplog):
    """A Trainer built with a LoRA second stage and never trained, then one without: the first one's LoRA layers
    stayed in the model, whose saved weights (q_proj.base_layer.weight, lora_A...) from_pretrained did not read
    (q_proj drawn at random)."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    names = set(snapshot(model))
    stage = SecondStage(after_step=1, lora=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback(second_stage=stage)])
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
                callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    assert "SecondStage left its LoRA adapters in the model" in caplog.text
    assert set(snapshot(model)) == names and set(model.state_dict()) == names


@pytest.mark.parametrize(("options", "named"), [
    ({"target_modules": ["embed_tokens", "q_proj"]}, "input embeddings (target_modules="),
    ({"target_modules": ["q_proj", "lm_head"]}, "output head (target_modules="),
    ({"target_modules": ["q_proj"], "modules_to_save": ["embed_tokens"]},
     "input embeddings (modules_to_save=['embed_tokens'])"),
    ({"target_modules": ["q_proj"], "trainable_token_indices": [1, 2]}, "input embeddings (trainable_token_indices="),
])
def test_a_second_stage_lora_on_the_embeddings_leaves_the_model_as_it_was(tokenizers_en, tokenizers_ru, tmp_path,
                                                                          options, named):
    """peft injected the adapters into the model in place, then the row split failed with a message telling the user
    to call extend_vocabulary before get_peft_model (neither of which they had done); the model was left with LoRA
    layers, its body frozen, and (modules_to_save on a tied model) untied by peft's unload."""
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    before, modules = snapshot(model), [type(module) for module in model.modules()]
    stage = SecondStage(after_step=1, lora=LoraConfig(r=2, **options))
    with pytest.raises(InvalidArgumentError, match="SecondStage's LoraConfig would wrap Qwen2ForCausalLM's") as info:
        Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback(second_stage=stage)])
    assert named in str(info.value) and "target_modules=['down_proj', 'gate_proj'" in str(info.value)
    assert [type(module) for module in model.modules()] == modules and not hasattr(model, "peft_config")
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert all(p.requires_grad and torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert set(snapshot(model)) == set(before)


@pytest.mark.parametrize(("after_step", "warned"), [(3, True), (2, False)])
def test_warns_of_a_second_stage_past_the_run(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, caplog, after_step,
                                              warned):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    callback = vocabshift.EmbeddingOnlyCallback(second_stage=SecondStage(after_step=after_step))
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        Trainer(model=model, args=arguments(tmp_path, max_steps=3), train_dataset=blocks(tokenizer, ru_lines),
                callbacks=[callback]).train()
    message = f"SecondStage(after_step={after_step}) is not before max_steps=3: the body never trains"
    assert (message in caplog.text) == warned


def test_refuses_two_callbacks_in_one_trainer(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback(), vocabshift.EmbeddingOnlyCallback(rows="all")])
    with pytest.raises(TrainingSetupError, match="its callbacks hold a second EmbeddingOnlyCallback"):
        trainer.train()


def test_refuses_one_callback_given_twice(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """The same instance twice: every event ran twice, the record got the run twice and head_learning_rate scaled
    the head's update twice (its square), without a word."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    callback = vocabshift.EmbeddingOnlyCallback(head_learning_rate=1e-3)
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[callback, callback])
    with pytest.raises(TrainingSetupError, match="is in the Trainer's callbacks twice .* Pass it once"):
        trainer.train()
    assert vocabshift.get_record(model).cpt == []


def test_refuses_a_model_without_record(tokenizers_en, ru_lines, tmp_path):
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    with pytest.raises(RecordError, match="carries no vocabshift record.*rows='all'"):
        Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])


@pytest.mark.parametrize("rows, match", [("new", "given an optimizer .*optimizer_cls_and_kwargs"),
                                         ("all", "optimizer holds .* parameters .* built before")])
def test_refuses_an_optimizer_built_before_freezing(tokenizers_en, tokenizers_ru, tmp_path, rows, match):
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(TrainingSetupError, match=match):
        Trainer(model=model, args=arguments(tmp_path), optimizers=(optimizer, None),
                callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])
    assert "trainable_rows" not in dict(model.named_parameters())  # refused before anything was split


def test_refuses_a_callback_added_after_the_trainer_was_built(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path), train_dataset=blocks(tokenizer, ru_lines))
    trainer.add_callback(vocabshift.EmbeddingOnlyCallback())
    before = snapshot(model)
    with pytest.raises(TrainingSetupError, match="did not see this model.*callbacks="):
        trainer.train()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_refuses_a_model_init(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """model_init builds a new model in train(), after the callback froze the first one: it was blamed on
    trainer.add_callback, though the callback was in callbacks=[...]."""
    tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)[1]
    trainer = Trainer(model_init=lambda: extended("qwen2-tied", tokenizers_en, tokenizers_ru)[0],
                      args=arguments(tmp_path), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    with pytest.raises(TrainingSetupError, match="froze another model than the one this Trainer trains: the Trainer "
                                                 "has a model_init.* pass Trainer\\(model=...\\)"):
        trainer.train()


def test_refuses_one_callback_for_trainers_of_two_models(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """The second Trainer took the callback over: the first model stayed split, and the first Trainer's train()
    blamed trainer.add_callback."""
    first, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    second, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    callback, before = vocabshift.EmbeddingOnlyCallback(), snapshot(second)
    trainer = Trainer(model=first, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[callback])
    with pytest.raises(TrainingSetupError, match="already serves a Trainer of another Qwen2ForCausalLM.* its own "
                                                 "EmbeddingOnlyCallback"):
        Trainer(model=second, args=arguments(tmp_path), callbacks=[callback])
    after = snapshot(second)
    assert after.keys() == before.keys() and all(torch.equal(p, before[n]) for n, p in after.items())
    assert all(p.requires_grad for p in second.parameters())
    trainer.train()  # the first Trainer still trains
    assert vocabshift.get_record(first).cpt[-1]["steps"] == 1


def test_refuses_a_peft_model(tokenizers_en, tokenizers_ru, tmp_path):
    """Around a PeftModel the callback froze the adapters, and the Trainer's checkpoints and save_model wrote the
    (untrained) adapters alone, without the trained rows: refused before anything is frozen or split."""
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    wrapped = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    trainable = [name for name, p in wrapped.named_parameters() if p.requires_grad]
    match = "peft PeftModel: embedding-only training would freeze its adapters.*\\(second_stage=SecondStage"
    with pytest.raises(UnsupportedModelError, match=match):
        Trainer(model=wrapped, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    with pytest.raises(UnsupportedModelError, match=match):
        freeze_for_embedding_training(wrapped)
    assert [name for name, p in wrapped.named_parameters() if p.requires_grad] == trainable
    assert "trainable_rows" not in str(dict(wrapped.named_parameters()).keys())


def test_a_run_of_no_step_adds_no_record_entry(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, caplog):
    """max_steps=0 trained nothing, and the record got an entry with train_loss 0.0 as if a run had taken place."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    before = snapshot(model)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        Trainer(model=model, args=arguments(tmp_path, max_steps=0, num_train_epochs=0),
                train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    assert "Training ended after 0 steps (max_steps=0, or num_train_epochs=0): nothing trained" in caplog.text
    assert vocabshift.get_record(model).cpt == []
    after = snapshot(model)
    assert after.keys() == before.keys() and all(torch.equal(p, before[n]) for n, p in after.items())


def test_warns_of_batches_without_labels(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, caplog):
    """Every label -100: the loss is exactly 0 and nothing trains, which the Trainer logs without a word."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    masked = [{**b, "labels": torch.full_like(b["labels"], -100)} for b in blocks(tokenizer, ru_lines)]
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        Trainer(model=model, args=arguments(tmp_path, max_steps=2), train_dataset=masked,
                callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    assert caplog.text.count("The training loss is exactly 0 at step 1: no token of these batches has a label") == 1


@pytest.mark.parametrize("tokenized_with", ["original", "extended"])
def test_warns_of_batches_without_new_tokens(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, caplog, tokenized_with):
    """Text tokenized with the original tokenizer holds no new id: the new rows would train only to be less likely
    (through the tied head), without a word. Said once, after the first steps."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    data = blocks(tokenizers_en["bytelevel"] if tokenized_with == "original" else tokenizer, ru_lines)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        Trainer(model=model, args=arguments(tmp_path, max_steps=3), train_dataset=data,
                callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    warned = caplog.text.count("The batches of the first 3 steps hold none of the new tokens (ids ")
    assert warned == (tokenized_with == "original")


def test_the_record_names_the_best_checkpoint_loaded(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """load_best_model_at_end puts an earlier checkpoint's weights back: the entry says which, beside the last
    step's figures (before, it read as if the model were the last step's)."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    data = blocks(tokenizer, ru_lines)
    args = arguments(tmp_path, max_steps=3, eval_strategy="steps", eval_steps=1, save_strategy="steps",
                     save_steps=1, load_best_model_at_end=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4],
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    best = trainer.state.best_global_step
    assert best in (1, 2, 3)
    # the metric as the Trainer compared it: the evaluation's loss ("loss" read as the training loss at that step)
    assert vocabshift.get_record(model).cpt[-1]["loaded_best"] == {"step": best, "metric": "eval_loss",
                                                                   "value": trainer.state.best_metric}
    evaluated = {log["step"]: log["eval_loss"] for log in trainer.state.log_history if "eval_loss" in log}
    assert evaluated[best] == trainer.state.best_metric


def test_optimizer_chosen_through_the_trainer(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """optimizer_cls_and_kwargs: the Trainer builds that optimizer over the split rows."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    before = snapshot(model)
    trainer = Trainer(model=model, args=arguments(tmp_path), train_dataset=blocks(tokenizer, ru_lines),
                      optimizer_cls_and_kwargs=(torch.optim.SGD, {"lr": 1e-1, "momentum": 0.9}),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    assert isinstance(getattr(trainer.optimizer, "optimizer", trainer.optimizer), torch.optim.SGD)
    assert_only_new_rows_changed(model, before)


@pytest.mark.parametrize("rows", ["new", "all"])
def test_refuses_a_second_train_on_the_same_trainer(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, rows):
    """rows='all' trained again: the body, trainable again after the first run, took gradients that the Trainer's
    clipping counted (the embeddings' steps scaled down by the body's norm) and the record got a second run."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])
    trainer.train()
    with pytest.raises(TrainingSetupError, match="trained once.* build a new Trainer"):
        trainer.train()


@pytest.mark.parametrize("rows", ["new", "all"])
def test_stops_a_diverged_run_before_it_is_saved(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, rows):
    """A learning rate far too high makes the trained rows NaN at step 2; the Trainer's logs hide NaN losses, so the
    run would end, and save, with unusable rows. It stops at that step, before the step's checkpoint."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(tmp_path, learning_rate=1e30, save_strategy="steps", save_steps=1)
    trainer = Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])
    with pytest.raises(vocabshift.errors.TrainingDivergedError, match="Training diverged at step 2: [0-9]+ trained "
                       "rows hold NaN or infinite values .* a checkpoint saved before step 2.* lower learning_rate "
                       "than 1e\\+30"):
        trainer.train()
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == ["checkpoint-1"]
    assert "trainable_rows" not in str(dict(model.named_parameters()).keys())  # folded back into the model
    assert not torch.isfinite(model.get_input_embeddings().weight).all()


def test_trainable_ids(tokenizers_en, tokenizers_ru, tmp_path):
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    callback = vocabshift.EmbeddingOnlyCallback()
    with pytest.raises(TrainingSetupError, match="known once the Trainer is built"):
        _ = callback.trainable_ids
    Trainer(model=model, args=arguments(tmp_path), callbacks=[callback])
    assert callback.trainable_ids.tolist() == vocabshift.get_record(model).new_ids
    other, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    every = vocabshift.EmbeddingOnlyCallback(rows="all")
    Trainer(model=other, args=arguments(tmp_path), callbacks=[every])
    assert every.trainable_ids is None


def test_checkpoints_are_plain_models_and_resume(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A checkpoint saved mid-training loads without vocabshift; resuming from it ends where the whole run ends."""
    finals = []
    for resume in (None, tmp_path / "whole" / "checkpoint-2"):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        folder = tmp_path / ("resumed" if resume else "whole")
        args = arguments(folder, max_steps=4, save_strategy="steps", save_steps=2)
        snapshots = Snapshots()
        Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines),
                callbacks=[vocabshift.EmbeddingOnlyCallback(), snapshots]).train(resume_from_checkpoint=resume)
        finals.append(snapshot(model))
        if resume is None:
            at_two, new_ids = snapshots.steps[2], vocabshift.get_record(model).new_ids
            state = AutoModelForCausalLM.from_pretrained(folder / "checkpoint-2").state_dict()
            assert set(state) == {k for k in at_two if "trainable_rows" not in k}
            for name in ("model.embed_tokens", "lm_head"):
                assert torch.equal(state[f"{name}.weight"][new_ids], at_two[f"{name}.trainable_rows"])
    assert set(finals[0]) == set(finals[1])
    for name in finals[0]:
        torch.testing.assert_close(finals[1][name], finals[0][name])


def test_bfloat16_model_in_the_trainer(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A bfloat16 model (with the Trainer's bf16 autocast): float32 rows and moments, old rows bit-identical."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.to(torch.bfloat16)
    before = snapshot(model)
    trainer = Trainer(model=model, args=arguments(tmp_path, bf16=True), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    moments = [t for s in trainer.optimizer.state.values() for t in s.values() if t.dim()]
    assert len(moments) == 4 and all(t.dtype == torch.float32 for t in moments)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert_only_new_rows_changed(model, before)


@pytest.mark.parametrize("rows, match", [([0, 10**6], r"ids from 0 to 1000000 .* pass ids in \[0, "),
                                         ([-1], "ids from -1"), ("old", "rows='old' is invalid"),
                                         ([2**70], "ids from 1180591620717411303424 to "),  # a raw ValueError
                                         ([], "non-empty list")])
def test_refuses_bad_rows(tokenizers_en, tokenizers_ru, tmp_path, rows, match):
    model, _ = extended("llama-untied", tokenizers_en, tokenizers_ru)
    with pytest.raises(InvalidArgumentError, match=match):
        Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])


def test_refuses_a_record_for_another_size(tokenizers_en, tokenizers_ru, tmp_path):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.resize_token_embeddings(len(tokenizer) + 64)
    with pytest.raises(RecordError, match="resized after extend_vocabulary"):
        Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback()])


def test_refuses_bad_options(tokenizers_en, tokenizers_ru, tmp_path):
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    with pytest.raises(InvalidArgumentError, match="head is tied"):
        Trainer(model=model, args=arguments(tmp_path),
                callbacks=[vocabshift.EmbeddingOnlyCallback(head_learning_rate=1e-3)])
    with pytest.raises(InvalidArgumentError, match="head_learning_rate=0 is invalid"):
        vocabshift.EmbeddingOnlyCallback(head_learning_rate=0)
    with pytest.raises(InvalidArgumentError, match="after_step=-1"):
        SecondStage(after_step=-1)
    with pytest.raises(InvalidArgumentError, match="lora is a dict: pass a peft.LoraConfig"):
        SecondStage(after_step=1, lora={"r": 8})


class Plugin:
    def __init__(self, **attributes):
        self.__dict__.update(attributes)


@pytest.mark.parametrize("plugin, value, name", [
    ("deepspeed_plugins", {"default": Plugin(zero_stage=2)}, "DeepSpeed"),
    ("deepspeed_plugins", {"default": Plugin(zero_stage=3)}, "DeepSpeed ZeRO-3"),
    ("fsdp_plugin", Plugin(fsdp_version=2, cpu_ram_efficient_loading=False), "FSDP2"),
    ("fsdp_plugin", Plugin(fsdp_version=2, cpu_ram_efficient_loading=True), "FSDP2"),
    ("fsdp_plugin", Plugin(fsdp_version=1), "FSDP1"),
])
def test_what_each_sharding_backend_gets(tokenizers_en, tokenizers_ru, tmp_path, monkeypatch, plugin, value, name):
    """DeepSpeed and FSDP need accelerators; the callback reads accelerate's state as the Trainer does."""
    model, _ = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(tmp_path)
    monkeypatch.setitem(AcceleratorState._shared_state, plugin, value)
    for options in ({"head_learning_rate": 1e-3}, {"second_stage": SecondStage(after_step=1)}):
        with pytest.raises(TrainingSetupError, match=f"head_learning_rate and second_stage .* not under {name} "):
            vocabshift.EmbeddingOnlyCallback(**options).on_init_end(args, None, None, model=model)
    callback = vocabshift.EmbeddingOnlyCallback(rows="new")
    if name in ("DeepSpeed ZeRO-3", "FSDP1"):
        with pytest.raises(TrainingSetupError, match=f"cannot split rows off .* {name} .* FSDP2"):
            callback.on_init_end(args, None, None, model=model)
        callback = vocabshift.EmbeddingOnlyCallback(rows="all")  # plain freezing
    if getattr(value, "cpu_ram_efficient_loading", False):
        with pytest.raises(TrainingSetupError, match="cpu_ram_efficient_loading: accelerate reloads .* Turn it off"):
            callback.on_init_end(args, None, None, model=model)
        callback = vocabshift.EmbeddingOnlyCallback(rows="all")
    callback.on_init_end(args, None, None, model=model)
    assert len([p for p in model.parameters() if p.requires_grad]) == 2
    callback._run.rows.fold()


@pytest.mark.parametrize("rows", ["new", "all"])
def test_a_run_after_an_abandoned_trainer_gives_the_body_back_trainable(tokenizers_en, tokenizers_ru, ru_lines,
                                                                        tmp_path, rows):
    """A Trainer built with the callback and never trained (rebuilt with other arguments, or its train() failed)
    froze the body; the next Trainer's callback read that frozen body as the flags to give back, so the model
    ended with its body frozen, and a later full fine-tuning trained its embeddings alone."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.model.norm.weight.requires_grad_(False)  # frozen by the user before: it stays frozen
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    Trainer(model=model, args=arguments(tmp_path), callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])
    Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)]).train()
    assert {name: p.requires_grad for name, p in model.named_parameters()} == flags


@pytest.mark.parametrize("rows", ["new", "all"])
def test_a_trainer_after_the_run_trains_what_it_did_before(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, rows):
    """The body stayed frozen after training: a later Trainer on the model (full fine-tuning) trained its embeddings
    alone, and said nothing."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.model.norm.weight.requires_grad_(False)  # frozen by the user before: it stays frozen
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    Trainer(model=model, args=arguments(tmp_path, max_steps=1), train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)]).train()
    assert {name: p.requires_grad for name, p in model.named_parameters()} == flags
    before = snapshot(model)
    Trainer(model=model, args=arguments(tmp_path / "2", max_steps=1), train_dataset=blocks(tokenizer, ru_lines)).train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert "model.layers.0.mlp.down_proj.weight" in changed and "model.norm.weight" not in changed
