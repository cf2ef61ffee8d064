"""`python -m mha_lib.bench llm`: the series' decoder against transformers on a real model.

`--model smollm2` (the default): notebook 12's SmolLM2-135M-Instruct against transformers'
LlamaForCausalLM; `--model gemma3`: notebook 15's Gemma 3 270M (`load_gemma3`, the tied
embedding kept as Q8_0 blocks) against transformers' Gemma3ForCausalLM. Both run in float32 on
the CPU, read from the same GGUF file (transformers: `from_pretrained(dir, gguf_file=name)`, its
default SDPA attention). Measured in one run:
1. loading: ours (every tensor dequantized, and the tokenizer; Gemma's file joined from its
   part packages beforehand, not timed) and transformers' (the model, then the tokenizer), each
   timed once, ours first, in this process;
2. prefill: the logits of all N = 512 tokens of a random prompt, one forward pass each;
3. cached decoding: a short prompt of natural text, then 128 new tokens, greedy, with the KV
   cache (ours `generate`, transformers `generate(do_sample=False)`), as tokens per second, and
   how many of the new tokens agree before the first difference (a near-tie of two logits can
   flip one greedy choice, and the texts part there);
4. ours without the cache (every step runs the whole sequence), tokens per second over the first
   NO_CACHE_TOKENS new tokens (at this model's speed, 128 would take minutes), timed once.
2-4 are timed in interleaved rounds (medians) and reported as ratios: "ours / transformers" of
the speeds (above 1: ours is faster). --no-reference times ours alone (no transformers).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import torch

from .timing import interleaved_medians

DECODE_PROMPT = "The history of the printing press begins in Mainz, where"
NO_CACHE_TOKENS = 16


def _load_reference(path):
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()
        t1 = time.perf_counter()
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        t2 = time.perf_counter()
    return model, t1 - t0, t2 - t1


MODELS = {"smollm2": "SmolLM2-135M-Instruct", "gemma3": "Gemma 3 270M"}


def _load_ours(name: str, path):
    from ..llm import load_gguf, load_smollm2

    if name == "smollm2":
        return load_smollm2(path, expected_sha256=None)
    return load_gguf(path)  # Gemma: the Q8_0 embedding kept quantized, as load_gemma3


def workloads(model, long: torch.Tensor, short: torch.Tensor, new_tokens: int) -> dict:
    """What the benchmark runs on our model, each a callable of no argument: "prefill ours",
    the logits of the long prompt (1, N) in one forward pass; "decode ours", `generate`, greedy,
    new_tokens after the short prompt (1, n) with the KV cache; "decode ours without the cache",
    its first min(new_tokens, NO_CACHE_TOKENS) tokens with every step running the whole
    sequence. The model's own forward and `generate`: no code of the benchmark's between them
    and the model, so every option of its config is the model's to honour."""
    from ..nn import generate

    uncached_tokens = min(new_tokens, NO_CACHE_TOKENS)
    return {
        "prefill ours": lambda: model(long),
        "decode ours": lambda: generate(model, short, new_tokens, stop_ids=()),
        "decode ours without the cache": lambda: generate(
            model, short, uncached_tokens, stop_ids=(), use_cache=False
        ),
    }


def run(
    prompt_len: int,
    new_tokens: int,
    repeats: int,
    reference: bool,
    path=None,
    model_name: str = "smollm2",
) -> dict:
    from ..llm import find_model_file

    path = find_model_file(model_name) if path is None else path  # assembly: not timed
    t0 = time.perf_counter()
    model, tok = _load_ours(model_name, path)
    result = {"model": model_name, "load_ours_s": round(time.perf_counter() - t0, 2)}
    ref = None
    if reference:
        ref, t_model, t_tok = _load_reference(path)
        result["load_transformers_model_s"] = round(t_model, 2)
        result["load_transformers_tokenizer_s"] = round(t_tok, 2)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    long = torch.randint(0, V, (1, prompt_len), generator=g)  # (1, N)
    short = torch.tensor([tok.encode(DECODE_PROMPT)])  # (1, n): natural text, BOS if the file asks
    ours = workloads(model, long, short, new_tokens)
    decode_ours, no_cache_ours = ours["decode ours"], ours["decode ours without the cache"]
    fns = {"prefill ours": ours["prefill ours"], "decode ours": decode_ours}
    if ref is not None:
        fns["prefill transformers"] = lambda: ref(long).logits
        fns["decode transformers"] = lambda: ref.generate(
            short,
            attention_mask=torch.ones_like(short),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        with torch.inference_mode():
            a, b = decode_ours()[0], fns["decode transformers"]()[0]
        differ = (a != b).nonzero()
        result["same_greedy_tokens"] = (int(differ[0]) if len(differ) else len(a)) - len(short[0])
    with torch.inference_mode():
        med = interleaved_medians(fns, repeats)
        uncached_tokens = min(new_tokens, NO_CACHE_TOKENS)
        t0 = time.perf_counter()
        no_cache_ours()
        no_cache = time.perf_counter() - t0
    result["prefill_ours_s"] = round(med["prefill ours"], 4)
    result["decode_ours_tok_s"] = round(new_tokens / med["decode ours"], 2)
    result["decode_ours_no_cache_tok_s"] = round(uncached_tokens / no_cache, 2)
    if ref is not None:
        result["prefill_transformers_s"] = round(med["prefill transformers"], 4)
        result["decode_transformers_tok_s"] = round(new_tokens / med["decode transformers"], 2)
        result["prefill_speed_ratio"] = round(med["prefill transformers"] / med["prefill ours"], 3)
        result["decode_speed_ratio"] = round(med["decode transformers"] / med["decode ours"], 3)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench llm", description=__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2", help="which model")
    parser.add_argument("--prompt-len", type=int, default=512, help="prefill length N")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens decoded")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-reference", action="store_true", help="time ours alone")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    r = run(
        args.prompt_len, args.new_tokens, args.repeats, not args.no_reference, model_name=args.model
    )
    print(
        f"torch {torch.__version__} on the CPU ({torch.get_num_threads()} threads), float32, "
        f"{MODELS[args.model]}; medians of {args.repeats} interleaved rounds"
    )
    print(f"load (dequantize every tensor, tokenizer): ours {r['load_ours_s']:.1f} s", end="")
    if "load_transformers_model_s" in r:
        print(
            f", transformers {r['load_transformers_model_s']:.1f} s (model) + "
            f"{r['load_transformers_tokenizer_s']:.1f} s (tokenizer)"
        )
    else:
        print()
    print(f"prefill, {args.prompt_len} tokens: ours {r['prefill_ours_s'] * 1e3:.0f} ms", end="")
    if "prefill_speed_ratio" in r:
        print(
            f", transformers {r['prefill_transformers_s'] * 1e3:.0f} ms: "
            f"ours at {r['prefill_speed_ratio']:.2f}x transformers' speed"
        )
    else:
        print()
    print(
        f"decoding {args.new_tokens} tokens: ours {r['decode_ours_tok_s']:.1f} tokens/s with "
        f"the KV cache, {r['decode_ours_no_cache_tok_s']:.1f} tokens/s without (the first "
        f"{min(args.new_tokens, NO_CACHE_TOKENS)})",
        end="",
    )
    if "decode_speed_ratio" in r:
        print(
            f"; transformers {r['decode_transformers_tok_s']:.1f} tokens/s with its cache: "
            f"ours at {r['decode_speed_ratio']:.2f}x transformers' speed "
            f"(the first {r['same_greedy_tokens']} of {args.new_tokens} greedy tokens equal)"
        )
    else:
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"torch": torch.__version__, "threads": torch.get_num_threads(), **r}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
