"""The rule for capturing what a model computes (`mha_lib/nn/__init__.py`, "Capturing what a
model computes"), read from the library's source: attention weights through the attention
function, activations through forward hooks or the public seams; no module replaces a
`forward`, calls another object's private method, or hooks a layer outside the places the rule
names, and each place it names does what it says."""

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = sorted((ROOT / "mha_lib").rglob("*.py"))

# the modules the rule names for forward hooks
HOOKS = {"mha_lib/llm/sinks.py", "mha_lib/sparse_attention/sparse_mla.py"}
# private by name only: the standard library's documented `os._exit` (a child process ends)
PUBLIC = {"os._exit"}


def _trees():
    for path in LIBRARY:
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _private(name: str) -> bool:
    """A private name: one leading underscore, not a dunder and not a protocol name such as
    IPython's `_repr_mimebundle_` (which ends with one)."""
    return name.startswith("_") and not name.endswith("_")


def test_no_module_replaces_a_forward():
    found = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in ("forward", "__call__"):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(target)} = ...")
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "setattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in ("forward", "__call__")
            ):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "a forward replaced to capture values; use a hook or a seam: " + str(found)


def test_no_module_calls_a_private_method_of_another_object():
    """`attn._project(x, x, x)` reads a layer through a door it does not promise; the layer's
    public `project(x)` or `qkv(x, positions)` is the way in."""
    found = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if (
                _private(node.func.attr)
                and ast.unparse(node.func) not in PUBLIC
                and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls"))
                and not (isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "super")
            ):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
    assert not found, "private methods of other objects called: " + str(found)


def test_forward_hooks_only_where_the_rule_names_them():
    found = set()
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("register_forward"):
                found.add(rel)
    assert found == HOOKS, f"forward hooks in {sorted(found)}; the rule names {sorted(HOOKS)}"


@pytest.mark.parametrize(
    ("named", "where", "what"),
    [
        ("backends.RecordWeights", "nn.decoder:DecoderLM.forward", "RecordWeights("),
        ("llm.sinks.layer_inputs", "llm.sinks:layer_inputs", "_run_with_hooks("),
        ("llm.sinks.layer_inputs", "llm.sinks:_run_with_hooks", "forward_pre_hook("),
        ("llm.sinks.layer_inputs", "llm.sinks:_run_with_hooks", ".remove()"),
        ("llm.induction.swapped_stripe", "llm.induction:swapped_stripe", ".qkv("),
        ("pretrained.roles.positional_scores", "pretrained.roles:positional_scores", ".project("),
        ("llm.streaming.token_losses", "llm.streaming:token_losses", ".hidden_states("),
        (
            "sparse_attention.DeepseekV32LM.topk_indices",
            "sparse_attention.sparse_mla:DeepseekV32LM.topk_indices",
            "register_forward_hook(",
        ),
        (
            "sparse_attention.DeepseekV32LM.topk_indices",
            "sparse_attention.sparse_mla:DeepseekV32LM.topk_indices",
            ".remove()",
        ),
    ],
)
def test_each_place_the_rule_names_does_what_it_says(named, where, what):
    import importlib

    assert named in _rule(), f"the rule no longer names {named}"
    module, qualname = where.split(":")
    obj = importlib.import_module(f"mha_lib.{module}")
    for part in qualname.split("."):
        obj = getattr(obj, part)
    assert what in inspect.getsource(obj), f"{where} no longer calls {what}"


def _rule() -> str:
    import mha_lib.nn

    doc = mha_lib.nn.__doc__
    return doc[doc.index("Capturing what a model computes") : doc.index("Notation:")]


def test_the_rule_is_written_once_in_nn_and_named_in_the_library_docs():
    rule = _rule()
    for name in ("RecordWeights", "need_weights", "qkv(x, positions)", "project(x)", "hook"):
        assert name in rule, name
    docs = (ROOT / "docs" / "library.md").read_text()
    assert "tests/nn/test_capture.py" in docs and "RecordWeights" in docs
