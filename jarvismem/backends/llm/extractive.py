"""The extractive summarizer: the default when no LLM is configured.

It keeps the most informative lines of the input, deterministically, and says where
it left lines out. It sits in a module of its own, importing only the standard
library and jarvismem's lightest modules (no HTTP client, no settings, no pydantic),
because the summary worker's process (:mod:`~jarvismem.backends.llm.worker_child`)
loads this module alone: that process then holds ~25 MB, not the ~65 MB all of
jarvismem takes.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Generator, Sequence

from jarvismem import telemetry
from jarvismem.backends.llm.truncation import TRUNCATION_MARKER, truncate
from jarvismem.backends.llm.worker import SummaryWorker, WorkerUnavailable, default_worker
from jarvismem.defaults import SUMMARY_MAX_CHARS
from jarvismem.errors import InvalidPayloadError

__all__ = ["SLICE_SECONDS", "ExtractiveSummarizer", "omission_marker"]

log = telemetry.logger(__name__)


_WORD_RE = re.compile(r"[^\W_]{3,}", re.UNICODE)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+")
# Where _SENTENCE_SPLIT_RE could split at all: a cheap test that spares most
# lines the slower look-behind scan.
_SENTENCE_END_RE = re.compile(r"[.!?]\s")
_STOPWORDS = frozenset(
    """the and for are but not you all any can had her was one our out has him his how
    its may new now old see two who did get let put say she too use this that with from
    have they will would there their what when which were been into than then them these
    those some such only also just more most other over very your about after again
    while where being because should could does doing each few here itself same""".split()
)


def _terms(text: str) -> list[str]:
    # map(str.lower) over the matches, not a lowered text: lowering first can
    # change what the word pattern splits (e.g. a dotted capital I).
    return [w for w in map(str.lower, _WORD_RE.findall(text)) if w not in _STOPWORDS]


# How many units a loop handles between two checks of the time slice: one
# where a unit is tokenized (up to ~50 us for a long ledger line), a few where
# it is only looked up.
_STEP_UNITS = 8

SLICE_SECONDS = 0.0005
"""Longest stretch of CPU work :meth:`ExtractiveSummarizer.summarize` does on the
event loop before it yields to it (the kernel's tasks run in between)."""


def _units(text: str) -> Generator[None, None, list[str]]:
    """Lines, with over-long lines split into sentences (a step generator)."""
    out: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = " ".join(raw.split())
        if not line:
            continue
        if len(line) <= 300 or not _SENTENCE_END_RE.search(line):
            out.append(line)
        else:
            out.extend(s for s in _SENTENCE_SPLIT_RE.split(line) if s)
        if n % _STEP_UNITS == 0:
            yield
    return out


# A ledger line starts "[turn <id>]" (jarvismem.tiers.longterm.render_entry);
# a partial summary of the map-reduce step may hold several on one line.
_TURN_TAG_RE = re.compile(r"\[turn ([^\s\]]+)\]")
# What the extractive summarizer writes where it left turns out. Ids are ASCII,
# so the en dash between the first and last id is unambiguous.
_MARKER_RE = re.compile(
    r"\[(?:turns? (?P<first>[^\s\]\u2013]+)(?:\u2013(?P<last>[^\s\]]+))? omitted: "
    r"(?P<turns>\d+) turns?(?:, (?P<also>\d+) other lines?)?"
    r"|(?P<lines>\d+) lines? omitted)\]"
)
# Rounds of selection before giving up on fitting the markers (then the text is cut).
_MAX_FIT_ROUNDS = 8


def omission_marker(first: str | None, last: str | None, turns: int, lines: int) -> str:
    """``[turns 1–57 omitted: 57 turns]`` (``, 2 other lines`` when some were not turns)."""
    if turns:
        span = first if first == last else f"{first}\u2013{last}"
        text = (
            f"[turn{'s' if first != last else ''} {span} omitted: {turns} turn{'s' * (turns != 1)}"
        )
        if lines:
            text += f", {lines} other line{'s' * (lines != 1)}"
        return text + "]"
    return f"[{lines} line{'s' * (lines != 1)} omitted]"


def _is_marker(unit: str) -> bool:
    return _MARKER_RE.fullmatch(unit) is not None


# What one left-out unit adds to a gap: (first turn id, last turn id) of its
# spans (None when it names no turn), turns, other lines.
_GapPart = tuple[str | None, str | None, int, int]


def _gap_part(unit: str) -> _GapPart:
    """What leaving ``unit`` out adds to the gap around it (markers merge, tags count)."""
    first: str | None = None
    last: str | None = None
    turns = lines = 0
    found = False
    for match in _MARKER_RE.finditer(unit):
        found = True
        if match.group("lines"):
            lines += int(match.group("lines"))
            continue
        start = match.group("first")
        first = first or start
        last = match.group("last") or start
        turns += int(match.group("turns"))
        lines += int(match.group("also") or 0)
    if found and _is_marker(unit):
        return first, last, turns, lines
    tags = _TURN_TAG_RE.findall(_MARKER_RE.sub("", unit))
    if tags:
        first = first or tags[0]
        last = tags[-1]
        turns += len(tags)
    elif not found:
        lines += 1
    return first, last, turns, lines


class _Gap:
    """What a run of left-out units held: its turn ids (first, last), turns and other lines."""

    __slots__ = ("first", "last", "lines", "turns")

    def __init__(self) -> None:
        self.first: str | None = None
        self.last: str | None = None
        self.turns = 0
        self.lines = 0

    def add(self, part: _GapPart) -> None:
        first, last, turns, lines = part
        if first is not None:
            self.first = self.first or first
            self.last = last
        self.turns += turns
        self.lines += lines

    def marker(self) -> str | None:
        if not (self.turns or self.lines):
            return None
        return omission_marker(self.first, self.last, self.turns, self.lines)


class _Ranked:
    """The candidates of one unit list, best first: (index, unit) of each distinct
    non-marker unit at its first occurrence, ranked once per summary (the
    scores do not depend on the budget, so the fitting rounds reuse them)."""

    __slots__ = ("order",)

    def __init__(self, order: list[tuple[int, str]]) -> None:
        self.order = order

    def select(self, budget: int, exclude: set[str] | None = None) -> dict[int, str]:
        """Best-ranked units fitting in ``budget`` chars: index -> text kept.

        A single unit larger than the whole budget is cut rather than lost.
        """
        chosen: dict[int, str] = {}
        if budget <= 0:
            return chosen
        used = 0
        for index, unit in self.order:
            if exclude and unit in exclude:
                continue
            cost = len(unit) + (1 if chosen else 0)
            if used + cost > budget:
                if not chosen and budget > len(TRUNCATION_MARKER) + 20:
                    chosen[index] = truncate(unit, budget)
                    # Full: every further unit costs at least one character.
                    break
                continue
            chosen[index] = unit
            used += cost
        return chosen


class _Work:
    """The per-summary caches: each distinct unit is tokenized, scored and
    (when left out) parsed for its turn ids once, however often it occurs or
    however many fitting rounds look at it."""

    def __init__(self) -> None:
        self.terms: dict[str, list[str]] = {}
        self.marker: dict[str, bool] = {}
        self.gap: dict[str, _GapPart] = {}

    def is_marker(self, unit: str) -> bool:
        known = self.marker.get(unit)
        if known is None:
            known = self.marker[unit] = _is_marker(unit)
        return known

    def gap_part(self, unit: str) -> _GapPart:
        part = self.gap.get(unit)
        if part is None:
            part = self.gap[unit] = _gap_part(unit)
        return part

    def weights(self, units: Sequence[str]) -> Generator[None, None, dict[str, float]]:
        """Term weight = frequency x inverse unit frequency (tf-idf over the input's units).

        A word in every unit ("turn") weighs nothing; a subject that recurs in
        some units weighs most. Markers do not count.
        """
        tf: Counter[str] = Counter()
        df: Counter[str] = Counter()
        n = 0
        for unit in units:
            if self.is_marker(unit):
                continue
            n += 1
            terms = self.terms.get(unit)
            if terms is None:
                terms = self.terms[unit] = _terms(unit)
            tf.update(terms)
            df.update(set(terms))
            yield
        return {t: tf[t] * math.log((n + 1) / df[t]) for t in tf}

    def rank(self, units: Sequence[str], freq: dict[str, float]) -> Generator[None, None, _Ranked]:
        """The candidates of ``units`` ranked by score; on equal scores the later wins."""
        seen: set[str] = set()
        candidates: list[tuple[float, int, str]] = []
        for index, unit in enumerate(units):
            if unit in seen or self.is_marker(unit):
                continue
            seen.add(unit)
            terms = self.terms[unit]
            # sorted(): float sums in set order would differ between processes
            # (string hash randomisation) and break ties differently.
            score = sum(freq.get(t, 0.0) for t in sorted(set(terms))) / math.sqrt(len(terms) + 1)
            # On equal scores the later line wins: the newest turns matter most
            # to an agent resuming its work.
            candidates.append((-score, -index, unit))
            yield
        candidates.sort()
        return _Ranked([(-neg_index, unit) for _, neg_index, unit in candidates])


class ExtractiveSummarizer:
    """Deterministic summarizer without an LLM.

    Splits the input into lines (long lines into sentences), scores each by the
    tf-idf weight of its content words across the whole input (so recurring
    subjects win and words present everywhere count for nothing), normalised by
    length, and keeps the best ones (the later on equal scores) in their original
    order within ``max_chars``. Lines of the previous summary are kept first (up to half
    the budget when there is new text), so a rolling summary does not forget its
    past. Same input, same output.

    Nothing is dropped silently: where lines were left out, one marker line
    says so, e.g. ``[turns 1–57 omitted: 57 turns]`` (turn ids from the
    ``[turn N]`` tags of ledger lines; ``[3 lines omitted]`` for other text).
    Markers of a previous summary are merged into the new gaps around them, so
    the counts stay true as the summary rolls on. The markers count against
    ``max_chars``.

    The work is pure CPU and linear in the input. With ``offload=True`` (what
    ``COMPACTION_WORKER=process``, the default, makes) it runs in the process's
    summary worker (:mod:`~jarvismem.backends.llm.worker`), a child process, so the
    kernel's event loop only ships the text there and back. Without it, or while
    the worker cannot answer (it died, stalled, or could not start), it runs on
    the event loop in slices of at most :data:`SLICE_SECONDS` with a yield to the
    loop between them: the loop's other tasks (an agent's ``log_turn``) are never
    held up for longer than a slice. Both give the same summary. (A worker thread
    would not help: the loop would then wait for the GIL, up to the interpreter's
    5 ms switch interval.)

    ``worker``: the worker to use with ``offload`` (default: the process's one,
    :func:`~jarvismem.backends.llm.worker.default_worker`).
    """

    name = "extractive"

    bounded_input = False
    """No context window: compaction gives it a whole page of entries in one call
    rather than map-reducing chunks of ``COMPACTION_CHUNK_CHARS`` (the work is
    linear either way; one pass ranks the page's lines against each other)."""

    def __init__(self, *, offload: bool = False, worker: SummaryWorker | None = None) -> None:
        self.offload = offload
        self._worker = worker

    @property
    def worker(self) -> SummaryWorker | None:
        """The worker summaries go to, or None when they are computed in-process."""
        if not self.offload:
            return None
        if self._worker is None:
            self._worker = default_worker()
        return self._worker

    async def summarize(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """Return the selected lines and omission markers, at most ``max_chars`` long."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        worker = self.worker
        if worker is not None and worker.available():
            try:
                return await worker.run(worker.summarize, [text], previous_summary, max_chars)
            except WorkerUnavailable as exc:
                # Nothing is lost: the same summary is computed here, in slices.
                log.warning("summary worker unavailable, summarizing in-process: %s", exc)
        steps = self._steps(text, previous_summary, max_chars)
        # Start on a fresh turn of the loop: the caller may have worked since it
        # last yielded (another summary, a page of rendering), and a slice
        # counted from here would add to that.
        await asyncio.sleep(0)
        slice_end = time.perf_counter() + SLICE_SECONDS
        while True:
            try:
                next(steps)
            except StopIteration as done:
                summary: str = done.value
                return summary
            if time.perf_counter() >= slice_end:
                await asyncio.sleep(0)
                slice_end = time.perf_counter() + SLICE_SECONDS

    def summarize_now(
        self, text: str, *, previous_summary: str | None = None, max_chars: int = SUMMARY_MAX_CHARS
    ) -> str:
        """:meth:`summarize` in one go, without yielding (for code off the event loop)."""
        if max_chars < 1:
            raise InvalidPayloadError("max_chars must be >= 1")
        steps = self._steps(text, previous_summary, max_chars)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                summary: str = done.value
                return summary

    def _steps(
        self, text: str, previous_summary: str | None, max_chars: int
    ) -> Generator[None, None, str]:
        """The summary, computed in steps: each ``yield`` is a point to pause at."""
        work = _Work()
        previous = yield from _units(previous_summary or "")
        new = yield from _units(text)
        freq = yield from work.weights(previous + new)
        ranked_prev = yield from work.rank(previous, freq)
        ranked_new = yield from work.rank(new, freq)
        budget = max_chars
        summary = ""
        for _ in range(_MAX_FIT_ROUNDS):
            summary = yield from self._compose(work, previous, new, ranked_prev, ranked_new, budget)
            if len(summary) <= max_chars or budget <= 0:
                break
            # The markers took room the selection did not know of: select less.
            budget -= len(summary) - max_chars
        return truncate(summary, max_chars)

    @staticmethod
    def _compose(
        work: _Work,
        previous: list[str],
        new: list[str],
        ranked_prev: _Ranked,
        ranked_new: _Ranked,
        budget: int,
    ) -> Generator[None, None, str]:
        budget_prev = budget if not new else budget // 2 if previous else 0
        kept_prev = ranked_prev.select(budget_prev) if previous else {}
        used = sum(len(u) + 1 for u in kept_prev.values())
        kept_new = ranked_new.select(budget - used, set(kept_prev.values())) if new else {}
        out: list[str] = []
        emitted: set[str] = set()
        gap = _Gap()
        step = 0
        for units, kept_of in ((previous, kept_prev), (new, kept_new)):
            for index, unit in enumerate(units):
                step += 1
                if step % _STEP_UNITS == 0:
                    yield
                kept = kept_of.get(index)
                if kept is None:
                    if unit not in emitted:  # a repeat of a line that is there: nothing missing
                        gap.add(work.gap_part(unit))
                    continue
                marker = gap.marker()
                if marker:
                    out.append(marker)
                    gap = _Gap()
                out.append(kept)
                emitted.add(unit)
        marker = gap.marker()
        if marker:
            out.append(marker)
        return "\n".join(out)
