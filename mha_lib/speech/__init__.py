"""Speech to text with Whisper base: the part of the library behind notebook 17, the series'
encoder-decoder on real weights.

Read first: `model` (Whisper built from the series' attention, positions, pre-norm blocks and
KV cache), then `transcribe` (loading the weights, greedy decoding with a fixed
cross-attention cache beside a growing self-attention cache), then `timing` (DTW over the
alignment heads). `audio` turns samples into the log-mel spectrogram, `ctranslate2` reads the
weights' file format, `tokenizer` is Whisper's BPE. What makes it Whisper (options, weights'
names) is `mha_lib.models.whisper`.

A module per idea:
- `audio`: `log_mel`, `mel_filters`, `read_wav`, `write_wav`;
- `ctranslate2`: `read_ctranslate2`, `write_ctranslate2`, `CTranslate2File`;
- `model`: `WhisperConfig`, `WhisperModel`, `WhisperCache`, `whisper_sinusoids`, the state
  dicts' maps;
- `tokenizer`: `WhisperTokenizer`;
- `timing`: `median_filter`, `dtw`, `alignment_matrix`, `token_times`, `token_spans`;
- `transcribe`: `load_whisper`, `transcribe`, `align`, `Transcript`, `greedy_tokens`;
- `alignment`: the measures of notebook 17's ablation (word starts through any heads, null
  models);
- `utterances`: the stored espeak-ng utterances (`utterance(name)`), their words' starts, and how
  they were made;
- `reference`: `hf_whisper`, transformers' WhisperForConditionalGeneration holding our weights
  and the GenerationConfig that decodes as `transcribe` does (imports transformers when
  called): the reference of the tests and of `python -m mha_lib.bench whisper`.

Imports torch, numpy, tokenizers (inside `WhisperTokenizer`) and transformers (inside
`hf_whisper`), so each module is imported by its full name (`from mha_lib.speech.transcribe
import load_whisper`); this package imports nothing itself.

Edges: `llm`, for `find_model_file` (the one place that finds and joins a model's packages).
"""
