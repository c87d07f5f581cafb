"""The recall benchmark's data: LoCoMo-shaped conversations read into plain records.

A data file is a list of conversations. Each has ``sample_id``, ``conversation``
(``speaker_a``, ``speaker_b``, ``session_N_date_time`` such as ``"1:56 pm on 8 May,
2023"``, and ``session_N``: a list of turns ``{speaker, dia_id, text}``, some with a
``blip_caption`` of an image shared) and ``qa`` (``{question, answer, evidence:
[dia_id, ...], category}``). Categories 1-4 are answerable (multi-hop, temporal,
open-domain, single-hop); category 5 (adversarial, no answer) is left out, and so
is a question whose evidence list is empty: neither can be scored on retrieval.

The data set's licence forbids committing it: the file is found at run time
(:func:`default_data_path`) and nothing of it is copied into the repository.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ENV_VAR = "JARVISMEM_LOCOMO"
FILE_NAME = "locomo-dev.json"
ROOT = Path(__file__).resolve().parents[1]
# The repository's sibling shared/ folder (a checkout in /work/main, or CI's fresh
# clone with a copy of shared/ beside it), then the machine's one shared folder.
CANDIDATES = (
    ROOT.parent / "shared" / "data" / FILE_NAME,
    Path("/work/shared/data") / FILE_NAME,
)

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""The answerable categories, by their number in the data."""

DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_SESSION_RE = re.compile(r"session_(\d+)")
_DIA_ID_RE = re.compile(r"D(\d+):(\d+)")
# One label in the data reads "D:11:26" for "D11:26": taken as meant. Any other
# label that names no turn (e.g. a bare "D") stays in the evidence and is simply
# never found, so a question's recall denominator is what its label says.
_SLIPPED_DIA_ID_RE = re.compile(r"D:(\d+):(\d+)")


class DataError(ValueError):
    """The data file is missing or not LoCoMo-shaped; the message says which."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance, as the benchmark stores it."""

    dia_id: str
    speaker: str
    session: int
    session_date: str  # as written in the data
    occurred_at: datetime  # the session's date and time (UTC: the data has no zone)
    content: str  # "<speaker>: <text>" plus " [shares <caption>]" for an image

    def metadata(self) -> dict[str, str]:
        """The entry metadata the benchmark writes beside the content."""
        return {
            "dia_id": self.dia_id,
            "speaker": self.speaker,
            "session": str(self.session),
            "session_date": self.session_date,
        }


@dataclass(frozen=True, slots=True)
class Question:
    """One answerable question and the turns that hold its answer."""

    question: str
    category: int
    evidence: tuple[str, ...]  # dia_ids, duplicates removed, label order kept


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: its turns in dialogue order and its scorable questions."""

    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def default_data_path(explicit: str | None = None) -> Path:
    """``explicit``, else ``$JARVISMEM_LOCOMO``, else the first of :data:`CANDIDATES`
    that exists; :class:`DataError` when none is given and none exists."""
    chosen = explicit or os.environ.get(ENV_VAR)
    if chosen:
        path = Path(chosen)
        if not path.is_file():
            raise DataError(f"LoCoMo data file {path} does not exist")
        return path
    for path in CANDIDATES:
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in CANDIDATES)
    raise DataError(f"no LoCoMo data file: pass --data PATH or set {ENV_VAR} (looked in {tried})")


def parse_session_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware UTC datetime."""
    try:
        return datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise DataError(f"session date {text!r} is not like '1:56 pm on 8 May, 2023'") from None


def turn_content(turn: dict[str, Any], captions: bool = True) -> str:
    """The text stored for a turn: who said it, what, and (``captions``) the image
    they shared, as the data's caption of it."""
    content = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption and captions:
        content += f" [shares {caption}]"
    return content


def _clean_dia_id(label: str) -> str:
    slipped = _SLIPPED_DIA_ID_RE.fullmatch(label)
    return f"D{slipped[1]}:{slipped[2]}" if slipped else label


def _turns(conversation: dict[str, Any], where: str, captions: bool) -> list[Turn]:
    sessions = sorted(
        int(m[1])
        for key in conversation
        if (m := _SESSION_RE.fullmatch(key)) and isinstance(conversation[key], list)
    )
    turns: list[Turn] = []
    for number in sessions:
        date_text = conversation.get(f"session_{number}_date_time")
        if not isinstance(date_text, str):
            raise DataError(f"{where}: session_{number} has no session_{number}_date_time")
        occurred_at = parse_session_date(date_text)
        for raw in conversation[f"session_{number}"]:
            try:
                turns.append(
                    Turn(
                        dia_id=str(raw["dia_id"]),
                        speaker=str(raw["speaker"]),
                        session=number,
                        session_date=date_text,
                        occurred_at=occurred_at,
                        content=turn_content(raw, captions),
                    )
                )
            except (KeyError, TypeError):
                raise DataError(
                    f"{where}: a turn of session_{number} lacks speaker, dia_id or text"
                ) from None
    return turns


def _questions(qa: list[dict[str, Any]], where: str) -> list[Question]:
    questions = []
    for item in qa:
        try:
            category = int(item["category"])
            text = str(item["question"])
            evidence = tuple(dict.fromkeys(_clean_dia_id(str(e)) for e in item["evidence"]))
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{where}: a qa item lacks question, evidence or category") from None
        if category in CATEGORIES and evidence:
            questions.append(Question(question=text, category=category, evidence=evidence))
    return questions


def parse_conversations(data: object, captions: bool = True) -> list[Conversation]:
    """The conversations of a decoded LoCoMo file; :class:`DataError` on another shape.
    ``captions``: whether a turn's content carries the caption of its image."""
    if not isinstance(data, list):
        raise DataError("a LoCoMo file holds a JSON list of conversations")
    out = []
    for index, sample in enumerate(data):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise DataError(f"conversation #{index} has no 'conversation' object")
        sample_id = str(sample.get("sample_id") or f"conv-{index}")
        turns = _turns(sample["conversation"], sample_id, captions)
        questions = _questions(sample.get("qa") or [], sample_id)
        out.append(Conversation(sample_id, tuple(turns), tuple(questions)))
    return out


def load_conversations(path: Path, captions: bool = True) -> list[Conversation]:
    """Read and parse a LoCoMo file (``captions``: see :func:`parse_conversations`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read LoCoMo data file {path}: {exc}") from None
    return parse_conversations(data, captions)


def take_slice(conversations: list[Conversation], spec: str | None) -> list[Conversation]:
    """A slice of the data: ``"N"`` = the first N conversations, ``"N:Q"`` = the first
    N conversations with the first Q questions of each; ``None`` = everything."""
    if not spec:
        return conversations
    try:
        parts = [int(p) for p in spec.split(":")]
    except ValueError:
        raise DataError(f"--slice {spec!r}: expected N or N:Q (whole numbers)") from None
    if len(parts) > 2 or any(p <= 0 for p in parts):
        raise DataError(f"--slice {spec!r}: expected N or N:Q, both positive")
    chosen = conversations[: parts[0]]
    if len(parts) == 2:
        chosen = [Conversation(c.sample_id, c.turns, c.questions[: parts[1]]) for c in chosen]
    return chosen
