"""No module of vocabshift keeps data from one call for a later one in module-level state.

What one call leaves for another travels with the objects the caller holds: `extend_vocabulary` keeps replace mode's
original rows on the model (`embeddings.OriginalEmbeddings`) for distillation's teacher, not in a table of the
process. Two checks: read statically, no function writes into, or rebinds, a name bound at module level (registries
filled at import time excepted, by name); run, no module-level container (or class attribute) of any vocabshift module
changes over an extend in replace mode, a distillation run and an evaluation. Caches of pure functions
(`functools.lru_cache`) hold no data a caller gave them, and are not containers: neither check counts them.
"""

from __future__ import annotations

import ast
import copy
import gc
import importlib
import pkgutil
import sys
import weakref
from collections.abc import MutableMapping, MutableSequence, MutableSet
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments

import vocabshift
from conftest import make_model
from test_import_flow import MODULES

# Registries: filled when their modules are imported (the methods' also by a user's register_method); they map names to
# code, and no call of extend, train or propagate writes them.
REGISTRIES = {"vocabshift.registry": {"_METHODS"}, "vocabshift.cli_common": {"SUBCOMMANDS"}}
# Calls that change the container they are called on.
MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "add", "discard",
            "sort", "reverse", "appendleft", "extendleft", "difference_update", "intersection_update",
            "symmetric_difference_update", "__setitem__", "__delitem__"}


def _module_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level by assignment (imports, functions and classes left out)."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        names.update(t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
    return names - {"__all__"}


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Parameters and names the function assigns: they shadow the module's."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    names.update(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None)
    names.update(node.id for node in ast.walk(function) if isinstance(node, ast.Name)
                 and isinstance(node.ctx, ast.Store))
    return names


def _written(node: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Where `node` (a function's code) writes into one of `names` (`X[k] = v`, `del X[k]`, `X.attr = v`,
    `X.append(...)` and the other mutators) or rebinds any global (`global X`)."""
    found, rebound = [], []
    for child in ast.walk(node):
        if isinstance(child, ast.Global):
            rebound += [(child.lineno, name) for name in child.names]
        targets = child.targets if isinstance(child, (ast.Assign, ast.Delete)) else [child.target] if isinstance(
            child, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, (ast.Subscript, ast.Attribute)) and isinstance(target.value, ast.Name):
                found.append((child.lineno, target.value.id))
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in MUTATORS \
                and isinstance(child.func.value, ast.Name):
            found.append((child.lineno, child.func.value.id))
    return [(line, name) for line, name in found if name in names] + rebound


def written_globals(tree: ast.Module) -> list[tuple[int, str]]:
    """Every place a function of the module writes into, or rebinds, a name the module binds at its top level."""
    module = _module_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found += _written(node, module - _local_names(node))
    return sorted(set(found))


def test_no_function_writes_module_state():
    found = [f"{module}:{line}: {name}" for module, path in MODULES.items()
             for line, name in written_globals(ast.parse(path.read_text(encoding="utf-8")))
             if name not in REGISTRIES.get(module, set())]
    assert not found, "module-level state written by functions (keep it on an object the caller holds):\n" + \
        "\n".join(found)


def test_the_static_check_sees_a_process_wide_table():
    """The check above fails on what `embeddings.py` had: the original rows in a table of the process."""
    source = ("import weakref\n_ORIGINALS = weakref.WeakKeyDictionary()\nLIMIT = 3\n\n"
              "def remember(model, rows):\n    _ORIGINALS[model] = rows\n\n"
              "def forget(model):\n    _ORIGINALS.pop(model, None)\n\n"
              "def local(LIMIT):\n    LIMIT.append(1)\n\n"
              "def bump():\n    global LIMIT\n    LIMIT = 4\n")
    assert written_globals(ast.parse(source)) == [(6, "_ORIGINALS"), (9, "_ORIGINALS"), (15, "LIMIT")]
    assert set(REGISTRIES) <= set(MODULES) and MODULES["vocabshift.embeddings"].is_file()


def _fingerprint(value: Any) -> tuple[type, tuple[Any, ...]]:
    """What a container holds, by identity (keeping no reference, so that a weak table is not kept filled)."""
    if isinstance(value, MutableMapping):
        return type(value), tuple((id(key), id(item)) for key, item in list(value.items()))
    ids = [id(item) for item in value]
    return type(value), tuple(sorted(ids) if isinstance(value, MutableSet) else ids)


def module_state() -> dict[str, tuple[type, tuple[Any, ...]]]:
    """Every mutable container a vocabshift module holds at module level or as a class attribute, by name."""
    state = {}
    loaded = [module for name, module in sorted(sys.modules.items()) if name.split(".")[0] == "vocabshift"]
    for module in loaded:
        for name, value in vars(module).items():
            owners = [(name, value)]
            if isinstance(value, type) and value.__module__ == module.__name__:
                owners += [(f"{name}.{key}", item) for key, item in vars(value).items()]
            for label, item in owners:
                if isinstance(item, (MutableMapping, MutableSequence, MutableSet)) and label != "__all__":
                    state[f"{module.__name__}.{label}"] = _fingerprint(item)
    return state


def _import_everything() -> None:
    """Every module of the package (not `__main__`, which runs the command), so that state is looked for in all."""
    for info in pkgutil.walk_packages([str(Path(vocabshift.__file__).parent)], prefix="vocabshift."):
        if info.name != "vocabshift.__main__":
            importlib.import_module(info.name)


def test_the_run_time_check_sees_a_table_that_fills():
    table: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
    key = torch.nn.Linear(1, 1)
    before = _fingerprint(table)
    table[key] = 1
    assert _fingerprint(table) != before and _fingerprint([1]) != _fingerprint([1, 2])


def test_extend_train_and_evaluate_leave_no_module_state(tokenizers_en, tokenizers_ru, ru_lines, ru_held, tmp_path):
    _import_everything()
    source = tokenizers_en["bytelevel"]
    original = make_model("qwen2-tied", source)
    gc.collect()
    before = module_state()
    model = copy.deepcopy(original)
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source, mode="replace")
    args = TrainingArguments(str(tmp_path), max_steps=2, per_device_train_batch_size=2, save_strategy="no",
                             report_to=[], use_cpu=True, logging_steps=1)
    texts = vocabshift.training.pack_texts(ru_lines[:60], tokenizer, max_length=32)
    vocabshift.DistillationTrainer(model=model, args=args, train_dataset=texts, processing_class=tokenizer,
                                   teacher_tokenizer=source, max_length=32,
                                   callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")]).train()
    vocabshift.evaluate(model, tokenizer, ru_held[:4], original_model=original, original_tokenizer=source)
    gc.collect()
    after = module_state()  # the model is alive: a table keyed by it would still hold it
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"module-level state changed by a call: {changed}"
    assert vocabshift.get_record(model).cpt[-1]["steps"] == 2
