"""Where the committed specs live, and loading them by operator name."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from gen.spec import Spec, load_spec
from harness.casefile import is_plain_name


class UnknownOp(LookupError):
    """An operator with no spec."""


def specs_dir() -> Path:
    """OPCASE_SPECS if set; else the specs an installed wheel carries inside the gen package (gen/specs/,
    mapped from the top-level specs/ in pyproject.toml); else, in a clone, the repository's specs/."""
    if os.environ.get("OPCASE_SPECS"):
        return Path(os.environ["OPCASE_SPECS"])
    package = Path(__file__).resolve().parent
    installed = package / "specs"
    return installed if installed.is_dir() else package.parent / "specs"


def known_ops() -> list[str]:
    return sorted(p.stem for p in specs_dir().glob("*.yaml"))


@lru_cache(maxsize=None)
def spec_for(op: str) -> Spec:
    # ``op`` may come from a case file: only a plain name, so the path stays in specs_dir().
    path = specs_dir() / f"{op}.yaml" if is_plain_name(op) else None
    if path is None or not path.is_file():
        raise UnknownOp(f"no spec for operator {op!r} in {specs_dir()} (known: {', '.join(known_ops())})")
    return load_spec(path)
