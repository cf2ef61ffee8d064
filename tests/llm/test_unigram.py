"""mha_lib.llm.unigram: the best-total-score segmentation, on a small vocabulary where it is known,
and beside SentencePieceTokenizer's greedy merges on a toy vocabulary where the two differ."""

import pytest

from mha_lib.llm.sentencepiece import SentencePieceTokenizer
from mha_lib.llm.unigram import best_total_pieces, total_score


def toy():
    tokens = ["<unk>", "▁", "a", "b", "c", "▁a", "bc", "▁ab", "<0x41>"]
    scores = [0.0, -5.0, -3.0, -3.0, -3.0, -1.0, -1.0, -0.5, 0.0]
    types = [2, 1, 1, 1, 1, 1, 1, 1, 6]
    return SentencePieceTokenizer(tokens, scores, types)


def test_the_best_total_is_found():
    tok = toy()
    assert best_total_pieces(tok, "▁abc") == ["▁a", "bc"]  # -2 beats ▁ab + c (-3.5)
    assert total_score(tok, ["▁a", "bc"]) == -2.0
    assert best_total_pieces(tok, "▁ab") == ["▁ab"]
    with pytest.raises(ValueError, match="cannot be spelled"):
        best_total_pieces(tok, "▁d")
    with pytest.raises(ValueError, match="empty"):
        best_total_pieces(tok, "")


def test_greedy_merges_can_differ_from_the_best_total():
    """On '▁abc': ▁a and bc tie (-1), the leftmost merges first; then ▁a + b gives ▁ab (-0.5),
    the best pair left, and c stays alone: -3.5 in all, where ▁a + bc has -2."""
    tok = toy()
    greedy = tok.pieces(tok.encode(" abc", add_bos=False))
    assert greedy == ["▁ab", "c"] and total_score(tok, greedy) == -3.5
    assert best_total_pieces(tok, "▁abc") != greedy
