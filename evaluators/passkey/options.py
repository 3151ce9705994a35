"""The options of passkey retrieval and the needle grid (docs/protocols/protocols.md)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, StrictBool

from evaluators.options import (
    FilePath,
    Int,
    IntList,
    Lengths,
    MaxNewTokens,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
    stop_when_decided_option,
)
from evaluators.sequential.options import SearchOptions

TDA_LENGTHS = list(range(500, 4001, 500))  # the TDA paper's passkey grid
# Passkey and needle score the output's first integer (or the whole output when it is one).
FIRST_INTEGER_RULE = ("once the output's first integer is followed by another character, the integer the protocol "
                      "scores is fixed")


class PasskeyOptions(SearchOptions, ThinkingOptions):
    task: ClassVar[str] = "passkey"

    lengths: Lengths = option(TDA_LENGTHS, "target prompt lengths in the model's tokens", selects=True, tokens=True)
    trials: Int(ge=1, le=100_000) = option(100, "trials per length", selects=True)
    seed: Seed = 0
    max_new_tokens: MaxNewTokens = option(10, "greedy tokens generated per trial", tokens=True)
    chat_template: StrictBool = chat_template_option(False, "the landmark/TDA protocol prompts the model as "
                                                     "plain text")
    stop_when_decided: StrictBool = stop_when_decided_option(FIRST_INTEGER_RULE)
    search_threshold: Annotated[float, Field(gt=0, lt=1)] = option(
        0.5, "a sequential search's pass mark: a length passes when its accuracy is >= this", selects=True)
    search_extra: ClassVar[tuple[str, ...]] = ("search_threshold",)

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        return self.search_threshold, None

    def planned_samples(self) -> int:
        return len(self.lengths) * self.trials

    def context_needed(self) -> int:
        return max(self.lengths) + self.max_new_tokens  # prompts fill their length, then it generates

    def generated_tokens(self) -> int:
        return self.max_new_tokens

    def planned_tokens(self) -> int:
        return sum(self.lengths) * self.trials


class NeedleOptions(SearchOptions, ThinkingOptions):
    task: ClassVar[str] = "needle"

    lengths: Lengths = option([1000, 2000, 4000], "target prompt lengths in the model's tokens", selects=True,
                              tokens=True)
    depths: IntList(0, 100) = option(list(range(0, 101, 10)), "needle depths, percent of the haystack, 0..100",
                                     selects=True)
    trials: Int(ge=1, le=100_000) = option(1, "trials per cell", selects=True)
    seed: Seed = 0
    max_new_tokens: MaxNewTokens = option(10, "greedy tokens generated per trial", tokens=True)
    search_threshold: Annotated[float, Field(gt=0, lt=1)] = option(
        0.5, "a sequential search's pass mark: a length passes when its accuracy is >= this", selects=True)
    search_extra: ClassVar[tuple[str, ...]] = ("search_threshold",)

    haystack_file: FilePath | None = option(None, "UTF-8 text repeated as the haystack (default: the passkey "
                                            "garbage); absolute or relative to the data directory", file=True)
    chat_template: StrictBool = chat_template_option(False, "the needle-in-a-haystack grid prompts the model as "
                                                     "plain text, as passkey does")
    stop_when_decided: StrictBool = stop_when_decided_option(FIRST_INTEGER_RULE)

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        return self.search_threshold, None

    def planned_samples(self) -> int:
        return len(self.lengths) * len(self.depths) * self.trials

    def context_needed(self) -> int:
        return max(self.lengths) + self.max_new_tokens

    def generated_tokens(self) -> int:
        return self.max_new_tokens

    def planned_tokens(self) -> int:
        return sum(self.lengths) * len(self.depths) * self.trials
