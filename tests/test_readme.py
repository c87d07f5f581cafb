"""The README and docs/ followed literally work: their commands and programs run.

The pages are README.md and every docs/*.md. Each fenced block is classified by its
language tag:

* ``bash``/``sh`` in a page of ``RUN_PAGES`` (the README, then the CLI tour of
  docs/cli.md, then docs/deployment.md): every command line is run, in page order, in
  ONE bash session (so ``source .venv/bin/activate`` in the README carries over to the
  later blocks and pages, as in a user's shell) and must exit 0 - unless the block's
  first line is the marker ``# not run by tests/test_readme.py: <reason>``; the marked
  blocks are few and each states its reason (checked below). The shell blocks of the
  other pages reproduce long measurements (benchmarks, soaks, a data set that is not in
  the repository); ``NOT_RUN_PAGES`` names each with its reason.
* untagged blocks that start with ``$ ``: a transcript. Each ``$`` command runs in
  the same session; when the output shown holds a ``jarvismem: error:`` line the
  command must fail with exactly that line, otherwise it must succeed, and every
  shown output line must appear in the real output once numbers and ids are
  masked (``...`` lines elide).
* ``python`` blocks that are whole programs (they call ``asyncio.run``) run too, in
  every page; ``dotenv`` blocks must name only real settings and load as a valid
  configuration. Every other block must carry a tag (``text`` for pictures), so no
  shell block can dodge the run by having none.

A relative link of any page must name a file that exists, and its ``#anchor`` a
heading of that page. The pictures (docs/img/*.svg) are SVG, each with a ``text``
version beside it, and name only real settings and the real default paths.

Where it runs: a copy of the checkout (tracked and new files) in a temporary
folder, so nothing the pages create (``.venv``, ``.jarvismem/``, ``tour.jsonl``)
lands in the repository. ``.venv`` there is a stand-in for what ``scripts/bootstrap``
installs (this interpreter, the copy on ``PYTHONPATH``; no pip, no network), and
Azurite's npm install is a stand-in too (the Azurite the suite uses already answers,
so it is never started). ``REDIS_URL`` points at a private ``redis-server`` of this
test, and every directory that holds a ``jarvismem`` executable is removed from
``PATH``, so a README that forgets to put it there fails.

Long commands run with reduced arguments only where the README says so (REDUCED).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jarvismem.settings import Settings, load_settings
from tests.conftest import bootstrap_stamp

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUN_PAGES = [README, ROOT / "docs" / "cli.md", ROOT / "docs" / "deployment.md"]
"""Pages whose shell commands run, in this order, in one session."""
NOT_RUN_PAGES = {
    "docs/performance.md": "benchmark runs of minutes each, judged by their own targets",
    "docs/recall.md": "needs the LoCoMo data file, which the repository does not ship",
    "docs/reliability.md": "crash, soak and HA suites of many minutes (CI runs their tests)",
}
"""Pages whose shell blocks are reproduction recipes, not run here, each with why."""
MARKER = "# not run by tests/test_readme.py: "
MAX_MARKED_BLOCKS = 2
"""Blocks the run pages may exempt (today: the docker compose commands, no engine in CI)."""

REDUCED = {"scripts/test": "scripts/test tests/test_errors.py"}
"""Commands run with reduced arguments; the README must say so in these words."""

_FENCE_RE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
# Numbers, hex ids (with at least one digit) and timestamps differ from run to run.
_VOLATILE_RE = re.compile(r"[0-9a-f]*\d[0-9a-f.:-]*", re.I)


@dataclass
class Block:
    lang: str
    body: str
    line: int  # 1-based line of the opening fence
    page: str = "README.md"  # relative to the checkout

    @property
    def lines(self) -> list[str]:
        return self.body.splitlines()


@dataclass
class Command:
    text: str
    line: int
    shown: list[str] = field(default_factory=list)  # transcript output (empty for bash)
    transcript: bool = False
    page: str = "README.md"


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    return [
        Block(m.group(1).lower(), m.group(2), text.count("\n", 0, m.start()) + 1, page)
        for m in _FENCE_RE.finditer(text)
    ]


def page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def page_blocks(path: Path) -> list[Block]:
    return readme_blocks(path.read_text(encoding="utf-8"), page_name(path))


def is_transcript(block: Block) -> bool:
    return block.lang in ("", "console") and block.body.startswith("$ ")


def is_marked(block: Block) -> bool:
    return bool(block.lines) and block.lines[0].startswith(MARKER)


def commands(blocks: list[Block]) -> list[Command]:
    """Every command to run, in README order."""
    found: list[Command] = []
    for block in blocks:
        if block.lang in ("bash", "sh") and not is_marked(block):
            pending = ""
            for offset, raw in enumerate(block.lines, start=1):
                line = raw.rstrip()
                if not pending and (not line.strip() or line.lstrip().startswith("#")):
                    continue
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                found.append(Command(pending + line, block.line + offset, page=block.page))
                pending = ""
        elif is_transcript(block):
            for offset, raw in enumerate(block.lines, start=1):
                if raw.startswith("$ "):
                    found.append(
                        Command(raw[2:], block.line + offset, transcript=True, page=block.page)
                    )
                elif found and raw.strip():
                    found[-1].shown.append(raw)
    return found


def reduced(command: str) -> str:
    """The command as run: REDUCED replaces a whole command, comments stripped first."""
    bare = command.split(" #", 1)[0].strip()
    return REDUCED.get(bare, command)


def masked(line: str) -> str:
    return " ".join(_VOLATILE_RE.sub("#", line).split())


ALL_BLOCKS = [b for page in PAGES for b in page_blocks(page)]
RUN_BLOCKS = [b for page in RUN_PAGES for b in page_blocks(page)]
COMMANDS = commands(RUN_BLOCKS)
README_COMMANDS = [c for c in COMMANDS if c.page == "README.md"]


# --- the README's shape -------------------------------------------------------------


def test_the_readme_has_commands_to_run() -> None:
    texts = [c.text for c in README_COMMANDS]
    assert any(t.startswith("scripts/demo") for t in texts)
    assert any(t.startswith("jarvismem ") for t in texts)


def test_the_cli_tour_runs_after_the_readme() -> None:
    tour = [c for c in COMMANDS if c.page == "docs/cli.md"]
    assert tour and all(c.transcript for c in tour)
    assert COMMANDS.index(tour[0]) > COMMANDS.index(README_COMMANDS[-1])


def test_every_block_carries_a_language_or_is_a_transcript() -> None:
    untagged = [f"{b.page}:{b.line}" for b in ALL_BLOCKS if not b.lang and not is_transcript(b)]
    assert untagged == [], f"blocks without a language tag at {untagged}"


def test_shell_blocks_run_or_their_page_says_why_not() -> None:
    shells = {b.page for b in ALL_BLOCKS if b.lang in ("bash", "sh") or is_transcript(b)}
    run = {page_name(p) for p in RUN_PAGES}
    assert sorted(shells - run - set(NOT_RUN_PAGES)) == []
    assert set(NOT_RUN_PAGES) <= shells, "a page no longer holds shell blocks: drop it here"
    assert all(len(reason) >= 15 for reason in NOT_RUN_PAGES.values())


def test_few_blocks_are_exempt_and_each_says_why() -> None:
    marked = [b for b in RUN_BLOCKS if is_marked(b)]
    assert len(marked) <= MAX_MARKED_BLOCKS, [f"{b.page}:{b.line}" for b in marked]
    for block in marked:
        where = f"{block.page} line {block.line}"
        assert block.lang in ("bash", "sh"), f"{where}: only shell blocks are exempted"
        reason = block.lines[0][len(MARKER) :].strip()
        assert len(reason) >= 15, f"{where}: the marker must say why"


def test_the_readme_says_which_commands_run_with_reduced_arguments() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    for command, as_run in REDUCED.items():
        assert any(c.text.split(" #")[0].strip() == command for c in README_COMMANDS)
        assert f"runs it as `{as_run}`" in text


def test_the_readme_says_how_to_put_jarvismem_on_path() -> None:
    texts = [c.text.split(" #")[0].strip() for c in README_COMMANDS]
    demo = next(i for i, t in enumerate(texts) if t.startswith("scripts/demo"))
    cli = next(i for i, t in enumerate(texts) if t.startswith("jarvismem "))
    assert "source .venv/bin/activate" in texts[demo:cli]


def test_the_crash_resume_picture_is_an_svg_in_docs_img() -> None:
    import xml.etree.ElementTree as ET

    text = README.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert "docs/img/crash-resume.svg" in images
    root = ET.parse(ROOT / "docs" / "img" / "crash-resume.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    words = " ".join(t for t in root.itertext())
    for step in ("SIGKILL", "rehydrate_bundle()", "save_checkpoint", "exactly once"):
        assert step in words


_LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The page without its fenced blocks and inline code, where links are not links."""
    return _INLINE_CODE_RE.sub("", _FENCE_RE.sub("", text))


def heading_anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives the page's headings (GitHub's rule)."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _FENCE_RE.sub("", text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:  # repeated headings get -1, -2, ...
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def test_anchors_follow_the_renderers_rule() -> None:
    text = (
        "# A page\n## Nothing configured: the server (one machine)\n"
        "## A page\n```bash\n# a comment, not a heading\n```\n"
    )
    assert heading_anchors(text) == {
        "a-page",
        "nothing-configured-the-server-one-machine",
        "a-page-1",
    }


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_every_relative_link_names_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in _LINK_RE.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md":
            if anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{target}: no such heading in {linked.name}")
    assert broken == [], f"{page_name(page)}: broken links {broken}"


_IMAGE_RE = re.compile(r"!\[([^\]]+)\]\(([^)\s]+\.svg)\)")
_SETTING_LIKE_RE = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*")
TOPOLOGIES = ("embedded", "single", "sentinel", "cluster")


def pictures() -> list[tuple[str, Path, Block]]:
    """Every SVG a page shows, with the block right after it (its text version)."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = page_blocks(page)
        for m in _IMAGE_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            after = [b for b in blocks if b.line > line]
            assert after, f"{page_name(page)} line {line}: no text version after the picture"
            found.append((page_name(page), (page.parent / m.group(2)).resolve(), after[0]))
    return found


def _svg_words(path: Path) -> str:
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", path.name
    assert root.find("{http://www.w3.org/2000/svg}title") is not None, f"{path.name}: no <title>"
    return " ".join(" ".join(root.itertext()).split())


@pytest.mark.parametrize("shown", pictures(), ids=lambda s: f"{s[0]}:{s[1].name}")
def test_each_picture_is_an_svg_with_a_text_version_naming_real_settings(
    shown: tuple[str, Path, Block],
) -> None:
    page, svg, text_version = shown
    assert text_version.lang == "text", f"{page}: {svg.name} must be followed by a text block"
    known = {n.upper() for n in Settings.model_fields}
    for where, words in ((svg.name, _svg_words(svg)), (f"{page} text", text_version.body)):
        for name in _SETTING_LIKE_RE.findall(words):
            if name.endswith("_"):  # REDIS_SSL_* names a family of settings
                assert any(k.startswith(name) for k in known), f"{where}: {name}*"
            else:
                assert name in known, f"{where}: {name} is not a setting"


def test_the_deployment_page_draws_each_topology_with_the_real_default_paths() -> None:
    from jarvismem import defaults
    from jarvismem.keys import EMBEDDED_REDIS_FILES

    shown = {svg.name: (_svg_words(svg), block.body) for page, svg, block in pictures()
             if page == "docs/deployment.md"}  # fmt: skip
    assert sorted(shown) == sorted(f"topology-{t}.svg" for t in TOPOLOGIES)
    # The embedded picture draws the folder tree: each default folder by its name.
    folders = (defaults.EMBEDDED_REDIS_PATH, defaults.STORAGE_BASE_PATH, defaults.OUTBOX_PATH)
    assert {p.parent for p in folders} == {Path(".jarvismem")}
    for words in shown["topology-embedded.svg"]:
        assert ".jarvismem/" in words
        for name in [*(f"{p.name}/" for p in folders), *EMBEDDED_REDIS_FILES.values()]:
            if name != EMBEDDED_REDIS_FILES["aof_file"]:  # Redis 6's single file, not drawn
                assert name in words, f"embedded picture: {name}"
    for topology in TOPOLOGIES[1:]:
        for words in shown[f"topology-{topology}.svg"]:
            assert str(defaults.OUTBOX_PATH) in words and "OUTBOX_PATH" in words


@pytest.mark.parametrize(
    "block", [b for b in ALL_BLOCKS if b.lang == "dotenv"], ids=lambda b: f"{b.page}:{b.line}"
)
def test_dotenv_blocks_hold_real_settings(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = re.findall(r"^([A-Z][A-Z0-9_]*)=", block.body, flags=re.M)
    assert names
    known = {n.upper() for n in Settings.model_fields}
    assert [n for n in names if n not in known] == []
    for name in names:  # the environment would win over the file: test the file's values
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / ".env"
    # A trailing "  # comment" is the user's note, not part of the value.
    env_file.write_text(re.sub(r"\s+#.*$", "", block.body, flags=re.M), encoding="utf-8")
    load_settings(_env_file=str(env_file))  # raises ConfigError on any bad value


# --- running it ---------------------------------------------------------------------


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _copy_checkout(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def _stand_in_venv(root: Path) -> None:
    """What scripts/bootstrap leaves behind, without pip: this interpreter on the copy."""
    venv = root / ".venv"
    _executable(venv / "bin" / "python", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    _executable(venv / "bin" / "jarvismem", f'#!/bin/sh\nexec {sys.executable} -m jarvismem "$@"\n')
    (venv / "bin" / "activate").write_text(
        f'VIRTUAL_ENV="{venv}"\nexport VIRTUAL_ENV\nPATH="$VIRTUAL_ENV/bin:$PATH"\nexport PATH\n',
        encoding="utf-8",
    )
    os.utime(root / "pyproject.toml", (0, 0))  # the install stamp must be newer
    (venv / bootstrap_stamp()).touch()
    _executable(
        root / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob",
        "#!/bin/sh\necho 'stand-in: the real Azurite was expected to answer already' >&2\nexit 1\n",
    )


def _path_without_jarvismem() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "jarvismem").exists())


def _run_session(root: Path, work: Path, cmds: list[Command], env: dict[str, str]) -> list[Any]:
    """Run every command in one bash session; (rc, stdout, stderr) of each."""
    lines = ["cd " + _quote(str(root))]
    for i, cmd in enumerate(cmds):
        (work / f"{i}.cmd").write_text(reduced(cmd.text), encoding="utf-8")
        out = _quote(str(work / str(i)))
        lines.append(
            f"start=$EPOCHREALTIME; "
            f'eval "$(cat {out}.cmd)" >{out}.out 2>{out}.err </dev/null; echo $? >{out}.rc; '
            f'echo "$start $EPOCHREALTIME" >{out}.time'
        )
    script = work / "session.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run(["bash", str(script)], env=env, timeout=300, check=False)
    results = []
    for i in range(len(cmds)):
        rc_file = work / f"{i}.rc"
        rc = int(rc_file.read_text()) if rc_file.exists() else None
        results.append(
            (
                rc,
                (work / f"{i}.out").read_text(errors="replace"),
                (work / f"{i}.err").read_text(errors="replace"),
            )
        )
    return results


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _problems(cmd: Command, rc: int | None, out: str, err: str) -> list[str]:
    where = f"{cmd.page} line {cmd.line}: `{cmd.text}`"
    tail = "\n    ".join((out + err).strip().splitlines()[-15:])
    errors = [s for s in cmd.shown if s.startswith("jarvismem: error:")]
    if rc is None:
        return [f"{where} did not run\n    {tail}"]
    if errors:
        problems = [] if rc != 0 else [f"{where} succeeded; the README shows it failing"]
        problems += [
            f"{where}: the README's error line is not what it prints: {e!r}\n    {tail}"
            for e in errors
            if e not in err.splitlines()
        ]
        return problems
    if rc != 0:
        return [f"{where} exited {rc}\n    {tail}"]
    actual = {masked(line) for line in (out + err).splitlines()}
    return [
        f"{where}: shown output line not produced: {shown!r}\n    {tail}"
        for shown in cmd.shown
        if shown.strip() != "..." and masked(shown) not in actual
    ]


@pytest.mark.integration
def test_every_readme_command_runs(tmp_path: Path, redis_server: Any) -> None:
    root = tmp_path / "checkout"
    work = tmp_path / "session"
    work.mkdir()
    _copy_checkout(root)
    _stand_in_venv(root)
    from tests.conftest import env_without_settings

    env = env_without_settings()
    env.update(
        PATH=_path_without_jarvismem(),
        PYTHONPATH=str(root),
        REDIS_URL=redis_server.url,
        HOME=str(tmp_path / "home"),
    )
    env.pop("VIRTUAL_ENV", None)
    results = _run_session(root, work, COMMANDS, env)
    problems = [
        p
        for cmd, (rc, out, err) in zip(COMMANDS, results, strict=True)
        for p in _problems(cmd, rc, out, err)
    ]
    assert not problems, "\n".join(problems)
    # scripts/demo itself says how to reach the CLI it installed.
    demo = next(i for i, c in enumerate(COMMANDS) if c.text.startswith("scripts/demo"))
    assert "source .venv/bin/activate" in results[demo][2]


PROGRAMS = [b for b in ALL_BLOCKS if b.lang == "python" and "asyncio.run(" in b.body]


def test_the_readme_and_docs_hold_python_programs() -> None:
    pages = {b.page for b in PROGRAMS}
    for page in ("README.md", "docs/recall.md", "docs/integrations.md"):
        assert page in pages, f"{page}: its python programs are expected to run here"


@pytest.mark.parametrize("block", PROGRAMS, ids=lambda b: f"{b.page}:{b.line}")
@pytest.mark.integration
def test_python_programs_of_the_pages_run(block: Block, tmp_path: Path, redis_server: Any) -> None:
    from tests.conftest import env_without_settings

    program = tmp_path / "readme_program.py"
    program.write_text(block.body, encoding="utf-8")
    env = env_without_settings()
    env.update(PYTHONPATH=str(ROOT), REDIS_URL=redis_server.url)
    proc = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
