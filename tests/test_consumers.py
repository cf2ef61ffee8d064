"""Every consumer that runs or describes a model with its own code, on every architecture and
option: equal to the reference, or refused with an error that names an option the model sets;
never silently different.

The models: the small random models of tests/hf_models.small_configs (Llama, Qwen2, Qwen3,
Gemma 2, Gemma 3, and one config per remaining option: Llama 3's and Gemma 3's RoPE frequency
factors, sink logits, the output gate, partial RoPE) and the Llama with an output matrix of its
own, with float64 weights from `distributed.weights.RandomWeights`; and a small Qwen3.5 hybrid
(`HybridLM`, two gated-DeltaNet layers and one full-attention layer with QK-norm, partial RoPE
and the output gate); and a small DeepSeek-V3.2 (`DeepseekV32LM`, two sparse-MLA layers, every
one "indexed_attention").

The consumers and their references:
- tensor parallelism over 2 ranks (`tensor_parallel_rank`, all the models in one group of
  processes) against the model's own forward, to 1e-12;
- streaming's one-pass losses (`masked_losses`, positions "cache" and "original", a window of 4
  and 2 sinks on 12 tokens) against the rolling cache token by token (`rolling_losses`), to
  1e-9: equal on every model but the hybrid and DeepSeek-V3.2, whose gated-DeltaNet and
  sparse-MLA layers both refuse by name;
- the induction circuits (`llm.induction.qk_circuit`, `ov_circuit`, `composition_scores`) on
  every layer against the layer's own scores and outputs (`qkv`, W_O), to 1e-9;
- `architectures.differences`: a line for every option the config sets;
- the benchmarks: `python -m mha_lib.bench llm`, the one that runs a model of a config (the
  others time attention layers and kernels, no DecoderConfig), through its model code
  (`bench.llm.workloads`, no timing): its prefill against the model's forward, exactly, and its
  greedy decoding with the KV cache against decoding without it, token for token.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields, replace

import pytest
import torch

from mha_lib.bench.llm import workloads
from mha_lib.distributed import launch
from mha_lib.distributed.tensor_parallel import check_world_size, tensor_parallel_rank
from mha_lib.distributed.weights import RandomWeights
from mha_lib.linear_attention import HybridConfig, HybridLM
from mha_lib.llm.architectures import differences
from mha_lib.llm.induction import composition_scores, ov_circuit, qk_circuit
from mha_lib.llm.streaming import masked_losses, rolling_losses
from mha_lib.nn.decoder import DecoderConfig
from mha_lib.sparse_attention import DeepseekV32LM, SparseMLAConfig
from mha_lib.testing import assert_close
from mha_lib.toy.circuits import k_composition
from tests.hf_models import SMALL_CONFIGS, small_configs

NAMES = (*SMALL_CONFIGS, "untied", "qwen3_5", "deepseek_v32")
P = 2  # ranks
WINDOW, SINKS, TOKENS = 4, 2, 12  # streaming: 12 tokens past S + W = 6 and the sliding windows (5)

# each option: (how to tell the config sets it, a word of its line in `differences`)
OPTIONS = {
    "linear_attention": (lambda c: "linear_attention" in (c.layer_types or ()), "gated-DeltaNet"),
    "indexed_attention": (lambda c: "indexed_attention" in (c.layer_types or ()), "indexer"),
    "sliding_window": (lambda c: "sliding_attention" in (c.layer_types or ()), "sliding window"),
    "rope_freq_factors": (lambda c: c.rope_freq_factors is not None, "RoPE's frequencies"),
    "rope_local_base": (lambda c: c.rope_local_base not in (None, c.rope_base), "RoPE base"),
    "rope_dim": (lambda c: c.rope_dim not in (None, c.head_dim), "partial RoPE"),
    "num_kv_heads": (lambda c: c.num_kv_heads == 1, "one key/value head"),
    "head_dim": (lambda c: c.head_dim * c.num_heads != c.hidden_size, "heads of d"),
    "qk_norm": (lambda c: c.qk_norm, "QK-norm"),
    "attention_bias": (lambda c: c.attention_bias, "biases on q, k and v"),
    "query_scale": (
        lambda c: c.query_scale is not None and abs(c.query_scale * c.head_dim**0.5 - 1) > 1e-12,
        "scores scaled by",
    ),
    "attention_sinks": (lambda c: c.attention_sinks, "sink logit"),
    "attn_output_gate": (lambda c: c.attn_output_gate, "gated by sigmoid"),
    "sandwich_norms": (lambda c: c.sandwich_norms, "four norms"),
    "embedding_scale": (lambda c: c.embedding_scale is not None, "embedding multiplied"),
    "mlp_activation": (lambda c: c.mlp_activation != "silu", "gated MLP"),
    "attn_logit_softcap": (lambda c: c.attn_logit_softcap is not None, "scores soft-capped"),
    "final_logit_softcap": (lambda c: c.final_logit_softcap is not None, "logits soft-capped"),
    "tie_embeddings": (lambda c: not c.tie_embeddings, "output matrix of its own"),
}
# the fields of DecoderConfig that are no architecture option: sizes, ids and numbers every
# Llama has
SIZES = {"vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
         "rope_base", "rms_norm_eps", "context_length", "bos_token_id", "eos_token_id",
         "layer_types"}  # fmt: skip


def options_set(config: DecoderConfig) -> list[str]:
    return [name for name, (is_set, _) in OPTIONS.items() if is_set(config)]


def assert_refused_by_name(error: Exception, config: DecoderConfig) -> None:
    """The message names an option the config sets (as the config's field, or a layer type)."""
    message = str(error)
    named = [name for name in options_set(config) if re.search(rf"\b{name}\b", message)]
    assert named, f"refused without naming an option of {options_set(config)}: {message}"


@pytest.fixture(scope="module")
def models() -> dict:
    """name: (config, the model in float64, eval mode)."""
    out = {name: (w.config, w.model()) for name, w in weights_of().items()}
    hybrid = HybridConfig(
        vocab_size=96, hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=72, rope_base=1e4, rms_norm_eps=1e-6, context_length=64,
        qk_norm=True, rope_dim=4, attn_output_gate=True,
        layer_types=("linear_attention", "linear_attention", "full_attention"),
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, chunk_size=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = HybridLM(hybrid).double().eval().requires_grad_(False)
    out["qwen3_5"] = (hybrid, model)
    sparse = SparseMLAConfig(
        vocab_size=96, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=72, rope_base=1e4, rms_norm_eps=1e-6, context_length=64,
        kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
        index_n_heads=2, index_head_dim=8, index_topk=5,
    )  # fmt: skip
    torch.manual_seed(0)
    out["deepseek_v32"] = (sparse, DeepseekV32LM(sparse).double().eval().requires_grad_(False))
    return out


_weights: dict = {}


def weights_of() -> dict[str, RandomWeights]:
    if not _weights:
        configs = small_configs()
        configs["untied"] = replace(configs["llama"], tie_embeddings=False)
        _weights.update({
            name: RandomWeights(config, seed=3, dtype=torch.float64)
            for name, config in configs.items()
        })  # fmt: skip
    return _weights


def ids_of(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 96, (2, n), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------- the options


def test_every_option_of_the_config_is_in_the_table():
    """A new field of DecoderConfig fails here until the table above (and so this matrix) says
    how to tell it is set."""
    covered = set(OPTIONS) | SIZES
    missing = {f.name for f in fields(DecoderConfig)} - covered
    assert missing == set(), f"options this matrix does not know: {sorted(missing)}"


def test_the_models_set_every_option(models):
    seen = {name for config, _ in models.values() for name in options_set(config)}
    assert seen == set(OPTIONS)


# ---------------------------------------------------------------------------- tensor parallelism


@pytest.fixture(scope="module")
def sharded(models) -> dict:
    """name: the logits of rank 0 of one group of P processes, or the error check_world_size
    raised before any process started."""
    out, calls = {}, []
    ids = ids_of(9)
    for name, (config, _) in models.items():
        try:
            check_world_size(config, P)
        except ValueError as error:
            out[name] = error
            continue
        calls.append((name, (tensor_parallel_rank, (weights_of()[name], ids))))
    results = launch.run(launch.in_turn, P, [call for _, call in calls], timeout=120)
    for i, (name, _) in enumerate(calls):
        out[name] = results[0][i]["logits"]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_tensor_parallelism(models, sharded, name):
    config, model = models[name]
    if isinstance(sharded[name], Exception):
        assert_refused_by_name(sharded[name], config)
        return
    with torch.no_grad():
        expected = model(ids_of(9))
    assert_close(sharded[name], expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("positions", ["cache", "original"])
@pytest.mark.parametrize("name", NAMES)
def test_streaming(models, name, positions):
    """The one-pass losses equal the rolling cache's on every model the rolling cache decodes;
    only a layer with no keys to roll (gated-DeltaNet) is refused, by name, by both."""
    config, model = models[name]
    ids = ids_of(TOKENS)
    with torch.no_grad():
        try:
            reference = rolling_losses(model, ids, WINDOW, SINKS, positions)
        except ValueError as error:
            assert {"linear_attention", "indexed_attention"} & set(options_set(config)), error
            assert_refused_by_name(error, config)
            with pytest.raises(ValueError) as refused:
                masked_losses(model, ids, WINDOW, SINKS, positions)
            assert_refused_by_name(refused.value, config)
            return
        losses = masked_losses(model, ids, WINDOW, SINKS, positions)
    assert_close(losses, reference, rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------- the circuits


def _rows(config, n: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return 3 * torch.randn(1, n, config.hidden_size, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("name", NAMES)
def test_the_induction_circuits(models, name):
    """On every layer, head 0 and the last head: u_i W_QK(i - j) u_jᵀ / √d is the layer's score
    of query i on key j (u = x / rms(x), γ folded into the circuit), u_j W_OV what the head's
    value of j writes through W_O; or each is refused naming an option the model sets. K- and
    Q-composition run where both circuits do."""
    config, model = models[name]
    x = _rows(config)
    u = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps)  # (1, n, C)
    d, group = config.head_dim, config.num_heads // config.num_kv_heads
    ran = {"qk": [], "ov": []}
    for l in range(config.num_layers):
        block = model.layers[l]
        for h in (0, config.num_heads - 1):
            for kind, circuit in (("qk", qk_circuit), ("ov", ov_circuit)):
                args = (model, l, h, 0) if kind == "qk" else (model, l, h)
                try:
                    circuit(*args)
                except ValueError as error:
                    assert_refused_by_name(error, config)
                    continue
                ran[kind].append((l, h))
                with torch.no_grad():
                    q, k, v = block.self_attn.qkv(block.norm1(x), torch.arange(x.shape[1]))
                if kind == "qk":
                    for i, j in ((3, 3), (6, 2), (7, 5)):  # distances 0, 4 and 2: in every window
                        score = q[0, h, i] @ k[0, h // group, j] / math.sqrt(d)
                        W_QK = qk_circuit(model, l, h, i - j)
                        assert_close(u[0, i] @ W_QK @ u[0, j] / math.sqrt(d), score,
                                     rtol=0, atol=1e-9)  # fmt: skip
                else:
                    W_O = block.self_attn.out_proj.weight[:, h * d : (h + 1) * d]  # (C, d)
                    written = v[0, h // group, 5] @ W_O.T  # (C,)
                    assert_close(u[0, 5] @ ov_circuit(model, l, h), written, rtol=0, atol=1e-9)
    if ran["qk"] and ran["ov"]:
        later, earlier = ran["qk"][-1], ran["ov"][0]
        ours = composition_scores(model, [later], [earlier], "K", 2)
        expected = k_composition(qk_circuit(model, *later, 2), ov_circuit(model, *earlier))
        assert abs(float(ours[0, 0]) - expected) < 1e-9


# ---------------------------------------------------------------------------- differences


@pytest.mark.parametrize("name", NAMES)
def test_differences(models, name):
    config, _ = models[name]
    lines = differences(config)
    for option in options_set(config):
        word = OPTIONS[option][1]
        assert any(word in line for line in lines), f"{option}: no line says {word!r}: {lines}"
    assert len(lines) == len(options_set(config))


# ---------------------------------------------------------------------------- the benchmarks


@pytest.mark.parametrize("name", NAMES)
def test_the_llm_benchmark(models, name):
    """`python -m mha_lib.bench llm`'s model code on every model: 4 prompt tokens and 6 new
    ones, past every sliding window (5), so the sliding layers' rolling caches evict."""
    _, model = models[name]
    long, short = ids_of(10)[:1], ids_of(4, seed=2)[:1]  # (1, 10), (1, 4)
    fns = workloads(model, long, short, new_tokens=6)
    with torch.no_grad():
        assert torch.equal(fns["prefill ours"](), model(long))
        cached = fns["decode ours"]()  # (1, 4 + 6)
        uncached = fns["decode ours without the cache"]()
    assert cached.shape == uncached.shape == (1, 10)
    assert torch.equal(cached, uncached)
