"""transformers' outputs on a tiny random Qwen3.5, stored, so that notebook 16 checks its model
against them without importing transformers (a test dependency the notebooks never import).

Derived in notebook 16 (section 7). `tiny_model()` is `HybridLM` with `TINY`'s sizes (Qwen3.5's
3:1 layout and partial RoPE, every size small) and every weight random from a seeded generator;
`make_reference()` loads the same weights into transformers' `Qwen3_5ForCausalLM`
(`HybridLM.hf_state_dict`) and records its logits on `tiny_prompt()` and its greedy tokens;
`python -m mha_lib.linear_attention.reference` writes them to `REFERENCE_FILE`
(`mha_lib/data/nb16_qwen3_5_reference.json`), which the notebook reads with `load_reference`.
tests/linear_attention/test_reference.py makes them again with transformers and compares.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from ..nn.generation import generate
from ..runtime import provenance
from .hybrid import HybridConfig, HybridLM

__all__ = [
    "REFERENCE_FILE",
    "TINY",
    "greedy_tokens",
    "load_reference",
    "make_reference",
    "tiny_model",
    "tiny_prompt",
]

REFERENCE_FILE = Path(str(resources.files("mha_lib") / "data" / "nb16_qwen3_5_reference.json"))

# A tiny random Qwen3.5 for notebook 16, in transformers' config fields: Qwen3.5's 3:1 layout
# and its partial rotary factor, every size small and no two alike (V = 61, C = 32, F = 40,
# h = 4, h_kv = 2, d = 8, h_k = 2, h_v = 4, d_k = 8, d_v = 6)
TINY = {
    "model_type": "qwen3_5_text",
    "vocab_size": 61,
    "hidden_size": 32,
    "intermediate_size": 40,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 6,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 96,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10_000.0,
        "partial_rotary_factor": 0.25,
    },
}
PROMPT_SEED, NEW_TOKENS = 1, 12


def tiny_model(seed: int = 0) -> HybridLM:
    """`TINY` with every weight drawn at random (norms too, so that nothing hides behind 1s):
    float32, 0.3·N(0, 1), A_log and dt_bias N(0, 1), from a seeded CPU generator."""
    model = HybridLM(HybridConfig.from_hf(TINY))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1.0 if name.endswith(("A_log", "dt_bias")) else 0.3
            p.copy_(scale * torch.randn(p.shape, generator=gen))
    return model.eval()


def tiny_prompt() -> Tensor:
    """The reference's prompt: 10 token ids (1, 10)."""
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    return torch.randint(0, TINY["vocab_size"], (1, 10), generator=gen)


def make_reference() -> dict:
    """transformers' `Qwen3_5ForCausalLM` with `tiny_model()`'s weights (`hf_state_dict`): its
    logits on `tiny_prompt()` and its greedy tokens (`generate`, its own cache), with the
    smallest gap between the two largest logits of a greedy step. Needs transformers."""
    import transformers
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    fields = {k: v for k, v in TINY.items() if k != "model_type"}
    hf = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**fields)).eval()
    hf.load_state_dict(tiny_model().hf_state_dict())
    ids = tiny_prompt()
    with torch.no_grad():
        logits = hf(ids, use_cache=False).logits[0]  # (10, V)
        out = hf.generate(
            ids,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    top2 = torch.stack(out.logits)[:, 0].topk(2, dim=-1).values  # (T, 2)
    return {
        **provenance("python -m mha_lib.linear_attention.reference"),
        "transformers": transformers.__version__,
        "config": TINY,
        "prompt": ids[0].tolist(),
        "logits": [[float(f"{x:.7g}") for x in row] for row in logits.tolist()],
        "greedy": out.sequences[0, ids.shape[1] :].tolist(),
        "smallest greedy margin": round(float((top2[:, 0] - top2[:, 1]).min()), 4),
    }


def load_reference(path: Path | str = REFERENCE_FILE) -> dict:
    """transformers' outputs on the tiny model, stored by `make_reference` (notebook 16 reads
    them: it never imports transformers)."""
    return json.loads(Path(path).read_text())


def greedy_tokens(model: HybridLM, new_tokens: int = NEW_TOKENS) -> list[int]:
    """Our greedy tokens after `tiny_prompt()`, through the cache's states (`generate`)."""
    ids = tiny_prompt()
    return generate(model, ids, new_tokens, stop_ids=())[0, ids.shape[1] :].tolist()


def main(argv=None) -> int:
    out = Path(argv[0]) if argv else REFERENCE_FILE
    out.write_text(json.dumps(make_reference(), indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
