"""Plans and points as pandas DataFrames, and tables written to files (``--out``).

One row per plan: its ``system`` (when the plan names one), ``num_gpus``, the mapping's keys (a disaggregated plan's pools as ``prefill.tp``,
``decode.tp``, ...), then the model's metrics (numbers and flags only). ``write_table`` writes a
DataFrame as CSV, Parquet or JSON (records) by the file's suffix, atomically, and never over a file
that exists (nothing a user wrote is overwritten).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from parasol.model.choices import plain
from parasol.model.errors import ProblemError

from . import read_files

if TYPE_CHECKING:
    import pandas as pd

FORMATS = (".csv", ".parquet", ".json")


def mapping_row(mapping, num_gpus: int) -> dict:
    """A plan's mapping as flat columns: num_gpus, then each key (pool keys prefixed by the pool)."""
    row = {"num_gpus": num_gpus}
    for key, value in mapping.as_dict().items():
        if isinstance(value, dict):
            row.update({f"{key}.{k}": plain(v) for k, v in value.items()})
        else:
            row[key] = plain(value)
    return row


def plans_frame(plans) -> pd.DataFrame:
    """One row per plan: its mapping (``mapping_row``) and the model's scalar metrics."""
    rows = []
    for p in plans:
        metrics = {k: v for k, v in p.evaluation.metrics.items() if isinstance(v, (int, float, bool))}
        system = {"system": p.system_name} if getattr(p, "system_name", None) is not None else {}
        rows.append({**system, **mapping_row(p.mapping, p.num_gpus), **metrics})
    import pandas as pd  # noqa: PLC0415 (the commands that only evaluate start without pandas)

    return pd.DataFrame(rows)


def table_suffix(path: str, field: str = "--out", verb: str = "write") -> str:
    """The table format of ``path`` by its suffix (one of FORMATS); ProblemError (``field``) otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ProblemError(f"cannot {verb} {Path(path).name!r}; allowed suffixes: {', '.join(FORMATS)}", field=field)
    return suffix


def write_table(frame: pd.DataFrame, path: str) -> None:
    """Write ``frame`` to ``path`` as CSV, Parquet or JSON records by its suffix (``write_new_file``)."""
    suffix = table_suffix(path)
    if suffix == ".csv":
        write_new_file(path, "--out", lambda tmp: frame.to_csv(tmp, index=False))
    elif suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401  (a dependency; an environment may still lack it)
        except ImportError:
            raise ProblemError("writing .parquet needs pyarrow: pip install pyarrow", field="--out") from None
        write_new_file(path, "--out", lambda tmp: frame.to_parquet(tmp, index=False))
    else:
        write_new_file(path, "--out", lambda tmp: frame.to_json(tmp, orient="records", indent=1))


def check_table_file(path: str, field: str = "--out") -> None:
    """ProblemError now (before a command works) if ``write_table`` could not write ``path``: a suffix it
    does not write, a missing folder or a file that exists."""
    table_suffix(path, field)
    check_new_file(path, field)


_REPLACING = contextvars.ContextVar("parasol_replacing", default=False)


@contextlib.contextmanager
def replacing(allowed: bool):
    """Inside, ``write_new_file`` may replace a regular file that exists (the commands' ``--force``)."""
    token = _REPLACING.set(bool(allowed))
    try:
        yield
    finally:
        _REPLACING.reset(token)


def check_new_file(path: str, field: str) -> tuple:
    """(folder, the error for an existing file) of a file ``write_new_file`` may create; ProblemError
    (``field``) now if the folder does not exist, if something other than a regular file is there (a
    directory, link, device or FIFO: never replaced), or if a file is and ``--force`` was not given."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ProblemError(f"the folder {folder} does not exist", field=field)
    _check_writable(folder, field)
    read = read_files.read_file_at(path)
    if read is not None:
        raise ProblemError(f"{path} is the file this command reads ({read}); write elsewhere", field=field)
    exists = ProblemError(
        f"{path} exists; parasol does not overwrite files (remove it, choose another name, or pass --force)", field=field
    )
    if os.path.lexists(path):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise ProblemError(
                f"{path} exists and is not a regular file (a folder, link, device or FIFO): parasol replaces only regular files",
                field=field,
            )
        if not _REPLACING.get():
            raise exists
    return folder, exists


def _new_temporary_file(folder: str, field: str, **names) -> str:
    """The path of a new empty file in ``folder`` (``tempfile.mkstemp``'s ``names``: prefix, suffix); ProblemError
    (``field``) where none can be created."""
    try:
        fd, path = tempfile.mkstemp(dir=folder, **names)
    except OSError as err:
        raise ProblemError(f"cannot create a file in the folder {folder}: {err.strerror}", field=field) from None
    os.close(fd)
    return path


def _check_writable(folder: str, field: str) -> None:
    """ProblemError (``field``) unless a file can be created in ``folder``: a probe file is created there and
    removed (permissions, read-only or virtual file systems such as /proc say no only when one is tried)."""
    probe = _new_temporary_file(folder, field, prefix=".parasol-probe-")
    with contextlib.suppress(OSError):  # an append-only folder keeps the empty probe; the write may still succeed
        os.unlink(probe)


def write_new_file(path: str, field: str, write) -> None:
    """Create ``path`` with ``write(temporary path)``: written beside it, then linked into place, so a
    reader never sees half a file and a file that exists is never replaced (nothing a user wrote is
    overwritten) unless ``replacing`` allows it, and then only a regular file, in one rename.
    ProblemError (``field``) when the folder does not exist or the file does."""
    folder, exists = check_new_file(path, field)
    tmp = _new_temporary_file(folder, field, suffix=Path(path).suffix)
    try:
        write(tmp)
        if _REPLACING.get():
            check_new_file(path, field)  # still a regular file (or nothing)
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)  # fails, rather than replaces, if the file appeared meanwhile
        except FileExistsError:
            raise exists from None
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
    except OSError as err:  # a full disk, a folder gone meanwhile: one line, never a traceback
        raise ProblemError(f"could not write {path}: {err.strerror or err}", field=field) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
