"""The options of the sequential effective-length search (docs/protocols/sequential.md),
declared once and inherited by the option models of the tasks that offer it (passkey,
needle, RULER). Pydantic only, like every option model: the API schema and the CLI read it."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from evaluators.options import MAX_LENGTH, Int, TaskOptions, option

SearchMode = Literal["grid", "sequential"]
# The options that only a sequential search reads (their defaults are their fields'; `search` itself chooses)
SEARCH_ONLY = ("search_lengths", "search_min", "search_max", "search_block", "search_alpha")


class SearchOptions(TaskOptions):
    """The options of the sequential effective-length search (docs/protocols/sequential.md),
    shared by the tasks that offer it. They only choose which samples run (a sequential
    search draws a prefix of the grid's samples of some lengths), so they stay out of the
    configuration hash: a grid run reuses a search's samples and the other way round."""

    search_cap: ClassVar[str] = "trials"  # the option that counts the grid's units per length
    search_extra: ClassVar[tuple[str, ...]] = ()  # the task's further options that only a search reads

    search: SearchMode = option("grid", "grid: every length and sample (numbers comparable with papers); "
                                "sequential: bisection over the lengths with samples drawn in small blocks "
                                "until each tested length is decided against the threshold", selects=True)
    search_lengths: Literal["given", "doubling"] = option(
        "given", "candidate lengths of a sequential search: given = the lengths option (within search_min.."
        "search_max when set); doubling = search_min, 2 x search_min, ... up to search_max", selects=True)
    search_min: Int(ge=1, le=MAX_LENGTH) | None = option(None, "shortest candidate length (tokens)",
                                                         selects=True, tokens=True)
    search_max: Int(ge=1, le=MAX_LENGTH) | None = option(None, "longest candidate length (tokens)",
                                                         selects=True, tokens=True)
    search_block: Int(ge=1, le=100_000) = option(5, "samples drawn per look of a sequential search (per "
                                                 "task for RULER, per depth round for the needle grid)",
                                                 selects=True)
    search_alpha: Annotated[float, Field(gt=0, le=0.5)] = option(
        0.05, "probability that a sequential search states a wrong effective length (split over its tests)",
        selects=True)

    @model_validator(mode="after")
    def _search(self) -> SearchOptions:
        if self.search == "grid":
            fields = type(self).model_fields
            changed = [k for k in SEARCH_ONLY + self.search_extra if getattr(self, k) != fields[k].default]
            if changed:
                raise ValueError(f"{', '.join(changed)} apply only to search=sequential; add search=sequential "
                                 "or drop them")
            return self
        lo, hi = self.search_min, self.search_max
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"search_min ({lo}) must be below search_max ({hi})")
        if self.search_lengths == "doubling":
            if lo is None or hi is None:
                raise ValueError("search_lengths=doubling needs search_min and search_max (e.g. 1024 and 131072)")
            doubled = [lo << k for k in range((hi // lo).bit_length()) if lo << k <= hi]
            if "lengths" in self.model_fields_set and sorted(set(self.lengths)) != doubled:
                raise ValueError(f"lengths {self.lengths} and search_lengths=doubling ({doubled}) disagree; give "
                                 "one of them")
            self.lengths = doubled
        else:
            chosen = sorted({n for n in self.lengths if (lo is None or n >= lo) and (hi is None or n <= hi)})
            if not chosen:
                raise ValueError(f"no length of {self.lengths} lies in search_min..search_max ({lo}..{hi})")
            self.lengths = chosen
        if len(self.lengths) < 2:
            raise ValueError(f"a sequential search needs at least two candidate lengths, got {self.lengths}; "
                             "give more lengths or use search=grid")
        cap = getattr(self, self.search_cap)
        if self.search_block > cap:
            raise ValueError(f"search_block ({self.search_block}) exceeds {self.search_cap} ({cap}), the most a "
                             f"length may draw; lower search_block or raise {self.search_cap}")
        return self

    def sequential(self) -> bool:
        return self.search == "sequential"

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        """(absolute threshold, relative share) of the sequential search, means in [0, 1]."""
        raise NotImplementedError
