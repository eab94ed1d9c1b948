"""A walk through the code: which of the project's files a request enters, in order.

`Walk` records, while it is active, every call that passes from one project file into another
(the innermost project frame of the caller and of the callee; Django, the standard library
and the tests in between are transparent). From that:

- files entered: the distinct files of the walk;
- times entered: how often the walk passes into a file (the first file counts once);
- turns back: entries into a file the walk had already been in (times entered - files);
- climbs: calls from a lower layer into a higher one (`LAYERS`: the agent kit, then runs and
  accounts, then approvals, then the gateway), the direction the house's rules forbid at
  import time and callbacks bring back at run time.

`WALKS_FOLD` (folders, comma-separated) counts each folder as one file.

`stop_at` ends the walk when the first frame of that code object is entered (the approved
tool's own function: "the resumed step").
"""

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType

ROOT = Path(__file__).resolve().parents[2]
# The apps. The agent kit is their foundation and, like Django, transparent to a walk.
PRODUCT = ("runs", "accounts", "approvals", "gateway", "triggers", "history")
LAYERS = {"runs": 1, "accounts": 1, "approvals": 2, "history": 2, "triggers": 2, "gateway": 3}
# Frames that are part of the function that made them, not a step of the walk.
INNER = frozenset(("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>", "<module>"))


# Folders counted as one room (WALKS_FOLD=runs/models/,…): a walk before and after a module is
# split into a package can then be compared room for room.
FOLD = tuple(f for f in os.environ.get("WALKS_FOLD", "").split(",") if f)


def _project_file(code: CodeType) -> str | None:
    name = code.co_filename
    if not name.startswith(str(ROOT)) or "/.venv/" in name or code.co_name in INNER:
        return None
    relative = name[len(str(ROOT)) + 1 :]
    for folder in FOLD:
        if relative.startswith(folder):
            return folder
    return relative if relative.split("/", 1)[0] in PRODUCT else None


@dataclass
class Walk:
    start: str  # the file the walk starts in: nothing is recorded before it is entered
    stop_at: CodeType | None = None
    entries: list[tuple[str, str]] = field(default_factory=list)  # (file, function)
    climbs: int = 0
    stopped: bool = False

    def _caller_file(self, frame: FrameType) -> str | None:
        back = frame.f_back
        while back is not None:
            found = _project_file(back.f_code)
            if found is not None:
                return found
            back = back.f_back
        return None

    def _profile(self, frame: FrameType, event: str, arg) -> None:
        if event != "call" or self.stopped:
            return
        if frame.f_code is self.stop_at:
            self.stopped = True
            return
        here = _project_file(frame.f_code)
        if here is None:
            return
        if not self.entries and here != self.start:
            return
        caller = self._caller_file(frame)
        if caller == here and self.entries:
            return
        if caller is not None and _layer(here) > _layer(caller):
            self.climbs += 1
        self.entries.append((here, frame.f_code.co_name))

    @contextmanager
    def recording(self) -> Iterator["Walk"]:
        before = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(before)

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(f for f, _ in self.entries))

    @property
    def times_entered(self) -> int:
        return len(self.entries)

    @property
    def turns_back(self) -> int:
        return self.times_entered - len(self.files)

    def entered(self, path: str) -> int:
        """How often the walk entered files under `path` (a file or a folder)."""
        return sum(1 for f, _ in self.entries if f == path or f.startswith(path.rstrip("/") + "/"))

    def report(self, title: str) -> str:
        lines = [
            f"{title}: {len(self.files)} files entered {self.times_entered} times, "
            f"{self.turns_back} turns back, {self.climbs} climbs up the layers"
        ]
        lines += [f"  {i:3d} {f} ({fn})" for i, (f, fn) in enumerate(self.entries, start=1)]
        return "\n".join(lines)


def _layer(path: str) -> int:
    return LAYERS.get(path.split("/", 1)[0], 0)
