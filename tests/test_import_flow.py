"""Imports follow the flow: errors/record/... -> vocab -> methods -> extend -> training -> propagation -> hub -> cli;
inside training: the CPT room -> the distillation room (which trains through the CPT callback) -> evaluate and probe
(which drive both).

Read statically from the sources (imports under `if TYPE_CHECKING:` are for the type checker and left out): every
module imports only modules of its own stage or of earlier ones, and no module imports itself through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "src" / "vocabshift"
# Stages in the order data flows; a module of a stage may import its own stage and the ones before it.
STAGES = [
    ("vocabshift._version", "vocabshift._typing", "vocabshift.errors", "vocabshift._disk", "vocabshift.arguments",
     "vocabshift.atomic", "vocabshift.corpus", "vocabshift.headers", "vocabshift.shard_index",
     "vocabshift._record_values", "vocabshift.packing", "vocabshift.record", "vocabshift.registry"),
    ("vocabshift.vocab", "vocabshift.save"),  # save writes a tokenizer.model in step (vocab.spm_file)
    ("vocabshift._vector_files", "vocabshift.wordvectors", "vocabshift.word_vector_training", "vocabshift.embeddings"),
    ("vocabshift.methods",),
    ("vocabshift.inputs", "vocabshift.results", "vocabshift.assemble", "vocabshift.extend_checks",
     "vocabshift.extension_record", "vocabshift.extend"),
    ("vocabshift.training.texts", "vocabshift.training.cpt"),
    ("vocabshift.training.distill",),
    ("vocabshift.training",),
    ("vocabshift.propagation", "vocabshift.export", "vocabshift.serving", "vocabshift.inspection"),
    ("vocabshift.hub",),
    ("vocabshift.cli_common", "vocabshift.cli_types", "vocabshift.cli_train", "vocabshift.cli_evaluate",
     "vocabshift.cli_publish", "vocabshift.cli", "vocabshift.__main__", "vocabshift"),
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _stage(module: str) -> int:
    matches = [(len(prefix), index) for index, names in enumerate(STAGES) for prefix in names
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no stage: add it to STAGES"
    return max(matches)[1]


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(module: str) -> set[str]:
    """The vocabshift modules `module` imports (at any depth of its code, outside `if TYPE_CHECKING:`)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "vocabshift")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            if base.split(".")[0] == "vocabshift":
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: _imports(module) for module in MODULES}


def test_every_import_goes_with_the_flow():
    against = sorted(f"{module} (stage {_stage(module)}) imports {name} (stage {_stage(name)})"
                     for module, names in GRAPH.items() for name in names if _stage(name) > _stage(module))
    assert not against, "\n".join(against)


def test_no_module_imports_itself_through_others():
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(" -> ".join([*path[path.index(module):], module]))
        if module in done:
            return
        for name in sorted(GRAPH[module]):
            walk(name, [*path, module])
        done.add(module)

    for module in sorted(GRAPH):
        walk(module, [])


def test_the_graph_is_read():
    """The checks above see the imports they are about (a parser that found nothing would pass them)."""
    assert "vocabshift.record" in GRAPH["vocabshift.extend"] and "vocabshift.methods" in GRAPH["vocabshift.extend"]
    train = GRAPH["vocabshift.cli_train"]
    assert "vocabshift.cli_common" in train and "vocabshift.cli" not in train
    assert "vocabshift.methods.base" not in GRAPH["vocabshift.registry"]  # a TYPE_CHECKING import
    assert "vocabshift.training.cpt.callback" in GRAPH["vocabshift.training.distill.trainer"]
    assert _stage("vocabshift.training.cpt.callback") < _stage("vocabshift.training.distill.trainer") \
        < _stage("vocabshift.training.probing")


def test_the_package_imports_nothing_of_the_checkout():
    """vocabshift_testing, the tests' and the benchmarks' modules are not installed: no module of the package may
    import them, even lazily inside a function."""
    checkout = {"vocabshift_testing", "conftest", "tests", "benchmarks", "examples", "scripts"}
    found = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   for name in _top_level_names(node) if name in checkout)
    assert not found, "\n".join(found)


def _top_level_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return [node.module.split(".")[0]]
    return []
