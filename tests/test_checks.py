"""mha_lib._checks beyond the argument checks the public functions' tests exercise: `sha256`."""

import hashlib


def test_sha256_reads_a_file_in_chunks_and_is_the_loaders_one(tmp_path):
    from mha_lib import _checks
    from mha_lib.llm import loader
    from mha_lib.pretrained import encoder

    data = bytes(range(256)) * 9000  # 2.3 MB: more than one 1 MiB chunk
    (tmp_path / "f").write_bytes(data)
    assert _checks.sha256(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert loader.sha256 is encoder.sha256 is _checks.sha256


def test_check_int_names_the_argument_and_takes_numpy_integers_on_request():
    import numpy as np
    import pytest

    from mha_lib._checks import check_int

    assert check_int(3, "n") == 3 and check_int(0, "n", 0) == 0
    with pytest.raises(ValueError, match=r"n must be at least 1; got 0"):
        check_int(0, "n")
    for bad, kind in ((2.0, "float"), (True, "bool"), (np.int64(2), "int64")):
        with pytest.raises(TypeError, match=rf"n must be an int; got {kind}"):
            check_int(bad, "n")
    got = check_int(np.int64(2), "n", numpy=True)
    assert got == 2 and type(got) is int
    with pytest.raises(TypeError, match=r"n must be an int; got bool"):
        check_int(np.bool_(True), "n", numpy=True)


# Files whose hand-written int checks are still to be converted to `check_int`.
_NOT_YET = {"mha_lib/nn/decoder.py", "mha_lib/positions.py"}


def _int_check_of(test) -> str | None:
    """The name an `if` tests as `not isinstance(name, int ...)`, or None."""
    import ast

    for node in ast.walk(test):
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.Not)
            and isinstance(node.operand, ast.Call)
            and getattr(node.operand.func, "id", None) == "isinstance"
            and isinstance(node.operand.args[0], ast.Name)
            and "int" in (kinds := ast.unparse(node.operand.args[1]))
            and "float" not in kinds  # a number, not a count
        ):
            return node.operand.args[0].id
    return None


def _lower_bound_on(test, name: str) -> bool:
    """Whether `test` holds `name < c` or `name <= c` with a constant c, and no upper bound."""
    import ast

    for node in ast.walk(test):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Lt | ast.LtE)
            and isinstance(node.left, ast.Name)
            and node.left.id == name
            and isinstance(node.comparators[0], ast.Constant)
        ):
            return True
    return False


def test_no_hand_written_int_check_beside_check_int():
    """An argument that must be an int of at least some size is checked by `check_int` (one
    message for every such argument: "n must be an int; got float", "n must be at least 1;
    got 0"), not by an `isinstance(n, int) ... n < 1` written again by hand."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "mha_lib").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "mha_lib/_checks.py" or rel in _NOT_YET:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            body = getattr(node, "body", None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if not isinstance(stmt, ast.If) or (name := _int_check_of(stmt.test)) is None:
                    continue
                after = body[i + 1] if i + 1 < len(body) else None
                if _lower_bound_on(stmt.test, name) or (
                    isinstance(after, ast.If) and _lower_bound_on(after.test, name)
                ):
                    found.append(f"{rel}:{stmt.lineno} ({name})")
    assert not found, "hand-written int checks; use mha_lib._checks.check_int: " + ", ".join(found)
