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
