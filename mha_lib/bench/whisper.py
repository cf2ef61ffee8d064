"""`python -m mha_lib.bench whisper`: notebook 17's Whisper base against transformers' on the
same weights.

Ours is `mha_lib.speech` (our reader of the CTranslate2 file that the two part packages hold,
`WhisperModel`, `transcribe`); transformers' is `WhisperForConditionalGeneration` holding the
same tensors with the generation config that decodes as ours does
(`mha_lib.speech.reference.hf_whisper`), in its default SDPA attention. Both in float32 on the
CPU. The utterance is the longest stored one, "seconds" (espeak-ng saying "Thirty seconds of
sound become fifteen hundred frames.", 4.6 s, `mha_lib.speech.utterances`), which both pad to
Whisper's 30 s. Measured in one run:
1. loading, timed once: ours, `load_whisper()` (read model.bin, widen its float16 weights to
   float32, build the model and the tokenizer; joining the file from its part packages is done
   beforehand, not timed). transformers cannot read CTranslate2's file, so it has no load to
   compare: the time shown beside ours is `hf_whisper`, building its model on the meta device
   and assigning our tensors to it (nothing read, nothing converted), and no ratio is given;
2. encode: the utterance's (1, 80, 3000) spectrogram through the encoder, ours
   `model.encode(mel)` against `hf.model.encoder(mel)`;
3. greedy transcription from that spectrogram, without token times: ours `model.encode` then
   `greedy_tokens(..., cross_attentions=False)`; transformers `generate(mel, language="en",
   task="transcribe")`;
4. transcription with token times, from the audio: ours `transcribe(model, tokenizer, audio)`
   (spectrogram, encoder, greedy decoding keeping the cross-attention, DTW over the alignment
   heads, words); transformers' `WhisperFeatureExtractor` then `generate(...,
   return_token_timestamps=True)` with the audio's attention mask, as tests/speech do. Asked
   for token timestamps, transformers' generate switches its model to eager attention, for
   good and for the whole model, encoder included, so measure 4 runs on a second
   transformers model around the same tensors, and 2 and 3 keep SDPA.
2-4 are timed in interleaved rounds (medians) and reported as ratios "ours / transformers" of
the speeds (above 1: ours is faster); the goal is at least 1.0x on 3 and 4. Before timing, the
benchmark checks that 3 and 4 give the same tokens for both, and 4 the same token times (to
1e-6 s); if not, it prints where they part and exits with status 1.
`--tiny`: a random Whisper of tiny odd sizes (C = 12, h = 3, 2 encoder and 3 decoder layers,
97 tokens with a word-level tokenizer of Whisper's special tokens written here, the real 30 s
input) on the same utterance: the whole benchmark in seconds, no part package needed (the
test's mode; its times say nothing about Whisper base).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from .cli import add_common_arguments, tables_or_threads, write_numbers
from .timing import interleaved_medians

UTTERANCE = "seconds"
TIME_TOLERANCE = 1e-6  # seconds: token times are multiples of 0.02 s, computed alike
LABELS = {
    "encode": "encode, (1, 80, 3000) spectrogram",
    "greedy": "greedy transcription, no token times",
    "timed": "transcription with token times, from audio",
}


def tiny_whisper(folder: Path):
    """(a random WhisperModel of tiny odd sizes, its WhisperTokenizer written into folder)."""
    from tokenizers import Tokenizer, models

    from ..speech.model import WhisperConfig, WhisperModel
    from ..speech.tokenizer import WhisperTokenizer

    # Whisper's order: the text tokens, then the special ones, <|notimestamps|> last (every id
    # after it is a timestamp to transformers' generate)
    special = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>"]
    special += ["<|translate|>", "<|notimestamps|>"]
    V = 97
    words = V - len(special)
    vocab = {(" " if i % 3 == 0 else "") + f"w{i}": i for i in range(words)}
    vocab |= {name: words + i for i, name in enumerate(special)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.add_special_tokens(special)
    tok.save(str(folder / "tokenizer.json"))
    config = WhisperConfig(
        vocab_size=V,
        hidden_size=12,
        encoder_layers=2,
        encoder_heads=3,
        encoder_ffn_dim=20,
        decoder_layers=3,
        decoder_heads=3,
        decoder_ffn_dim=20,
        max_target_positions=16,
        alignment_heads=((1, 0), (2, 2), (2, 1)),
        suppress_tokens=(7, 11),
        begin_suppress_tokens=(words, 13),
    )
    torch.manual_seed(0)
    model = WhisperModel(config).eval()
    with torch.no_grad():  # from the 10th position on, a direction u that the end token reads
        u = torch.nn.functional.normalize(torch.randn(config.hidden_size), dim=0)
        model.decoder.positions.normal_(0, 0.1)
        model.decoder.positions[9:] += 8 * u
        model.decoder.embed.weight[words] = 4 * u  # <|endoftext|>
    return model, WhisperTokenizer(folder / "tokenizer.json")


def _reference(model, tokenizer):
    import transformers

    from ..speech.reference import hf_whisper

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return hf_whisper(model, tokenizer, attn_implementation="sdpa")


def workloads(model, tokenizer, hf, gen, hf_timed_model, audio) -> dict:
    """Each measure's two callables of no argument, "<measure> ours" and "<measure>
    transformers" (module docstring). hf_timed_model: transformers' model for measure 4, a
    second one around the same tensors (its generate switches it to eager attention for good
    when token timestamps are asked, which would slow measures 2 and 3)."""
    from transformers import WhisperFeatureExtractor

    from ..speech.audio import log_mel
    from ..speech.transcribe import greedy_tokens, transcribe

    mel = log_mel(audio, model.config.num_mel_bins)[None]  # (1, 80, 3000)
    prefix, eot = tokenizer.prefix("en"), tokenizer.eot
    features = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)

    def hf_timed():
        inputs = features(
            audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True
        )
        return hf_timed_model.generate(
            inputs.input_features,
            attention_mask=inputs.attention_mask,
            generation_config=gen,
            language="en",
            task="transcribe",
            return_token_timestamps=True,
        )

    return {
        "encode ours": lambda: model.encode(mel),
        "encode transformers": lambda: hf.model.encoder(mel).last_hidden_state,
        "greedy ours": lambda: greedy_tokens(
            model, prefix, model.encode(mel), eot, cross_attentions=False
        )[0],
        "greedy transformers": lambda: hf.generate(
            mel, generation_config=gen, language="en", task="transcribe"
        ),
        "timed ours": lambda: transcribe(model, tokenizer, audio),
        "timed transformers": hf_timed,
    }


def check_equal(fns: dict, eot: int) -> dict:
    """Run each measure 3 and 4 once on both sides: the same tokens, the same token times.
    Returns what was compared; raises SystemExit(1) with a message where they differ."""
    greedy_ours = fns["greedy ours"]()
    greedy_ours = greedy_ours[:-1] if greedy_ours and greedy_ours[-1] == eot else greedy_ours
    greedy_ref = fns["greedy transformers"]()[0].tolist()
    timed_ours, timed_ref = fns["timed ours"](), fns["timed transformers"]()
    failures = []
    for name, a, b in (
        ("greedy", greedy_ours, greedy_ref),
        ("timed", timed_ours.tokens, timed_ref["sequences"][0].tolist()),
    ):
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            failures.append(
                f"{LABELS[name]}: the tokens part at {at}: ours {a[at : at + 8]}..., theirs "
                f"{b[at : at + 8]}... ({len(a)} and {len(b)} tokens)"
            )
    times_difference = None
    if timed_ours.token_times and not failures:
        ref_times = timed_ref["token_timestamps"][0].tolist()[: len(timed_ours.token_times)]
        times_difference = max(abs(a - b) for a, b in zip(timed_ours.token_times, ref_times))
        if times_difference > TIME_TOLERANCE:
            failures.append(
                f"token times differ by up to {times_difference:.2g} s: ours "
                f"{timed_ours.token_times}, theirs {ref_times}"
            )
    if failures:
        print("NOT EQUAL to transformers:\n  " + "\n  ".join(failures))
        raise SystemExit(1)
    return {
        "tokens": len(timed_ours.tokens),
        "text": timed_ours.text,
        "token_times_max_difference_s": times_difference,
    }


def run(repeats: int, tiny: bool = False) -> dict:
    from ..speech.utterances import utterance

    audio, _ = utterance(UTTERANCE)
    with tempfile.TemporaryDirectory() as folder:
        if tiny:
            t0 = time.perf_counter()
            model, tokenizer = tiny_whisper(Path(folder))
        else:
            from ..llm import find_model_file
            from ..speech.transcribe import load_whisper

            find_model_file("whisper")  # joining the part packages: not timed
            t0 = time.perf_counter()
            model, tokenizer = load_whisper()
        result = {
            "model": "tiny random Whisper" if tiny else "Whisper base",
            "utterance": UTTERANCE,
            "audio_s": round(len(audio) / 16000, 2),
            "load_ours_s": round(time.perf_counter() - t0, 2),
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers  # noqa: F401  (its import is not part of building the model)

            t0 = time.perf_counter()
            hf, gen = _reference(model, tokenizer)
            result["build_transformers_s"] = round(time.perf_counter() - t0, 2)
            hf_timed_model, _ = _reference(model, tokenizer)
            fns = workloads(model, tokenizer, hf, gen, hf_timed_model, audio)
            with torch.inference_mode():
                result |= check_equal(fns, tokenizer.eot)
                med = interleaved_medians(fns, repeats)
    for name in LABELS:
        ours, theirs = med[f"{name} ours"], med[f"{name} transformers"]
        result[f"{name}_ours_s"] = round(ours, 4)
        result[f"{name}_transformers_s"] = round(theirs, 4)
        result[f"{name}_speed_ratio"] = round(theirs / ours, 3)
    return result


def markdown(numbers: dict) -> list[str]:
    """docs/benchmarks.md's table from a --json file."""
    lines = [
        "| | ours | transformers | ours / transformers (speed) |",
        "|---|---|---|---|",
        f"| load | {numbers['load_ours_s']:.1f} s (`load_whisper`: read, widen to float32) | "
        f"{numbers['build_transformers_s']:.1f} s (`hf_whisper`: build on the meta device, "
        "assign our tensors; no file read) | |",
    ]
    for name, label in LABELS.items():
        lines.append(
            f"| {label} | {numbers[f'{name}_ours_s'] * 1e3:.0f} ms | "
            f"{numbers[f'{name}_transformers_s'] * 1e3:.0f} ms | "
            f"{numbers[f'{name}_speed_ratio']:.2f}× |"
        )
    return lines


def report(r: dict, repeats: int) -> None:
    print(
        f"torch {torch.__version__} on the CPU ({torch.get_num_threads()} threads), float32, "
        f"{r['model']}, the {r['audio_s']} s utterance {r['utterance']!r}; medians of {repeats} "
        "interleaved rounds"
    )
    what = "a random model built" if "tiny" in r["model"] else "read model.bin, widen to float32"
    print(
        f"load: ours {r['load_ours_s']:.1f} s ({what}, tokenizer); transformers reads no "
        f"CTranslate2 file: building its model around our tensors took "
        f"{r['build_transformers_s']:.1f} s (no ratio)"
    )
    for name, label in LABELS.items():
        ratio = r[f"{name}_speed_ratio"]
        goal = (
            ""
            if name == "encode"
            else f" (goal: at least 1.0x, {'met' if ratio >= 1 else 'NOT met'})"
        )
        print(
            f"{label}: ours {r[f'{name}_ours_s'] * 1e3:.0f} ms, transformers "
            f"{r[f'{name}_transformers_s'] * 1e3:.0f} ms: ours at {ratio:.2f}x transformers' "
            f"speed{goal}"
        )
    times = r["token_times_max_difference_s"]
    print(
        f"the same {r['tokens']} tokens from both, {r['text']!r}"
        + (f"; token times equal to {times:.1g} s" if times is not None else "")
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench whisper", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--tiny", action="store_true", help="a tiny random Whisper (the test's)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if tables_or_threads(args, markdown):
        return 0
    try:
        r = run(args.repeats, args.tiny)
    except SystemExit as stop:
        return int(stop.code)
    report(r, args.repeats)
    write_numbers(args, {"torch": torch.__version__, "threads": torch.get_num_threads(), **r})
    return 0


if __name__ == "__main__":
    sys.exit(main())
