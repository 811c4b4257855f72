"""Snapshot and resume of an SMC run.

``smc.smc(..., checkpoint=path)`` and ``smc.generate(..., checkpoint=path)`` write the run's
state to ``path`` after the particles start and after every step: the particles, the run's
random state (the numpy Generator's bit-generator state: every later random choice is drawn
from it), the history so far and the settings that shape later steps; for ``generate`` also the
constraint, the prompt's token ids and the sampler's name. ``resume(path, lm=lm)`` (or
``await aresume(...)``) continues the run. Since step k+1 depends only on that state, a run
resumed after step k returns exactly (bit for bit) the Result of the uninterrupted run with the
same seed.

Shared objects (smc.programs.sharing.is_shared: LMs, potentials, samplers, ``Shared`` containers) are
never pickled. Each is written as its attribute path in the first particle that reaches it
(e.g. ``"context.lm"``), and ``resume`` binds the paths again: LMs from ``lm=``, anything else
from ``shared={path: object}``; for ``generate`` the token sampler is rebuilt from the LM and
the stored constraint. Caches that declare ``rebuilt_on_resume`` (an LMContext's samplers) are
stored empty.

File layout: a marker line, one JSON header line (format version, smc-steer version, kind, step,
settings, the shared objects' paths, the program's description, section lengths and the
payload's SHA-256), then the payload: the program's own bytes (for ``generate``, the pickled
constraint) and the pickled state. A file is replaced
atomically (written to a temporary file in the same directory, fsync'd, then os.replace), so a
run killed while writing leaves the previous step's checkpoint. Loading unpickles: resume only
checkpoints you wrote.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from smc.backends.base import LMBackend, is_lm
from smc.core.errors import InvalidArgumentType, SmcSteerError
from smc.core.version import VERSION
from smc.programs.model import Model, Sample
from smc.programs.sharing import ATOMIC_TYPES, children, is_shared, shared_paths
from smc.engine.result import StepRecord

#: version of the file layout and of what the state holds; a file of another version is refused
#: (2: the request's JSON form in the header, the modules of smc-steer 0.2)
FORMAT_VERSION = 2
MAGIC = b"smc-steer checkpoint\n"
#: types that always pickle (unlike functions, which pickle only by an importable name)
_VALUES = frozenset({type(None), bool, int, float, complex, str, bytes})


class CheckpointError(SmcSteerError, ValueError):
    """A checkpoint that cannot be written or resumed; the message names the problem."""


def _package_version() -> str:
    return VERSION


def vocab_fingerprint(lm: LMBackend) -> str:
    """SHA-256 (16 hex digits) of the LM's vocabulary and EOS ids: resume checks the LM it is
    given against the run's."""
    h = hashlib.sha256()
    for tok in lm.vocab:
        h.update(len(tok).to_bytes(4, "little"))
        h.update(tok)
    h.update(repr(list(lm.eos_token_ids)).encode())
    return h.hexdigest()[:16]


def _tokens_fingerprint(lm: LMBackend) -> str:
    h = hashlib.sha256()
    for tok in lm.vocab:
        h.update(len(tok).to_bytes(4, "little"))
        h.update(tok)
    return h.hexdigest()[:16]


def lm_description(lm: LMBackend) -> dict[str, Any]:
    """What a checkpoint stores of an LM to recognize it on resume: ``vocab`` (the fingerprint
    of its vocabulary and EOS ids), ``vocab_size``, ``tokens`` (the fingerprint of the
    vocabulary alone) and ``eos`` (its EOS ids), so that a mismatch can be named."""
    return {"vocab": vocab_fingerprint(lm), "vocab_size": len(lm.vocab),
            "tokens": _tokens_fingerprint(lm), "eos": [int(e) for e in lm.eos_token_ids]}


def lm_mismatch(lm: LMBackend, run: dict[str, Any]) -> str | None:
    """None when ``lm`` is the LM ``run`` (an ``lm_description``) describes, else what differs:
    the vocabulary's size, its tokens, or the EOS ids."""
    if vocab_fingerprint(lm) == run["vocab"]:
        return None
    size = run.get("vocab_size")
    if size is not None and size != len(lm.vocab):
        return f"its vocabulary has {len(lm.vocab):,} tokens, the run's had {size:,}"
    eos = run.get("eos")
    tokens = run.get("tokens")
    if tokens is not None and tokens != _tokens_fingerprint(lm):
        return f"its vocabulary's tokens differ from the run's (both have {len(lm.vocab):,} tokens)"
    if eos is not None and eos != [int(e) for e in lm.eos_token_ids]:
        return f"its EOS token ids {[int(e) for e in lm.eos_token_ids]} differ from the run's {eos}"
    return f"its vocabulary or EOS tokens ({len(lm.vocab):,} tokens) differ from those the run used"


def type_name(obj: Any) -> str:
    """``module.QualifiedName`` of ``obj``'s type, as a checkpoint records shared objects."""
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def name_shared(pop: list[Any]) -> tuple[dict[int, str], dict[str, dict[str, Any]], dict[str, Any]]:
    """Names of the shared objects the particles reach: (id -> path, path -> description,
    path -> object).

    A path is the first one found breadth-first in the first particle that reaches the object;
    when particles hold different objects at one path, later ones get ``path@i`` (particle i).
    """
    ids: dict[int, str] = {}
    records: dict[str, dict[str, Any]] = {}
    objects: dict[str, Any] = {}
    for i, p in enumerate(pop):
        for path, obj in shared_paths(p):
            if id(obj) in ids or getattr(type(obj), "rebuilt_on_resume", False):
                continue
            name = path if path not in records else f"{path}@{i}"
            ids[id(obj)] = name
            records[name] = _describe(obj)
            objects[name] = obj
    return ids, records, objects


def shared_caches(objects: dict[str, Any]) -> dict[str, Any]:
    """path -> ``cache_contexts()`` of each shared object that declares its caches (samplers
    and potentials: what their steps depend on besides the particles), where not None."""
    saved = {}
    for name, obj in objects.items():
        get = getattr(obj, "cache_contexts", None)
        got = get() if callable(get) else None
        if got is not None:
            saved[name] = got
    return saved


def _describe(obj: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": type_name(obj), "lm": is_lm(obj)}
    if rec["lm"]:
        rec.update(lm_description(obj))
    return rec


class _StatePickler(pickle.Pickler):
    """Pickles by value, except shared objects: those become their names (persistent ids)."""

    def __init__(self, file: Any, ids: dict[int, str], records: dict[str, dict[str, Any]]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.ids, self.records = ids, records

    def persistent_id(self, obj: Any) -> str | None:
        if type(obj) in ATOMIC_TYPES:
            return None
        name = self.ids.get(id(obj))
        if name is None and is_shared(obj) and not getattr(type(obj), "rebuilt_on_resume", False):
            # reached only through a member the path walk does not see (e.g. a custom __reduce__)
            name = f"<{type(obj).__name__} #{len(self.records)}>"
            self.ids[id(obj)] = name
            self.records[name] = _describe(obj)
        return name


def _dumps(obj: Any, ids: dict[int, str], records: dict[str, dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    _StatePickler(buf, ids, records).dump(obj)
    return buf.getvalue()


def _unpicklable(obj: Any, ids: dict[int, str], records: dict, path: str, seen: set[int]) -> tuple[str, Any, BaseException] | None:
    """(path, value, error) for the deepest member of ``obj`` that fails to pickle, or None."""
    seen.add(id(obj))
    for suffix, child in children(obj):
        if type(child) in _VALUES or id(child) in seen or id(child) in ids:
            continue
        try:
            _dumps(child, ids, records)
        except Exception as err:  # noqa: BLE001 - any pickling failure is what we look for
            return _unpicklable(child, ids, records, path + suffix, seen) or (path + suffix, child, err)
    return None


def check_path(path: Any) -> Path:
    """``path`` as a Path a checkpoint may be written to, checked before any work; the one rule
    for every file the library writes (``Request``, ``smc.smc``, ``resume``).

    The file is replaced by a rename (``atomic_write``), which replaces whatever is at ``path``.
    So nothing the library did not write may be there: ``path`` must be absent, an empty regular
    file, or a regular file that begins with the checkpoint marker (a checkpoint), never a
    symbolic link (the rename would replace the link itself), a directory, a FIFO, a device or
    any other special file. Its directory must exist and accept a new file (tried by creating
    and removing an empty temporary file there, as every write does). CheckpointError (a
    ValueError) naming the problem, TypeError for a value that is not a path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentType(f"checkpoint must be a file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    shown = str(p)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise CheckpointError(f"checkpoint {shown!r} cannot be used: {err.strerror or err}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise CheckpointError(
                f"checkpoint {shown!r} is a symbolic link; writing the checkpoint would replace the "
                "link, so give the path of the file itself")
        if stat.S_ISDIR(st.st_mode):
            raise CheckpointError(f"checkpoint {shown!r} is a directory; give a file path")
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(
                f"checkpoint {shown!r} exists and is not a regular file ({_file_kind(st.st_mode)}); "
                "the library writes only regular files it created: give another path")
        if not _is_ours(p):
            raise CheckpointError(
                f"checkpoint {shown!r} exists and is not a smc-steer checkpoint; the library "
                "replaces only files it wrote (or empty ones): give another path, or remove it")
    if not p.parent.is_dir():
        raise CheckpointError(f"checkpoint {shown!r}: the directory {str(p.parent)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as err:
        raise CheckpointError(
            f"checkpoint {shown!r} cannot be written: the directory {str(p.parent)!r} does not "
            f"accept new files ({err.strerror or err})") from None
    os.close(fd)
    os.unlink(tmp)
    return p


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _is_ours(p: Path) -> bool:
    """Whether the regular file ``p`` is empty or begins with the checkpoint marker (an
    unreadable one is not ours)."""
    try:
        with open(p, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError:
        return False
    return head in (b"", MAGIC)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: a new temporary file in the same directory
    (created exclusively: never an existing file or a link's target), fsync'd, then os.replace
    (and an fsync of the directory, so the rename itself survives a crash). CheckpointError,
    writing nothing, when ``path`` has become something other than a regular file since
    ``check_path`` (the rename would replace it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise CheckpointError(
            f"checkpoint {str(path)!r} is no longer a regular file (something replaced it during "
            "the run); it was left as it is and the run stopped")
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # a platform without directory handles (Windows): the rename is done
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Run:
    """The state of an SMC run between two steps: everything a checkpoint stores.

    ``pop`` the particles, ``rng`` the run's Generator (all randomness of later steps comes from
    it), ``history`` the StepRecords so far, ``step`` the number of steps done, ``settings`` the
    arguments that shape later steps, ``elapsed_s`` wall time spent before this process took over,
    ``banked`` the finished copies set aside so far (``Model.bank``), ``caches`` the shared
    objects whose caches a loaded checkpoint holds, with them (``restore_caches``).
    """

    def __init__(self, pop: list[Model], rng: np.random.Generator, settings: dict[str, Any],
                 history: list[StepRecord] | None = None, step: int = 0, elapsed_s: float = 0.0,
                 banked: list[Sample] | None = None, caches: list[tuple[Any, Any]] | None = None):
        self.pop, self.rng, self.settings = pop, rng, settings
        self.history = [] if history is None else history
        self.banked = [] if banked is None else banked
        self.step, self.elapsed_s = step, elapsed_s
        self.caches = [] if caches is None else caches

    async def restore_caches(self) -> None:
        """Fill the shared objects' caches from the checkpoint (once; before the next step),
        so the resumed steps are the uninterrupted run's (docs/checkpoint.md)."""
        for obj, saved in self.caches:
            await obj.restore_caches(saved)
        self.caches = []


class CheckpointWriter:
    """Writes a run's state to one file after every step (``write``).

    Args:
        path: the checkpoint file.
        program: what a caller above the engine needs to rebuild the run's program on resume
            (JSON; ``generate`` stores its request, the prompt's ids and the LM's fingerprint),
            or None for a plain ``smc.smc`` run.
        program_bytes: bytes stored with it (``generate``: the pickled constraint).
    """

    def __init__(self, path: str | os.PathLike, program: dict[str, Any] | None = None,
                 program_bytes: bytes = b""):
        self.path = check_path(path)
        self.kind = "smc" if program is None else "generate"
        self.program = program
        self.program_bytes = program_bytes

    def write(self, run: Run, elapsed_s: float) -> None:
        """Write ``run`` (between two steps) to the file, replacing the previous checkpoint."""
        ids, records, objects = name_shared(run.pop)
        state = {"pop": run.pop, "rng": run.rng.bit_generator.state, "history": run.history,
                 "banked": run.banked, "caches": shared_caches(objects)}
        try:
            blob = _dumps(state, ids, records)
        except Exception as err:  # noqa: BLE001
            raise self._explain(run, ids, records, err) from None
        header = {
            "format_version": FORMAT_VERSION,
            "smc_steer": _package_version(),
            "kind": self.kind,
            "step": run.step,
            "elapsed_s": elapsed_s,
            "settings": run.settings,
            "shared": records,
            "program": self.program,
            "program_bytes": len(self.program_bytes),
            "state_bytes": len(blob),
            "sha256": hashlib.sha256(self.program_bytes + blob).hexdigest(),
        }
        line = json.dumps(header, separators=(",", ":")).encode() + b"\n"
        atomic_write(self.path, MAGIC + line + self.program_bytes + blob)

    def _explain(self, run: Run, ids: dict, records: dict, err: BaseException) -> CheckpointError:
        for i, p in enumerate(run.pop):
            found = _unpicklable(p, ids, records, "self", set())
            if found is not None:
                path, value, cause = found
                return CheckpointError(
                    f"cannot checkpoint the run: particle {i}'s attribute {path} "
                    f"({type(value).__name__}) cannot be pickled: {cause}. Make it picklable, or "
                    "declare it shared (a class attribute shared_by_particles = True, or wrap it "
                    "in smc.Shared(...)) and pass it again to resume(..., shared={...})"
                )
            try:
                _dumps(p, ids, records)
            except Exception as cause:  # noqa: BLE001
                return CheckpointError(
                    f"cannot checkpoint the run: particle {i} ({type(p).__qualname__}) cannot be "
                    f"pickled: {cause}. A program's class must be defined at module level"
                )
        return CheckpointError(f"cannot checkpoint the run: its state cannot be pickled: {err}")


# ---------------------------------------------------------------------------- reading
def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON header of a checkpoint (``step``, ``kind``, ``settings``, ``shared``, ...), read
    without unpickling anything; CheckpointError if ``path`` is not a checkpoint of this version."""
    return _read(path, payload=False)[0]


def _read(path: str | os.PathLike, payload: bool = True) -> tuple[dict[str, Any], bytes, bytes]:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentType(f"a checkpoint is a file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise FileNotFoundError(f"no checkpoint file at {str(p)!r}") from None
    except OSError as err:
        raise CheckpointError(f"cannot read the checkpoint {str(p)!r}: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        # opening a FIFO would wait for a writer forever; a directory cannot be read
        what = "a directory" if stat.S_ISDIR(st.st_mode) else _file_kind(st.st_mode)
        raise CheckpointError(f"{str(p)!r} is {what}, not a checkpoint file")
    try:
        f = open(p, "rb")
    except OSError as err:
        raise CheckpointError(f"cannot read the checkpoint {str(p)!r}: {err.strerror or err}") from None
    with f:
        if f.read(len(MAGIC)) != MAGIC:
            raise CheckpointError(f"{str(p)!r} is not a smc-steer checkpoint (it lacks the checkpoint marker)")
        try:
            header = json.loads(f.readline())
            version = header["format_version"]
        except (ValueError, KeyError, TypeError):
            raise CheckpointError(f"{str(p)!r} is a corrupt smc-steer checkpoint: its header is unreadable") from None
        if version != FORMAT_VERSION or header.get("smc_steer") != _package_version():
            raise CheckpointError(
                f"{str(p)!r} was written by smc-steer {header.get('smc_steer')} (checkpoint format "
                f"{version}); this is smc-steer {_package_version()} (format {FORMAT_VERSION}), which "
                "resumes only its own checkpoints: finish the run with that version, or start it again"
            )
        if not payload:
            return header, b"", b""
        try:
            nc, ns = int(header["program_bytes"]), int(header["state_bytes"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{str(p)!r} is a corrupt smc-steer checkpoint: its header is incomplete") from None
        constraint, state = f.read(nc), f.read(ns)
        if len(constraint) != nc or len(state) != ns or f.read(1):
            raise CheckpointError(f"{str(p)!r} is a corrupt smc-steer checkpoint: it is truncated or has extra bytes")
    if hashlib.sha256(constraint + state).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{str(p)!r} is a corrupt smc-steer checkpoint: its checksum does not match")
    return header, constraint, state


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, bindings: dict[str, Any]):
        super().__init__(file)
        self.bindings = bindings

    def persistent_load(self, pid: str) -> Any:
        return self.bindings[pid]


def bind_shared(records: dict[str, dict[str, Any]], lm: LMBackend, shared: dict[str, Any]) -> dict[str, Any]:
    """name -> object for every shared object the checkpoint names: ``shared[name]`` when
    given, else ``lm`` for an LM; CheckpointError naming what is missing, extra or mismatched."""
    extra = sorted(set(shared) - set(records))
    if extra:
        raise CheckpointError(
            f"shared names {', '.join(map(repr, extra))} are not in the checkpoint, which names: "
            f"{', '.join(map(repr, records)) or 'nothing'}"
        )
    lm_names = [k for k, r in records.items() if r["lm"] and k not in shared]
    if len(lm_names) > 1:
        raise CheckpointError(
            f"the run used {len(lm_names)} LMs ({', '.join(map(repr, lm_names))}): pass each in shared={{path: lm}}"
        )
    missing = [k for k, r in records.items() if k not in shared and not (r["lm"] and lm is not None)]
    if missing:
        hint = ", ".join(f"{k!r}: <{records[k]['type']}>" for k in missing)
        raise CheckpointError(
            f"resume needs the shared objects the run used, which a checkpoint does not store: "
            f"pass {'lm=... and ' if any(records[k]['lm'] for k in missing) else ''}shared={{{hint}}}"
        )
    bindings = {k: shared.get(k, lm) for k in records}
    for k, r in records.items():
        if r["lm"]:
            check_same_lm(bindings[k], r, k)
    return bindings


def check_same_lm(lm: LMBackend, run: dict[str, Any], what: str) -> None:
    """CheckpointError naming what differs unless ``lm`` is the LM the run's ``lm_description``
    ``run`` describes (``what``: the name the run gave it)."""
    if not is_lm(lm):
        raise CheckpointError(f"{what!r} was an LM backend in the run; got a {type(lm).__name__}")
    why = lm_mismatch(lm, run)
    if why is not None:
        raise CheckpointError(f"the LM given for {what!r} is not the run's: {why}; pass the same model")


#: rebuilds, for a checkpoint's program description and bytes, the shared objects its particles
#: name that the caller cannot pass (``generate``: the token sampler): (header, program bytes,
#: lm, shared) -> shared with them added
Rebuild = Callable[[dict[str, Any], bytes, "LMBackend | None", dict[str, Any]], dict[str, Any]]


def load(path: str | os.PathLike, *, lm: LMBackend | None, shared: dict[str, Any] | None,
         has_critic: bool, rebuild: Rebuild | None = None) -> tuple[Run, dict[str, Any], bytes]:
    """The run checkpointed at ``path``, its header and its program bytes, with every shared
    object bound again (``bind_shared``; a "generate" run's by ``rebuild``).

    CheckpointError for a file that is not a checkpoint of this version, is corrupt, names
    shared objects that are not given, or had a critic when none is given (or the reverse)."""
    header, program_bytes, blob = _read(path)
    if shared is None:
        shared = {}
    if not isinstance(shared, dict) or not all(isinstance(k, str) for k in shared):
        raise TypeError("shared must be a dict from the checkpoint's names (attribute paths) to objects")
    settings = header["settings"]
    if settings["critic"] and not has_critic:
        raise CheckpointError("the run used a critic: pass it again, resume(..., critic=...)")
    if not settings["critic"] and has_critic:
        raise CheckpointError("the run had no critic; resuming with one would change it")
    shared = dict(shared)
    if header["kind"] != "smc":
        if rebuild is None:
            raise CheckpointError(f"{str(path)!r} holds a {header['kind']} run: resume it with smc.resume")
        shared = rebuild(header, program_bytes, lm, shared)
    bindings = bind_shared(header["shared"], lm, shared)
    try:
        state = _StateUnpickler(io.BytesIO(blob), bindings).load()
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(
            f"cannot load the particles of {str(path)!r}: {type(err).__name__}: {err} (a program's "
            "class must be importable under the name it had when the run was written)"
        ) from None
    bit_generator = getattr(np.random, state["rng"]["bit_generator"])()
    bit_generator.state = state["rng"]
    caches = [(bindings[name], saved) for name, saved in state.get("caches", {}).items()]
    caches += rebuilt_caches(state["pop"])
    run = Run(state["pop"], np.random.Generator(bit_generator), settings, state["history"],
              header["step"], header["elapsed_s"], state.get("banked"), caches)
    return run, header, program_bytes


def rebuilt_caches(pop: list[Model]) -> list[tuple[Any, Any]]:
    """(object, saved) for each shared object of the particles that a checkpoint rebuilds
    (``rebuilt_on_resume``) and that came back holding caches to refill (``saved_caches``:
    e.g. an LMContext's samplers, ``smc.programs.context.SamplerCache``), each once."""
    seen: set[int] = set()
    out = []
    for p in pop:
        for _, obj in shared_paths(p):
            saved = getattr(obj, "saved_caches", None)
            if id(obj) not in seen and getattr(type(obj), "rebuilt_on_resume", False) and saved:
                seen.add(id(obj))
                out.append((obj, saved))
    return out
