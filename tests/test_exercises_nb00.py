"""The checkers of notebook 00 accept the right answer and name the usual mistakes."""

from mha_lib.exercises import check_parameter_count, check_shapes


def shapes(C, h, d_k, d_v):
    return {
        "X": ("N", C),
        "W_Q^h": (C, d_k),
        "W_K^h": (C, d_k),
        "W_V^h": (C, d_v),
        "W_O": (h * d_v, C),
    }


def test_check_shapes(capsys):
    assert check_shapes(shapes)
    assert "✓" in capsys.readouterr().out

    def w_o_transposed(C, h, d_k, d_v):
        return shapes(C, h, d_k, d_v) | {"W_O": (C, h * d_v)}

    assert not check_shapes(w_o_transposed)
    assert "W_O is transposed" in capsys.readouterr().out

    def w_q_transposed(C, h, d_k, d_v):
        return shapes(C, h, d_k, d_v) | {"W_Q^h": (d_k, C)}

    assert not check_shapes(w_q_transposed)
    assert "W_Q^h is transposed" in capsys.readouterr().out

    assert not check_shapes(lambda C, h, d_k, d_v: None)
    assert "not implemented" in capsys.readouterr().out


def test_check_parameter_count(capsys):
    assert check_parameter_count(lambda C, h, d_k, d_v: h * (2 * C * d_k + C * d_v) + h * d_v * C)
    assert "✓" in capsys.readouterr().out
    assert not check_parameter_count(lambda C, h, d_k, d_v: 2 * C * d_k + C * d_v + h * d_v * C)
    assert "multiply those by h" in capsys.readouterr().out
    assert not check_parameter_count(lambda C, h, d_k, d_v: h * (2 * C * d_k + C * d_v))
    assert "output projection" in capsys.readouterr().out
    assert not check_parameter_count(lambda C, h, d_k, d_v: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
