"""mha_lib.models.llama: the plain decoder read from a transformers config and from a GGUF file,
the two agreeing; its rows of W_Q and W_K the only ones llama.cpp permutes."""

from mha_lib.models import ARCHITECTURES
from tests.models.checks import check_gguf_reader, check_hf_reader, options_set


def test_read_from_transformers_equals_transformers():
    assert options_set(check_hf_reader("llama")) == set()  # the plain model: no option


def test_read_from_a_gguf_file_as_from_transformers(tmp_path):
    check_gguf_reader("llama", tmp_path)


def test_only_llama_files_store_wq_and_wk_rows_in_adjacent_rope_pairs():
    permuted = {name for name, a in ARCHITECTURES.items() if a.rope_rows_permuted}
    assert permuted == {"llama"}
