"""The architectures `load_gguf` reads, and what a GGUF file says (or leaves unsaid) about each.

Derived in notebook 15. A GGUF file names its architecture (`general.architecture`) and stores
its numbers under that name (`gemma3.block_count`, ...). Four are read here, each into the
series' one decoder (`mha_lib.nn.decoder.DecoderConfig`, by its options, never another loop):

- "llama" (Llama 2 and 3.x, SmolLM2): notebook 12's decoder. llama.cpp's
  converter stores each head's rows of W_Q and W_K permuted to adjacent RoPE pairs, and Llama
  3.1's and 3.2's frequency scaling as a tensor, `rope_freqs.weight`: (d/2,) factors that
  divide RoPE's frequencies (`DecoderConfig.rope_freq_factors`);
- "qwen2" (Qwen2, Qwen2.5): biases on q, k and v (`attention_bias`);
- "qwen3" (Qwen3): QK-norm, and a head size that need not be C / h (`attention.key_length`);
- "gemma3" (Gemma 3's text models): QK-norm; sliding-window layers (window
  `attention.sliding_window`) and global ones; the global layers' RoPE base
  (`rope.freq_base`); four norms per block, each stored as 1 + w (the file holds the weight an
  RMSNorm multiplies by: nothing to fold at load); the embedding times √C; a GELU-gated MLP.
  Three numbers are not in the file, and are set as llama.cpp sets them: five sliding layers
  to each global one (the pattern 6), the sliding layers' RoPE base 10,000, and the scores'
  scale, 1/√d, except for the 27B (62 layers), whose scores are scaled by 1/√(C/h) = 1/√168
  (transformers' `query_pre_attn_scalar`: 256 = d for 270M to 12B, 168 for 27B). Gemma 3 4B
  to 27B stretch their global layers' RoPE (`rope.scaling.type` "linear", factor 8): read as
  frequency factors, the sliding layers left as they are.
Any architecture: a linear RoPE scaling (`rope.scaling.type` "linear" and
`rope.scaling.factor`, as llama.cpp reads them) divides the global layers' frequencies by its
factor; any other kind ("yarn", "longrope", as some Qwen2.5 and Qwen3 files hold) is refused
by name.
Qwen2, Qwen3 and Gemma 3 store W_Q and W_K in transformers' half-split RoPE layout: nothing to
permute. Any other architecture is refused by name before a weight is read.

What it holds: `ARCHITECTURES` (name -> `Architecture`), `config_from_gguf(f)` (an open
`GGUFFile` -> `DecoderConfig`) and `differences(config)`: how a configuration differs from
notebook 12's Llama, one line each. Imports the building blocks only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..nn.decoder import DecoderConfig

__all__ = ["ARCHITECTURES", "Architecture", "config_from_gguf", "differences"]


@dataclass(frozen=True)
class Architecture:
    """What the loader must know of an architecture beyond its file's numbers."""

    models: str  # the released models of this architecture, for messages
    rope_rows_permuted: bool  # W_Q, W_K rows in adjacent RoPE pairs (llama.cpp's llama only)
    defaults: dict  # numbers the file does not store, and where they come from


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("Llama 2 and 3.x, SmolLM2", True, {}),
    "qwen2": Architecture("Qwen2, Qwen2.5", False, {}),
    "qwen3": Architecture("Qwen3", False, {}),
    "gemma3": Architecture(
        "Gemma 3",
        False,
        {  # transformers' Gemma3TextConfig defaults, not stored in the file
            "sliding_window_pattern": 6,  # layer l is global when (l + 1) % 6 == 0
            "rope_local_base": 10_000.0,
            "layers_of_27b": 62,  # its scores are scaled by 1/√(C/h), the others' by 1/√d
        },
    ),
}


def _architecture(f) -> tuple[str, Architecture]:
    arch = f.value("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"{f.path.name} holds a {arch!r} model; load_gguf reads "
            + ", ".join(f"{name!r} ({a.models})" for name, a in ARCHITECTURES.items())
        )
    return arch, ARCHITECTURES[arch]


def config_from_gguf(f) -> DecoderConfig:
    """The DecoderConfig of an open GGUF file (`mha_lib.llm.GGUFFile`) of a known architecture,
    every number from its metadata but the defaults `ARCHITECTURES` names. An unknown
    architecture is refused by name (a ValueError), before anything else is read."""
    arch, spec = _architecture(f)
    keys = set(f.keys())

    def get(key, default=None):
        full = f"{arch}.{key}"
        return f.value(full) if full in keys else default

    def need(key):
        full = f"{arch}.{key}"
        if full not in keys:
            raise ValueError(f"{f.path.name} lacks the metadata key {full!r}")
        return f.value(full)

    C, h = int(need("embedding_length")), int(need("attention.head_count"))
    d = int(get("attention.key_length", C // h))
    rope_dim = int(get("rope.dimension_count", d))
    if rope_dim != d:
        raise ValueError(
            f"{arch}.rope.dimension_count = {rope_dim}; expected the head dimension {d} "
            "(partial rotary embeddings are not read from a file here)"
        )
    vocab = get("vocab_size")
    if vocab is None:
        if "tokenizer.ggml.tokens" not in keys:
            raise ValueError(
                f"{f.path.name} stores no vocabulary (neither tokenizer.ggml.tokens nor "
                f"{arch}.vocab_size)"
            )
        vocab = len(f.value("tokenizer.ggml.tokens"))
    L = int(need("block_count"))
    tensors = f.tensors
    options = {}
    if arch == "gemma3":
        pattern = spec.defaults["sliding_window_pattern"]
        C_scale = float(C) ** 0.5
        options = dict(
            layer_types=tuple(
                "full_attention" if (l + 1) % pattern == 0 else "sliding_attention"
                for l in range(L)
            ),
            sliding_window=int(need("attention.sliding_window")),
            rope_local_base=spec.defaults["rope_local_base"],
            query_scale=(C // h if L == spec.defaults["layers_of_27b"] else d) ** -0.5,
            sandwich_norms=True,
            embedding_scale=C_scale,
            mlp_activation="gelu_tanh",
            attn_logit_softcap=get("attn_logit_softcapping"),
            final_logit_softcap=get("final_logit_softcapping"),
        )
    return DecoderConfig(
        rope_freq_factors=_rope_freq_factors(f, arch, get, rope_dim),
        vocab_size=int(vocab),
        hidden_size=C,
        num_layers=L,
        num_heads=h,
        num_kv_heads=int(get("attention.head_count_kv", h)),
        head_dim=d,
        intermediate_size=int(need("feed_forward_length")),
        rope_base=float(get("rope.freq_base", 10_000.0)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        context_length=int(need("context_length")),
        tie_embeddings="output.weight" not in tensors,
        bos_token_id=_optional_int(f, "tokenizer.ggml.bos_token_id", keys),
        eos_token_id=_optional_int(f, "tokenizer.ggml.eos_token_id", keys),
        qk_norm="blk.0.attn_q_norm.weight" in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
        **options,
    )


def _rope_freq_factors(f, arch: str, get, rope_dim: int) -> tuple[float, ...] | None:
    """The (rope_dim/2,) factors that divide the global layers' RoPE frequencies, as llama.cpp
    reads a file: Llama 3's `rope_freqs.weight`, times a linear scaling's factor; None when the
    file asks for neither. Another kind of scaling is refused by name."""
    factors, scaled = [1.0] * (rope_dim // 2), False
    if "rope_freqs.weight" in f.tensors:
        freqs = f.read("rope_freqs.weight").flatten()
        if freqs.numel() != rope_dim // 2:
            raise ValueError(
                f"rope_freqs.weight has {freqs.numel()} factors; expected one per RoPE pair, "
                f"rope_dim / 2 = {rope_dim // 2}"
            )
        factors, scaled = [float(x) for x in freqs], True
    factor = get("rope.scaling.factor", get("rope.scale_linear"))
    kind = get("rope.scaling.type", "linear" if factor else "none")  # llama.cpp's default
    if kind not in ("none", "linear"):
        raise ValueError(
            f"{arch}.rope.scaling.type = {kind!r}: {f.path.name} stretches RoPE in a way not read "
            "here (linear scaling and Llama 3's rope_freqs are)"
        )
    if kind == "linear" and factor and float(factor) != 1.0:
        factors, scaled = [x * float(factor) for x in factors], True
    return tuple(factors) if scaled else None


def _optional_int(f, key: str, keys) -> int | None:
    return int(f.value(key)) if key in keys else None


def differences(config: DecoderConfig) -> list[str]:
    """How `config` differs from notebook 12's Llama (SmolLM2-135M: every layer softmax
    attention over every earlier key, GQA, one RoPE base over all of d, two norms per block,
    SwiGLU, no biases, scores scaled by 1/√d, no sinks, no gate), one line per option it sets
    (a `HybridConfig`'s linear-attention layers too); [] for a Llama."""
    c = config
    out = []
    if c.layer_types is not None and "linear_attention" in c.layer_types:
        linear = c.layer_types.count("linear_attention")
        out.append(
            f"{linear} of {c.num_layers} layers mix tokens through a gated-DeltaNet state "
            "(linear attention), the others through softmax attention"
        )
    if c.layer_types is not None and "sliding_attention" in c.layer_types:
        sliding = c.layer_types.count("sliding_attention")
        out.append(
            f"{sliding} of {c.num_layers} layers attend within a sliding window of "
            f"{c.sliding_window} keys, the others to every earlier key"
        )
    if c.rope_freq_factors is not None:
        lo, hi = min(c.rope_freq_factors), max(c.rope_freq_factors)
        what = f"by {lo:g}" if lo == hi else f"by factors from {lo:g} to {hi:g}"
        out.append(f"RoPE's frequencies divided {what} in the global layers (a longer context)")
    if c.rope_local_base is not None and c.rope_local_base != c.rope_base:
        out.append(f"RoPE base {c.rope_local_base:,.0f} in the sliding layers, "
                   f"{c.rope_base:,.0f} in the global ones")  # fmt: skip
    if c.rope_dim not in (None, c.head_dim):
        out.append(
            f"partial RoPE: only the first {c.rope_dim} of each head's {c.head_dim} numbers turn"
        )
    if c.num_kv_heads == 1:
        out.append(f"one key/value head for {c.num_heads} query heads (multi-query attention)")
    if c.head_dim * c.num_heads != c.hidden_size:
        out.append(f"heads of d = {c.head_dim}, not C / h = {c.hidden_size // c.num_heads}")
    if c.qk_norm:
        out.append("QK-norm: an RMSNorm over each head's queries and keys before RoPE")
    if c.attention_bias:
        out.append("biases on q, k and v")
    if c.query_scale is not None and abs(c.query_scale * c.head_dim**0.5 - 1) > 1e-12:
        out.append(f"scores scaled by {c.query_scale:.4g}, not 1/√d = {c.head_dim**-0.5:.4g}")
    if c.attention_sinks:
        out.append("a learned sink logit per head in every softmax (attention may go nowhere)")
    if c.attn_output_gate:
        out.append("each head's output gated by sigmoid(x W_G) before W_O")
    if c.sandwich_norms:
        out.append("four norms per block: each sublayer's output is normalised too")
    if c.embedding_scale is not None:
        out.append(f"the embedding multiplied by {c.embedding_scale:.4g} (√C)")
    if c.mlp_activation != "silu":
        out.append(f"a gated MLP with {c.mlp_activation}, not SwiGLU's silu")
    if c.attn_logit_softcap is not None:
        out.append(f"attention scores soft-capped at {c.attn_logit_softcap:g}")
    if c.final_logit_softcap is not None:
        out.append(f"final logits soft-capped at {c.final_logit_softcap:g}")
    if not c.tie_embeddings:
        out.append("an output matrix of its own (the embedding is not tied)")
    return out
