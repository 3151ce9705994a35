"""The options of the attention diagnostics (docs/protocols/protocols.md)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from evaluators.options import MAX_LENGTH, FilePath, Int, IntList, Seed, TaskOptions, option

# Presets of the diagnostics' inputs: name -> (lengths, samples). gu2024: Gu et al., "When
# Attention Sink Emerges" (sail-sg/Attention-Sink): 100 natural-text samples of 64 tokens.
DIAGNOSTICS_PRESETS: dict[str, tuple[list[int], int]] = {"gu2024": ([64], 100)}


class DiagnosticsOptions(TaskOptions):
    task: ClassVar[str] = "diagnostics"

    lengths: IntList(2, MAX_LENGTH) = option([256, 1024, 4096], "input lengths in tokens, BOS included",
                                             selects=True, tokens=True)
    samples: Int(ge=1, le=10_000) = option(2, "inputs per length", selects=True)
    preset: Literal["gu2024"] | None = option(
        None, "gu2024: Gu et al.'s sink-rate inputs, 100 samples of 64 tokens (sets lengths and samples unless "
        "given)")
    seed: Seed = 0
    inputs: Literal["text", "passkey"] = option(
        "text", "text: consecutive windows of natural text, each sample starting with BOS (the papers' inputs); "
        "passkey: passkey prompts")
    text_file: FilePath | None = option(None, "UTF-8 text the windows are cut from (default: the shipped "
                                        "public-domain Alice's Adventures in Wonderland)", file=True)
    hidden_states: Literal["layers", "hf"] = option(
        "layers", "hidden states of the massive-activation figures: layers = the residual stream after each "
        "layer; hf = what transformers' output_hidden_states gives and the softpick paper measures (the "
        "embeddings, each layer's output but the last, and the final norm's output)")
    dense_max: Int(ge=0, le=MAX_LENGTH) = option(1024, "inputs up to this many tokens use dense weights")
    chunk_size: Int(ge=16, le=MAX_LENGTH) = option(1024, "prefill chunk of the streaming path")

    @model_validator(mode="after")
    def _preset(self) -> DiagnosticsOptions:
        if self.preset is not None:
            lengths, samples = DIAGNOSTICS_PRESETS[self.preset]
            if "lengths" not in self.model_fields_set:
                self.lengths = list(lengths)
            if "samples" not in self.model_fields_set:
                self.samples = samples
        if self.inputs == "passkey" and self.text_file is not None:
            raise ValueError("text_file is read only with inputs=text; drop it or set inputs=text")
        return self

    def planned_samples(self) -> int:
        return len(self.lengths) * self.samples

    def context_needed(self) -> int:
        return max(self.lengths)
