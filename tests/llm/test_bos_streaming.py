"""mha_lib.llm.bos_streaming: notebook 15's sweep of rolling windows with and without `<bos>` on
Gemma 3 270M, over texts of six kinds; the cached sweep regenerated in part (one stretch of two
kinds at one window, about a minute on two cores), its summaries and its shape."""

import numpy as np
import pytest

from mha_lib.llm.bos_streaming import (
    SWEEP,
    bos_stretches,
    gaps,
    load_sweep,
    per_text,
    setting_name,
    stretch_losses,
)
from mha_lib.llm.texts import ALL_KINDS
from mha_lib.testing import assert_close
from tests.llm.test_kquants import GEMMA_INSTALLED


def test_the_cache_covers_six_kinds_and_three_windows():
    sweep = load_sweep()
    assert sweep["kinds"] == list(ALL_KINDS) and len(set(ALL_KINDS)) >= 5
    assert sweep["windows"] == list(SWEEP["windows"]) and len(sweep["windows"]) >= 3
    assert sweep["stretch"] == SWEEP["stretch"] and sweep["stretches"] == SWEEP["stretches"]
    assert sweep["made by"] == "python -m mha_lib.llm.bos_streaming"
    names = {"full"} | {setting_name(W, S) for W in sweep["windows"] for S in (0, 1)}
    for kind in sweep["kinds"]:
        assert set(sweep["losses"][kind]) == names
        assert all(len(v) == sweep["stretches"] for v in sweep["losses"][kind].values())


def test_the_summaries():
    sweep = {
        "kinds": ["a", "b"],
        "losses": {
            "a": {"full": [1.0, 3.0], "W=8 window": [4.0, 4.0], "W=8 window + <bos>": [2.0, 3.0]},
            "b": {"full": [1.0, 1.0], "W=8 window": [3.0, 3.0], "W=8 window + <bos>": [1.5, 1.5]},
        },
    }
    assert_close(per_text(sweep, "full"), np.array([2.0, 1.0]), rtol=0, atol=0)
    g = gaps(sweep, 8)
    assert_close(g["saved"], np.array([1.5, 1.5]), rtol=0, atol=0)
    assert_close(g["window cost"], np.array([2.0, 2.0]), rtol=0, atol=0)
    assert_close(g["bos cost"], np.array([0.5, 0.5]), rtol=0, atol=0)
    assert_close(g["given back"], np.array([0.75, 0.75]), rtol=0, atol=0)
    assert setting_name(None) == "full" and setting_name(16, 1) == "W=16 window + <bos>"


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 packages are not installed")
def test_the_cached_sweep_regenerates():
    """The first stretch of the code and of the CSV table, at W = 32, against the cache: the
    stretch's mean loss under the full cache, the window alone and the window with <bos>."""
    from mha_lib.llm.loader import load_gemma3

    model, tok = load_gemma3()
    sweep = load_sweep()
    for kind in ("code", "data"):
        batch = bos_stretches(tok, kind, sweep["stretch"], sweep["stretches"])[:1]  # (1, 192)
        assert int(batch[0, 0]) == tok.bos_id and int(batch[0, 1]) != tok.bos_id
        for W, S in [(None, 0), (32, 0), (32, 1)]:
            got = stretch_losses(model, batch, W, S)[0]
            cached = sweep["losses"][kind][setting_name(W, S)][0]
            assert abs(float(got) - cached) < 2e-3, (kind, W, S, float(got), cached)
    del model
