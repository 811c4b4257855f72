"""Snapshot and resume of an SMC run.

``smc.smc(..., checkpoint=path)`` and ``smc.generate(..., checkpoint=path)`` write the run's
state to ``path`` after the particles start and after every step: the particles, the run's
random state (the numpy Generator's bit-generator state: every later random choice is drawn
from it), the history so far and the settings that shape later steps; for ``generate`` also the
constraint, the prompt's token ids and the sampler's name. ``resume(path, lm=lm)`` (or
``await aresume(...)``) continues the run. Since step k+1 depends only on that state, a run
resumed after step k returns exactly (bit for bit) the Result of the uninterrupted run with the
same seed.

Shared objects (smc.model.is_shared: LMs, potentials, samplers, ``Shared`` containers) are
never pickled. Each is written as its attribute path in the first particle that reaches it
(e.g. ``"context.lm"``), and ``resume`` binds the paths again: LMs from ``lm=``, anything else
from ``shared={path: object}``; for ``generate`` the token sampler is rebuilt from the LM and
the stored constraint. Caches that declare ``rebuilt_on_resume`` (an LMContext's samplers) are
stored empty.

File layout: a marker line, one JSON header line (format version, smc-steer version, kind, step,
settings, the shared objects' paths, section lengths and the payload's SHA-256), then the
payload: the pickled constraint (``generate`` only) and the pickled state. A file is replaced
atomically (written to a temporary file in the same directory, fsync'd, then os.replace), so a
run killed while writing leaves the previous step's checkpoint. Loading unpickles: resume only
checkpoints you wrote.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from smc.backends.base import LMBackend
from smc.counters import RunCounters
from smc.engine import Critic, Run, advance
from smc.model import _ATOMIC, _children, is_lm, is_shared, shared_paths
from smc.result import Result

#: version of the file layout and of what the state holds; a file of another version is refused
FORMAT_VERSION = 1
MAGIC = b"smc-steer checkpoint\n"
_SAME = object()
#: types that always pickle (unlike functions, which pickle only by an importable name)
_VALUES = frozenset({type(None), bool, int, float, complex, str, bytes})


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed; the message names the problem."""


def _package_version() -> str:
    import smc

    return smc.__version__


def vocab_fingerprint(lm: LMBackend) -> str:
    """SHA-256 (16 hex digits) of the LM's vocabulary and EOS ids: resume checks the LM it is
    given against the run's."""
    h = hashlib.sha256()
    for tok in lm.vocab:
        h.update(len(tok).to_bytes(4, "little"))
        h.update(tok)
    h.update(repr(list(lm.eos_token_ids)).encode())
    return h.hexdigest()[:16]


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def name_shared(pop: list[Any]) -> tuple[dict[int, str], dict[str, dict[str, Any]]]:
    """Names of the shared objects the particles reach: (id -> path, path -> description).

    A path is the first one found breadth-first in the first particle that reaches the object;
    when particles hold different objects at one path, later ones get ``path@i`` (particle i).
    """
    ids: dict[int, str] = {}
    records: dict[str, dict[str, Any]] = {}
    for i, p in enumerate(pop):
        for path, obj in shared_paths(p):
            if id(obj) in ids or getattr(type(obj), "rebuilt_on_resume", False):
                continue
            name = path if path not in records else f"{path}@{i}"
            ids[id(obj)] = name
            records[name] = _describe(obj)
    return ids, records


def _describe(obj: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": _type_name(obj), "lm": is_lm(obj)}
    if rec["lm"]:
        rec["vocab"] = vocab_fingerprint(obj)
        rec["vocab_size"] = len(obj.vocab)
    return rec


class _StatePickler(pickle.Pickler):
    """Pickles by value, except shared objects: those become their names (persistent ids)."""

    def __init__(self, file: Any, ids: dict[int, str], records: dict[str, dict[str, Any]]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.ids, self.records = ids, records

    def persistent_id(self, obj: Any) -> str | None:
        if type(obj) in _ATOMIC:
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
    for suffix, child in _children(obj):
        if type(child) in _VALUES or id(child) in seen or id(child) in ids:
            continue
        try:
            _dumps(child, ids, records)
        except Exception as err:  # noqa: BLE001 - any pickling failure is what we look for
            return _unpicklable(child, ids, records, path + suffix, seen) or (path + suffix, child, err)
    return None


def check_path(path: Any) -> Path:
    """``path`` as a Path whose directory exists; TypeError/ValueError naming the problem."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"checkpoint {str(p)!r} is a directory; give a file path")
    if not p.parent.is_dir():
        raise ValueError(f"checkpoint {str(p)!r}: the directory {str(p.parent)!r} does not exist")
    return p


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: a temporary file in the same directory, fsync'd,
    then os.replace (and an fsync of the directory, so the rename itself survives a crash)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
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


class CheckpointWriter:
    """Writes a run's state to one file after every step (``write``).

    Args:
        path: the checkpoint file.
        info: for ``generate``: ``prompt_ids``, ``constraint`` (pickled here, once),
            ``sampler`` (its name), ``max_tokens``, ``lookahead`` (its rate, default 0),
            ``lm`` (the backend, for its fingerprint).
    """

    def __init__(self, path: str | os.PathLike, info: dict[str, Any] | None = None,
                 constraint_bytes: bytes | None = None):
        self.path = check_path(path)
        self.kind = "smc" if info is None else "generate"
        self.generate: dict[str, Any] | None = None
        self.constraint = b""
        if info is not None:
            self.generate = {
                "prompt_ids": [int(i) for i in info["prompt_ids"]],
                "sampler": info["sampler"],
                "max_tokens": int(info["max_tokens"]),
                "lookahead": float(info.get("lookahead", 0.0)),
                "lm_vocab": info.get("lm_vocab") or vocab_fingerprint(info["lm"]),
            }
            if constraint_bytes is not None:
                self.constraint = constraint_bytes
            else:
                try:
                    self.constraint = pickle.dumps(info["constraint"], protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as err:  # noqa: BLE001
                    raise CheckpointError(
                        f"cannot checkpoint the run: the constraint ({type(info['constraint']).__name__}) "
                        f"cannot be pickled: {err}"
                    ) from None

    def write(self, run: Run, elapsed_s: float) -> None:
        """Write ``run`` (between two steps) to the file, replacing the previous checkpoint."""
        ids, records = name_shared(run.pop)
        state = {"pop": run.pop, "rng": run.rng.bit_generator.state, "history": run.history,
                 "banked": run.banked}
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
            "generate": self.generate,
            "constraint_bytes": len(self.constraint),
            "state_bytes": len(blob),
            "sha256": hashlib.sha256(self.constraint + blob).hexdigest(),
        }
        line = json.dumps(header, separators=(",", ":")).encode() + b"\n"
        atomic_write(self.path, MAGIC + line + self.constraint + blob)

    def _explain(self, run: Run, ids: dict, records: dict, err: BaseException) -> CheckpointError:
        for i, p in enumerate(run.pop):
            found = _unpicklable(p, ids, records, "self", set())
            if found is not None:
                path, value, cause = found
                return CheckpointError(
                    f"cannot checkpoint the run: particle {i}'s attribute {path} "
                    f"({type(value).__name__}) cannot be pickled: {cause}. Make it picklable, or "
                    "declare it shared (a class attribute shared_by_particles = True, or wrap it "
                    "in smc.model.Shared(...)) and pass it again to resume(..., shared={...})"
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
    p = Path(path)
    try:
        f = open(p, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"no checkpoint file at {str(p)!r}") from None
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
            nc, ns = int(header["constraint_bytes"]), int(header["state_bytes"])
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
            check_same_lm(bindings[k], r["vocab"], r["vocab_size"], k)
    return bindings


def check_same_lm(lm: LMBackend, fingerprint: str, vocab_size: int, what: str) -> None:
    if not is_lm(lm):
        raise CheckpointError(f"{what!r} was an LM backend in the run; got a {type(lm).__name__}")
    if vocab_fingerprint(lm) != fingerprint:
        raise CheckpointError(
            f"the LM given for {what!r} is not the run's: its vocabulary ({len(lm.vocab):,} tokens) "
            f"differs from the run's ({vocab_size:,} tokens); pass the same model"
        )


async def aresume(
    path: str | os.PathLike,
    *,
    lm: LMBackend | None = None,
    shared: dict[str, Any] | None = None,
    critic: Critic | None = None,
    progress: bool | None = None,
    checkpoint: Any = _SAME,
) -> Result:
    """Continue the run checkpointed at ``path`` (async); see ``resume``."""
    header, constraint_bytes, blob = _read(path)
    if shared is None:
        shared = {}
    if not isinstance(shared, dict) or not all(isinstance(k, str) for k in shared):
        raise TypeError("shared must be a dict from the checkpoint's names (attribute paths) to objects")
    settings = header["settings"]
    if settings["critic"] and critic is None:
        raise CheckpointError("the run used a critic: pass it again, resume(..., critic=...)")
    if not settings["critic"] and critic is not None:
        raise CheckpointError("the run had no critic; resuming with one would change it")
    shared = dict(shared)
    gen = header["generate"]
    if header["kind"] == "generate":
        shared = _rebuild_generation(header, constraint_bytes, lm, shared)
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
    run = Run(state["pop"], np.random.Generator(bit_generator), settings, state["history"],
              header["step"], header["elapsed_s"], state.get("banked"))
    writer = None
    target = path if checkpoint is _SAME else checkpoint
    if target is not None:
        info = None if gen is None else dict(gen)
        writer = CheckpointWriter(target, info, constraint_bytes=constraint_bytes if info else None)
    result = await advance(run, RunCounters(), critic=critic, progress=progress, writer=writer)
    if gen is not None:
        result.stats.update(prompt_tokens=len(gen["prompt_ids"]), sampler=gen["sampler"], max_tokens=gen["max_tokens"])
    return result


def _rebuild_generation(header: dict, constraint_bytes: bytes, lm: LMBackend, shared: dict[str, Any]) -> dict[str, Any]:
    """``shared`` plus the token sampler of a ``generate`` run, rebuilt from ``lm`` and the stored
    constraint, under the name(s) the particles use for it."""
    from samplers import make_sampler
    from smc.model import target_potential

    gen = header["generate"]
    if lm is None:
        raise CheckpointError("resume needs the LM the run used: pass lm=... (it is never stored)")
    check_same_lm(lm, gen["lm_vocab"], len(lm.vocab), "lm")
    try:
        constraint = pickle.loads(constraint_bytes)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"cannot load the run's constraint: {type(err).__name__}: {err}") from None
    potential = target_potential(constraint, lm, gen.get("lookahead", 0.0))
    sampler = make_sampler(gen["sampler"], lm, potential, gen["prompt_ids"])
    out = dict(shared)
    for name, rec in header["shared"].items():
        if name not in out and rec["type"] == _type_name(sampler):
            out[name] = sampler
    return out


def resume(
    path: str | os.PathLike,
    *,
    lm: LMBackend | None = None,
    shared: dict[str, Any] | None = None,
    critic: Critic | None = None,
    progress: bool | None = None,
    checkpoint: Any = _SAME,
) -> Result:
    """Continue an SMC run from its checkpoint and return the Result of the whole run.

    The Result equals, bit for bit, what the uninterrupted run returns with the same seed
    (samples, weights, log_ml, history); ``stats`` counts the LM and sampler work of the resumed
    part only (``steps``, ``tokens`` and ``wall_time_s`` cover the whole run).

    Args:
        path: a file written by ``smc.smc(..., checkpoint=path)`` or
            ``smc.generate(..., checkpoint=path)``.
        lm: the LM backend the run used (never stored in the checkpoint; checked by its
            vocabulary).
        shared: for a Model, ``{path: object}`` for every other shared object the particles
            reach (potentials, samplers, ``Shared`` containers), under the attribute path the
            checkpoint names (``read_header(path)["shared"]`` lists them).
        critic: the critic, if the run had one.
        progress: tqdm bar, as in ``generate``.
        checkpoint: where to keep writing the run's state (default: ``path``; None: nowhere).

    Raises CheckpointError for a file that is not a checkpoint, is corrupt, or comes from
    another version of smc-steer, and for missing or mismatched shared objects.
    """
    kwargs = dict(lm=lm, shared=shared, critic=critic, progress=progress, checkpoint=checkpoint)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aresume(path, **kwargs))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, aresume(path, **kwargs)).result()
