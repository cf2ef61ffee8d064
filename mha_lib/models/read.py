"""One reader per source, and every weight's names, run through the architecture files.

Derived in notebooks 12 (a GGUF file's numbers) and 15 (other architectures). Every module of
this package but this one and `spec` is an architecture file holding an `ARCHITECTURE`
(`ARCHITECTURES` finds them: adding an architecture is adding its file). What is the same for
every architecture is read here:
- `config_from_gguf(f)`: an open GGUF file (`mha_lib.llm.GGUFFile`) -> `DecoderConfig`; the
  numbers every llama.cpp architecture stores under its name (`{arch}.embedding_length`, ...),
  the file's RoPE scaling (`rope_freqs.weight`, Llama 3's; `rope.scaling.type` "linear" or
  "yarn" with its factor), then the architecture's own keys (`gguf_options`). An architecture
  without a file here, or whose files are not read, is refused by name before anything else;
- `config_fields_from_hf(config)`: a transformers config -> (its `Architecture`, the fields of
  our config); `config_from_hf` builds the `DecoderConfig` (a hybrid architecture's config is
  notebook 16's `HybridConfig.from_hf`, a sparse-MLA one's notebook 18's
  `SparseMLAConfig.from_hf`, which read the same fields);
- `layer_weights(config, layer)`, `model_weights(config)`: the `Weight` rows of a model of
  `config`, whatever architecture it came from: the plain Llama's rows, each replaced or joined
  by the rows of the options the config sets (so a configuration no file describes, a Llama
  with sink logits, still has its names); `gguf_names`, `hf_names`: the names' two maps;
  `splits(config)`: {our parameter name: how tensor parallelism splits it}; `state_from_hf`,
  `state_to_hf`: a state dict in transformers' names and back.
RoPE scalings (as `DecoderConfig.rope_freq_factors`, the global layers' frequencies divided by
them, and a YaRN model's attention factor folded into `query_scale`): "linear", Llama 3's
("llama3") and "yarn"; any other is refused by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from ..nn.decoder import DecoderConfig
from ..positions import (
    linear_frequency_factors,
    llama3_frequency_factors,
    yarn_frequency_factors,
)
from .spec import OPTION_WEIGHTS, Architecture, Weight

__all__ = [
    "ARCHITECTURES",
    "architecture",
    "config_fields_from_hf",
    "config_from_gguf",
    "config_from_hf",
    "gguf_names",
    "hf_names",
    "layer_weights",
    "model_weights",
    "splits",
    "state_from_hf",
    "state_to_hf",
]

_NOT_ARCHITECTURES = {"read", "spec"}


def _architecture_files() -> dict[str, Architecture]:
    """{llama.cpp's name: Architecture}, one per architecture file of this package."""
    found = {}
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.name in _NOT_ARCHITECTURES:
            continue
        arch = importlib.import_module(f"{__package__}.{module.name}").ARCHITECTURE
        found[arch.name] = arch
    return dict(sorted(found.items()))


ARCHITECTURES: dict[str, Architecture] = _architecture_files()


def _known() -> str:
    return ", ".join(f"{name!r} ({a.models})" for name, a in ARCHITECTURES.items())


def architecture(name: str) -> Architecture:
    """The architecture llama.cpp calls `name` ("llama", "gemma3", ...), refused by name when
    no file of this package describes it."""
    if name not in ARCHITECTURES:
        raise ValueError(f"architecture {name!r} is not described here; known: {_known()}")
    return ARCHITECTURES[name]


# ---------------------------------------------------------------------------- GGUF files


class GGUFKeys:
    """An open GGUF file's `{arch}.` keys: `get(key, default)`, `need(key)` (a ValueError
    naming a missing key), and the sizes every architecture file may need (hidden_size C,
    num_heads h, head_dim d, num_layers L)."""

    def __init__(self, f, arch: str) -> None:
        self.f, self.arch, self.keys = f, arch, set(f.keys())
        C, h = int(self.need("embedding_length")), int(self.need("attention.head_count"))
        self.hidden_size, self.num_heads = C, h
        self.head_dim = int(self.get("attention.key_length", C // h))
        self.num_layers = int(self.need("block_count"))

    def get(self, key: str, default=None):
        full = f"{self.arch}.{key}"
        return self.f.value(full) if full in self.keys else default

    def need(self, key: str):
        full = f"{self.arch}.{key}"
        if full not in self.keys:
            raise ValueError(f"{self.f.path.name} lacks the metadata key {full!r}")
        return self.f.value(full)


def config_from_gguf(f) -> DecoderConfig:
    """The DecoderConfig of an open GGUF file, every number from its metadata but the defaults
    its architecture file names. An architecture not read here is refused by name (a
    ValueError), before anything else is read."""
    arch = f.value("general.architecture")
    spec = ARCHITECTURES.get(arch)
    if spec is None or spec.gguf_options is None:
        readable = {n: a for n, a in ARCHITECTURES.items() if a.gguf_options is not None}
        what = "its files are not read here" if spec else "no file here describes it"
        raise ValueError(
            f"{f.path.name} holds a {arch!r} model ({what}); load_gguf reads "
            + ", ".join(f"{name!r} ({a.models})" for name, a in readable.items())
        )
    read = GGUFKeys(f, arch)
    d = read.head_dim
    rope_dim = int(read.get("rope.dimension_count", d))
    if rope_dim != d:
        raise ValueError(
            f"{arch}.rope.dimension_count = {rope_dim}; expected the head dimension {d} "
            "(partial rotary embeddings are not read from a file here)"
        )
    vocab = read.get("vocab_size")
    if vocab is None:
        if "tokenizer.ggml.tokens" not in read.keys:
            raise ValueError(
                f"{f.path.name} stores no vocabulary (neither tokenizer.ggml.tokens nor "
                f"{arch}.vocab_size)"
            )
        vocab = len(f.value("tokenizer.ggml.tokens"))
    base = float(read.get("rope.freq_base", 10_000.0))
    factors, attention_factor = _gguf_rope_scaling(read, rope_dim, base)
    options = spec.gguf_options(read)
    _fold_attention_factor(options, attention_factor, d)
    return DecoderConfig(
        vocab_size=int(vocab),
        hidden_size=read.hidden_size,
        num_layers=read.num_layers,
        num_heads=read.num_heads,
        num_kv_heads=int(read.get("attention.head_count_kv", read.num_heads)),
        head_dim=d,
        intermediate_size=int(read.need("feed_forward_length")),
        rope_base=base,
        rms_norm_eps=float(read.need("attention.layer_norm_rms_epsilon")),
        context_length=int(read.need("context_length")),
        tie_embeddings="output.weight" not in f.tensors,
        bos_token_id=_optional_int(f, "tokenizer.ggml.bos_token_id", read.keys),
        eos_token_id=_optional_int(f, "tokenizer.ggml.eos_token_id", read.keys),
        rope_freq_factors=factors,
        **options,
    )


# llama.cpp's YaRN keys that adjust it beyond transformers' (its own attention factors, an
# extrapolation mix, DeepSeek's log multiplier): a file that sets one is refused by name
YARN_UNREAD = (
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_ext_factor",
    "rope.scaling.yarn_log_multiplier",
)


def _gguf_rope_scaling(read: GGUFKeys, rope_dim: int, base: float):
    """(factors or None, attention factor): a file's RoPE scaling as llama.cpp reads it: Llama
    3's `rope_freqs.weight` (rope_dim/2 factors), times a linear scaling's factor, or YaRN's
    factors; any other kind is refused by name."""
    f, arch = read.f, read.arch
    factors, scaled = [1.0] * (rope_dim // 2), False
    if "rope_freqs.weight" in f.tensors:
        freqs = f.read("rope_freqs.weight").flatten()
        if freqs.numel() != rope_dim // 2:
            raise ValueError(
                f"rope_freqs.weight has {freqs.numel()} factors; expected one per RoPE pair, "
                f"rope_dim / 2 = {rope_dim // 2}"
            )
        factors, scaled = [float(x) for x in freqs], True
    factor = read.get("rope.scaling.factor", read.get("rope.scale_linear"))
    kind = read.get("rope.scaling.type", "linear" if factor else "none")  # llama.cpp's default
    if kind not in ("none", "linear", "yarn"):
        raise ValueError(
            f"{arch}.rope.scaling.type = {kind!r}: {f.path.name} stretches RoPE in a way not read "
            "here (linear and YaRN scaling and Llama 3's rope_freqs are)"
        )
    if kind == "yarn":
        if scaled:
            raise ValueError(
                f"{f.path.name} holds rope_freqs.weight and a YaRN scaling: expected one"
            )
        unread = [k for k in YARN_UNREAD if read.get(k) is not None]
        if unread:
            raise ValueError(
                f"{arch}.{unread[0]} is set: {f.path.name}'s YaRN is adjusted in a way not read "
                "here (its factor, original context and beta_fast, beta_slow are)"
            )
        original = read.need("rope.scaling.original_context_length")
        yarn, attention = yarn_frequency_factors(
            rope_dim,
            base,
            float(factor),
            int(original),
            beta_fast=float(read.get("rope.scaling.yarn_beta_fast", 32.0)),
            beta_slow=float(read.get("rope.scaling.yarn_beta_slow", 1.0)),
        )
        return tuple(yarn), attention
    if kind == "linear" and factor and float(factor) != 1.0:
        factors, scaled = [x * float(factor) for x in factors], True
    return (tuple(factors) if scaled else None), 1.0


def _fold_attention_factor(options: dict, attention_factor: float, d: int) -> None:
    """YaRN multiplies RoPE's cos and sin by an attention factor a, so every score by a²: folded
    into the config's query_scale (1/√d by default). With partial RoPE only the turned part of
    each score is so scaled: refused by name."""
    if attention_factor != 1.0:
        if options.get("rope_dim") not in (None, d):
            raise ValueError(
                f"rope_dim = {options['rope_dim']} with YaRN's attention factor "
                f"{attention_factor:g}: only the turned part of a score would be scaled, which "
                "query_scale cannot say; not read here"
            )
        scale = options.get("query_scale") or d**-0.5
        options["query_scale"] = scale * attention_factor**2


def _optional_int(f, key: str, keys) -> int | None:
    return int(f.value(key)) if key in keys else None


# ---------------------------------------------------------------------------- transformers


def architecture_of_hf(config) -> Architecture:
    """The architecture of a transformers config, by its `model_type`, refused by name when no
    file here reads it."""
    kind = getattr(config, "model_type", type(config).__name__)
    for arch in ARCHITECTURES.values():
        if kind in arch.hf_model_types:
            return arch
    known = sorted(t for a in ARCHITECTURES.values() for t in a.hf_model_types)
    raise ValueError(f"model_type = {kind!r} is not read here; expected one of {known}")


def config_fields_from_hf(config) -> tuple[Architecture, dict]:
    """(its Architecture, the fields of our config) of a transformers config, or of a dict of its
    fields (a config.json; its `model_type` says the architecture, and the keys it leaves out
    take the architecture's `hf_defaults`)."""
    if isinstance(config, dict):
        from types import SimpleNamespace

        arch = architecture_of_hf(SimpleNamespace(model_type=config.get("model_type")))
        config = SimpleNamespace(**{**arch.hf_defaults, **config})
    arch = architecture_of_hf(config)
    C, h = config.hidden_size, config.num_attention_heads
    d = getattr(config, "head_dim", None) or C // h
    rope = dict(config.rope_parameters or {})
    rope = rope.get("full_attention", rope)  # Gemma 3: the global layers' RoPE
    base = float(rope["rope_theta"])
    rope_dim = int(d * rope.get("partial_rotary_factor", 1.0))
    factors, attention_factor = _hf_rope_scaling(rope, rope_dim, base)
    options = arch.hf_options(config)
    _fold_attention_factor(options, attention_factor, d)
    eos = config.eos_token_id
    fields = dict(
        vocab_size=config.vocab_size,
        hidden_size=C,
        num_layers=config.num_hidden_layers,
        num_heads=h,
        num_kv_heads=config.num_key_value_heads,
        head_dim=d,
        intermediate_size=config.intermediate_size,
        rope_base=base,
        rms_norm_eps=config.rms_norm_eps,
        context_length=config.max_position_embeddings,
        tie_embeddings=bool(config.tie_word_embeddings),
        bos_token_id=getattr(config, "bos_token_id", None),
        eos_token_id=eos[0] if isinstance(eos, list | tuple) else eos,
        rope_freq_factors=factors,
        **options,
    )
    return arch, fields


# the readers of the architectures that are not the decoder, by `Architecture.config_class`
CONFIG_READERS = {
    "hybrid": ("has linear-attention layers", "mha_lib.linear_attention.HybridConfig.from_hf"),
    "whisper": ("is an encoder-decoder", "mha_lib.speech.WhisperConfig.from_hf"),
    "sparse_mla": (
        "attends with sparse latent attention",
        "mha_lib.sparse_attention.SparseMLAConfig.from_hf",
    ),
}


def config_from_hf(config) -> DecoderConfig:
    """Our DecoderConfig of a transformers config (see `config_fields_from_hf`). A hybrid
    architecture (Qwen3.5), an encoder-decoder (Whisper) or a sparse-MLA decoder (DeepSeek-V3.2)
    is refused, naming the reader that builds its config."""
    if isinstance(config, dict):
        from types import SimpleNamespace

        arch = architecture_of_hf(SimpleNamespace(model_type=config.get("model_type")))
    else:
        arch = architecture_of_hf(config)
    if arch.config_class != "decoder":
        what, reader = CONFIG_READERS[arch.config_class]
        raise ValueError(f"a {arch.models} config {what}: read it with {reader}")
    return DecoderConfig(**config_fields_from_hf(config)[1])


def _hf_rope_scaling(rope: dict, rope_dim: int, base: float):
    """(factors or None, attention factor) of transformers' rope_parameters."""
    kind = rope.get("rope_type", "default")
    if kind == "default":
        return None, 1.0
    if kind == "linear":
        return linear_frequency_factors(rope_dim, rope["factor"]), 1.0
    if kind == "llama3":
        return llama3_frequency_factors(
            rope_dim,
            base,
            rope["factor"],
            rope["low_freq_factor"],
            rope["high_freq_factor"],
            rope["original_max_position_embeddings"],
        ), 1.0
    if kind == "yarn":
        given = rope.get("attention_factor")
        return yarn_frequency_factors(
            rope_dim,
            base,
            rope["factor"],
            rope["original_max_position_embeddings"],
            beta_fast=rope.get("beta_fast") or 32.0,
            beta_slow=rope.get("beta_slow") or 1.0,
            truncate=rope.get("truncate", True),
            attention_factor=given,
            mscale=rope.get("mscale"),
            mscale_all_dim=rope.get("mscale_all_dim"),
        )
    raise ValueError(
        f"rope_type = {kind!r}: this RoPE scaling is not read here (linear, llama3 and yarn are)"
    )


# ---------------------------------------------------------------------------- weights


def _plain_and_option_rows() -> tuple[tuple[Weight, ...], list[Weight], tuple[Weight, ...]]:
    """The plain Llama's layer rows, every option row of every file, every linear-layer row."""
    plain = ARCHITECTURES["llama"].layer_weights
    options, linear = [], ()
    for arch in ARCHITECTURES.values():
        options += [w for w in arch.layer_weights if w.when is not None and w not in options]
        linear = linear or arch.linear_weights
    return plain, options + [w for w in OPTION_WEIGHTS if w not in options], linear


def layer_weights(config, layer: int = 0) -> list[Weight]:
    """The Weight rows of layer `layer` of a model of `config`: the plain Llama's, each replaced
    (same name of ours) or joined by the rows of the options the config sets; a
    "linear_attention" layer's mixer is the gated DeltaNet's (`qwen3_5.LINEAR_WEIGHTS`)."""
    plain, options, linear = _plain_and_option_rows()
    rows = {w.ours: w for w in plain}
    for w in options:
        if w.applies(config):
            rows[w.ours] = w
    if config.layer_type(layer) == "linear_attention":
        rows = {k: w for k, w in rows.items() if not k.startswith("self_attn.")}
        rows |= {w.ours: w for w in linear}
    return list(rows.values())


def model_weights(config) -> list[Weight]:
    """The Weight rows of the model's own weights (embedding, final norm, output head)."""
    return [w for w in ARCHITECTURES["llama"].model_weights if w.applies(config)]


def _all_weights(config):
    """(our full name, llama.cpp's full name or None, transformers' or None, the row)."""
    for w in model_weights(config):
        yield w.ours, w.gguf, w.hf, w
    for l in range(config.num_layers):
        for w in layer_weights(config, l):
            gguf = None if w.gguf is None else f"blk.{l}.{w.gguf}"
            hf = None if w.hf is None else f"model.layers.{l}.{w.hf}"
            yield f"layers.{l}.{w.ours}", gguf, hf, w


def gguf_names(config) -> dict[str, str]:
    """{GGUF tensor name: our parameter name}, llama.cpp's names on the left. A weight with no
    name in a GGUF file (an option no file stores) is refused by name."""
    names = {}
    for ours, gguf, _, w in _all_weights(config):
        if gguf is None:
            raise ValueError(f"{w.when or ours}: a GGUF file stores no {w.ours} (not read here)")
        names[gguf] = ours
    return names


def hf_names(config) -> dict[str, str]:
    """{our parameter name: transformers' name}, ours on the left; weights transformers keeps
    inside another (Qwen3.5's gate, in its q_proj) are left out."""
    return {ours: hf for ours, _, hf, _ in _all_weights(config) if hf is not None}


def splits(config) -> dict[str, str]:
    """{our parameter name: how tensor parallelism splits it (of `spec.SPLITS`)}."""
    return {ours: w.split for ours, _, _, w in _all_weights(config)}


def state_from_hf(config, state: dict, zero_centred: bool = False) -> dict:
    """Our state dict from transformers' (names by `hf_names`); zero_centred: the norms are
    stored as w and applied as 1 + w (the architecture's `hf_norms_zero_centred`), ours hold
    1 + w. A weight missing from `state` is refused by its name."""
    out = {}
    for ours, _, hf, w in _all_weights(config):
        if hf is None:
            continue
        if hf not in state:
            raise ValueError(f"{hf} is missing from the state dict (our {ours})")
        out[ours] = state[hf] + 1 if zero_centred and w.norm else state[hf]
    return out


def state_to_hf(config, state: dict, zero_centred: bool = False) -> dict:
    """transformers' state dict from ours: `state_from_hf` the other way."""
    return {
        hf: state[ours] - 1 if zero_centred and w.norm else state[ours]
        for ours, _, hf, w in _all_weights(config)
        if hf is not None
    }
