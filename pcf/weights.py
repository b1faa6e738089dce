"""The four weights of Eq. 5 (METHOD.md) and their named presets, free of numpy so that the
CLI's help and a run's spec load at once; :mod:`pcf.consensus` applies them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    """The four weights of Eq. 5: mean score, Borda, top votes, certainty."""

    score: float
    borda: float
    vote: float
    certainty: float

    def __post_init__(self) -> None:
        values = self.as_tuple()
        if any(w < 0 for w in values) or not any(values):
            raise ValueError(f"weights must be non-negative and not all zero, got {values}")

    def as_tuple(self) -> tuple[float, float, float, float]:
        """``(ws, wB, wv, wu)``."""
        return (self.score, self.borda, self.vote, self.certainty)

    @classmethod
    def parse(cls, text: str) -> Weights:
        """Read ``"ws,wB,wv,wu"``, e.g. ``"0.5,0.25,0.2,0.05"``."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 4:
            raise ValueError(f"weights need four numbers ws,wB,wv,wu; got {text!r}")
        try:
            return cls(*(float(p) for p in parts))
        except ValueError as exc:
            raise ValueError(f"weights {text!r}: {exc}") from exc


PRESETS: dict[str, Weights] = {
    "proposed": Weights(0.50, 0.25, 0.20, 0.05),
    "uniform": Weights(0.25, 0.25, 0.25, 0.25),
    "score-only": Weights(1, 0, 0, 0),
    "rank-only": Weights(0, 1, 0, 0),
    "vote-only": Weights(0, 0, 1, 0),
    "no-uncertainty": Weights(0.50, 0.27, 0.23, 0),
}
DEFAULT_WEIGHTS = PRESETS["proposed"]


def named_weights(text: str) -> Weights:
    """A preset's name or four weights ``ws,wB,wv,wu``.

    Raises:
        ValueError: neither a preset nor four usable weights.
    """
    if text in PRESETS:
        return PRESETS[text]
    if "," not in text:
        raise ValueError(f"unknown preset {text!r}; choose one of {', '.join(PRESETS)}")
    return Weights.parse(text)


def weights_label(weights: Weights) -> str:
    """The preset's name of ``weights``, else ``ws,wB,wv,wu``."""
    name = next((name for name, preset in PRESETS.items() if preset == weights), None)
    return name or ",".join(f"{w:g}" for w in weights.as_tuple())
