"""Timelines played in forks of one staged world: the scenario is staged once per process, and
each timeline is played by a child forked from it, which sends back what it found and exits.

The parent never plays, so every child starts from exactly the world staging left: the API
objects, moto's EC2 backend, the behaviour proxy's memory, the controllers' state, the sandbox
clock, the seeded random generators, and the warm caches of the process (parsed runbooks, loaded
botocore models). A copy-on-write fork of that costs a few milliseconds; a deep copy of moto's
backend alone costs a second, and staging again half a second.

Every timeline of a search begins alike: the run starts with the same params and plays its first
tick before any world event or decision (they come from round 0 on). That beginning is played
once too, in a child of the stage that stays as it is then (``_Begun``), and each timeline is a
grandchild forked from it: a fifth of a timeline's time, saved on each.

The staged sandbox uses the in-process transport (``bot.sim.inprocess``): a child has only the
thread that forked it, so nothing it plays may need a server thread of its parent, and none is
started. A process forks only when idle (no request in flight). The run's state database is a
file, which a fork does not copy: each child puts a copy of its parent's in place (closed in the
parent, so no SQLite connection crosses a fork) before it plays. Where ``os.fork`` does not
exist, ``explore`` stages per timeline instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import pickle
import shutil
import signal
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from bot.engine.runstate import RunState
from bot.runbook.templating import precompile
from bot.sim.explore.driver import ROUNDS, Played, begin, finish, play, play_staged
from bot.sim.explore.timeline import Timeline, draw
from bot.sim.rehearsal import CLUSTER, Rehearsal
from bot.sim.sandbox import Sandbox

CAN_FORK = hasattr(os, "fork")
_LENGTH = struct.Struct("!Q")


class ChildFailed(RuntimeError):
    """A forked child raised or died: its traceback, or how it ended."""


def _send(out: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LENGTH.pack(len(data)) + data)
    out.flush()


def _recv(inp: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    head = inp.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    return pickle.loads(inp.read(_LENGTH.unpack(head)[0]))


def _in_child(work: Callable[[], Played]) -> tuple[bytes, int, float]:
    """Run ``work`` in a fork of this process: (its pickled outcome, exit status, CPU seconds).

    The child sends ``("ok", played)`` or ``("error", traceback)`` and ends without running this
    process's exit hooks; an interrupted parent ends the child it started."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                outcome: tuple[str, object] = ("ok", work())
            except BaseException:
                outcome = ("error", traceback.format_exc())
            with os.fdopen(write, "wb") as out:
                out.write(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
        finally:
            os._exit(0)
    os.close(write)
    ended = False
    try:
        with os.fdopen(read, "rb") as inp:
            data = inp.read()
        _, status, usage = os.wait4(pid, 0)
        ended = True
    finally:
        if not ended:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return data, status, usage.ru_utime + usage.ru_stime


def _warm_error_codes(r: Rehearsal) -> None:
    """botocore maps an error code to its shape on the first error a client parses, once per
    service model: done here, or every child whose run meets an EC2 error would do it."""
    ec2 = r.catalog.clients_for(r.settings.cluster(CLUSTER)).ec2
    ec2.client.meta.service_model.shape_for_error_code("IncorrectInstanceState")


def _only_region(region: str) -> dict[str, dict[str, Any]]:
    """moto loads the instance type offerings of every region when it is imported (75 MB): the
    stage keeps its own region's while it lives (``_all_regions`` puts the others back). A fork
    and a child's exit cost time in proportion to the memory the process has mapped, and each
    timeline is one of each. What was set aside, by location type and region."""
    from moto.ec2.models import instance_types  # deferred: moto is loaded only with a sandbox

    aside: dict[str, dict[str, Any]] = {}
    for location, by_region in instance_types.INSTANCE_TYPE_OFFERINGS.items():
        for other in [name for name in by_region if name != region]:
            aside.setdefault(location, {})[other] = by_region.pop(other)
    return aside


def _all_regions(aside: dict[str, dict[str, Any]]) -> None:
    from moto.ec2.models import instance_types  # deferred: moto is loaded only with a sandbox

    for location, regions in aside.items():
        instance_types.INSTANCE_TYPE_OFFERINGS.setdefault(location, {}).update(regions)


def _trim() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``), where there
    is one: the memory a process has mapped, not what it uses, sets what a fork costs."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        getattr(libc, "malloc_trim")(0)  # noqa: B009
    except (OSError, AttributeError):
        pass


def _wal(db: Path) -> Path:
    return db.with_name(db.name + "-wal")


def _outcome(data: bytes, status: int, seed: int) -> Played:
    if not data:
        raise ChildFailed(f"the child playing seed {seed} ended with status {status} and no result")
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise ChildFailed(f"the child playing seed {seed} raised:\n{value}")
    assert isinstance(value, Played)
    return value


class Stage:
    """One scenario staged, in-process, ready to be forked per timeline (``play``).

    ``warm``: play ``tl`` once first on a world staged and thrown away, so that what the process
    loads and caches on first use is loaded before the fork, once, rather than in every child.
    ``share_beginning``: timelines with params play on from one shared beginning (``_Begun``).
    """

    def __init__(self, tl: Timeline, *, runbooks_dir: str | None = None, warm: bool = True,
                 share_beginning: bool = True) -> None:
        if not CAN_FORK:
            raise RuntimeError("os.fork is not available on this platform")
        self.scenario, self.options, self.runbooks_dir = tl.scenario, dict(tl.options), runbooks_dir
        self.share_beginning = share_beginning
        # the children's state databases commit on every tick: in memory when there is a tmpfs
        shm = Path("/dev/shm")
        self.dir = Path(tempfile.mkdtemp(prefix="runbook-bot-explore-stage-", dir=shm if (
            shm.is_dir() and os.access(shm, os.W_OK)) else None))
        self.forks = 0
        self.child_seconds = 0.0  # CPU time (user and system) of the children that played
        self.last_child_seconds = 0.0
        self._begun: _Begun | None = None
        self._aside: dict[str, dict[str, Any]] = {}  # moto's offerings of the other regions
        if warm:
            play(replace(tl, events=()), runbooks_dir=runbooks_dir, transport="inprocess")
        self.r = Rehearsal(tl.scenario, options=dict(tl.options), workdir=self.dir / "stage",
                           audit_key="explore", runbooks_dir=runbooks_dir, transport="inprocess")
        self.r.start()
        try:
            # every template and expression of the runbook compiled here, once, not in each child
            runbook, _text, _file = self.r.runbooks.get(tl.runbook)
            precompile(runbook.model_dump(mode="json", by_alias=True))
            precompile([self.r.catalog.spec(name).summary for name in self.r.catalog.names()])
            # The staged runner and store serve every child: the store's database, empty at the
            # newest schema, is closed here and kept as the template each child puts in its place.
            # The controllers' EC2 client, built on first use, is built here once, not per child.
            self.db = Path(self.r.store.engine.url.database or "")
            self.template = self.dir / "template.db"
            self._snapshot(self.template)
            assert self.r.sandbox.ctx is not None
            getattr(self.r.sandbox.ctx.ec2_client, "meta", None)
            _warm_error_codes(self.r)
            self.r.ready_for_http()  # what the cross-checks over HTTP play with, built once
            self._aside = _only_region(self.r.sandbox.region)
            # the staged objects stay out of the collector's way: a child's collections would
            # otherwise write to (and so copy) every page of the parent's heap
            gc.collect()
            _trim()
            gc.freeze()
        except BaseException:  # nothing staged is left behind: the sandbox, moto's regions
            self.close()
            raise

    def fits(self, tl: Timeline) -> bool:
        return (tl.scenario, dict(tl.options)) == (self.scenario, self.options)

    def play(self, tl: Timeline, *, draw_events: bool = False, rounds: int = ROUNDS,
             transport: str = "inprocess", afresh: bool = False) -> Played:
        """``tl`` played in a fork of the staged world, as ``driver.play_staged`` plays it; with
        ``transport="http"``, the fork serves the staged world over sockets first (the API
        server, the EC2 proxy, moto as shipped on its own server: ``Rehearsal.serve_over_http``)
        and the run is played over HTTP from its start; with ``afresh`` too, the fork stages the
        world again over HTTP (``driver.play``), as a process of its own would. The staged world
        is the parent's, never changed."""
        if not self.fits(tl):
            raise ValueError(f"staged {self.scenario} {self.options}, asked for "
                             f"{tl.scenario} {tl.options}")
        if transport not in ("inprocess", "http"):
            raise ValueError(f"unknown transport {transport!r}: inprocess or http")
        self.forks += 1
        if transport == "http" and afresh:
            def again() -> Played:
                Sandbox._running = {}  # this process's moto is a copy: the stage steps aside
                return play(tl, runbooks_dir=self.runbooks_dir, draw_events=draw_events,
                            rounds=rounds, transport=transport)
            data, status, cpu = _in_child(again)
        elif transport == "http":
            def served() -> Played:
                self._put_back(self.template)
                try:
                    self.r.serve_over_http()
                    return play_staged(self.r, tl, draw_events=draw_events, rounds=rounds)
                finally:
                    self.r.store.close()
            data, status, cpu = _in_child(served)
        elif tl.params and self.share_beginning:
            if draw_events:  # from the staged world, which drawing only reads
                tl = replace(tl, events=draw(self.r.sandbox, seed=tl.seed, rounds=rounds))
            data, status, cpu = self._from_beginning(tl)
        else:
            def staged() -> Played:
                self._put_back(self.template)
                try:
                    return play_staged(self.r, tl, draw_events=draw_events, rounds=rounds)
                finally:
                    self.r.store.close()
            data, status, cpu = _in_child(staged)
        self.last_child_seconds = cpu
        self.child_seconds += cpu
        return _outcome(data, status, tl.seed)

    def _from_beginning(self, tl: Timeline) -> tuple[bytes, int, float]:
        if self._begun is not None and not self._begun.fits(tl):
            self._begun.close()
            self._begun = None
        if self._begun is None:
            self._begun = _Begun(self, tl)
        try:
            return self._begun.play(tl)
        except BaseException:
            self._begun.close(kill=True)
            self._begun = None
            raise

    def _put_back(self, snapshot: Path) -> None:
        """Put a copy of ``snapshot`` (and of its write-ahead log, if SQLite left one) where the
        store's database is; its engine has no connection open, and opens the copy."""
        fresh = self.db.with_name(f"fresh-{os.getpid()}.db")
        shutil.copyfile(snapshot, fresh)
        for leftover in (_wal(self.db), self.db.with_name(self.db.name + "-shm")):
            leftover.unlink(missing_ok=True)
        os.replace(fresh, self.db)
        if _wal(snapshot).exists():
            shutil.copyfile(_wal(snapshot), _wal(self.db))

    def _snapshot(self, to: Path) -> None:
        """A copy of the store's database, closed first (its log is then folded in)."""
        self.r.store.close()
        shutil.copyfile(self.db, to)
        if _wal(self.db).exists():
            shutil.copyfile(_wal(self.db), _wal(to))

    def close(self) -> None:
        if self._begun is not None:
            self._begun.close()
            self._begun = None
        gc.unfreeze()
        _all_regions(self._aside)
        self._aside = {}
        self.r.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Begun:
    """A child of the stage in which a run has begun (``driver.begin``): it stays so, and forks
    a grandchild per timeline that plays on from there (``driver.finish``). Requests and answers
    cross two pipes; the child leads its own process group, so that the stage can end it and its
    grandchild together."""

    def __init__(self, stage: Stage, tl: Timeline) -> None:
        self.runbook, self.params = tl.runbook, dict(tl.params)
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(req_w)
                os.close(res_r)
                os.setpgid(0, 0)
                with os.fdopen(req_r, "rb") as inp, os.fdopen(res_w, "wb") as out:
                    self._serve(stage, tl, inp, out)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(res_w)
        self.pid = pid
        self.req, self.res = os.fdopen(req_w, "wb"), os.fdopen(res_r, "rb")
        ready = _recv(self.res)
        if ready != ("ready", None):
            self.close(kill=True)
            raise ChildFailed(f"the run did not begin:\n{ready[1] if ready else 'no answer'}")

    def fits(self, tl: Timeline) -> bool:
        return (tl.runbook, dict(tl.params)) == (self.runbook, self.params)

    def play(self, tl: Timeline) -> tuple[bytes, int, float]:
        _send(self.req, tl)
        answer = _recv(self.res)
        if answer is None:
            raise ChildFailed(f"the process of the run's beginning ended while seed {tl.seed} "
                              "was played")
        data, status, cpu = answer
        return data, status, cpu

    def close(self, *, kill: bool = False) -> None:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(BrokenPipeError):
            self.req.close()  # the end of the requests: the child ends
        self.res.close()
        os.waitpid(self.pid, 0)

    @staticmethod
    def _serve(stage: Stage, tl: Timeline, inp: IO[bytes], out: IO[bytes]) -> None:
        """In the child: begin the run, then play each timeline asked for in a grandchild."""
        begun = stage.dir / f"begun-{os.getpid()}.db"
        try:
            stage._put_back(stage.template)
            player, state = begin(stage.r, tl)
            stage._snapshot(begun)
            gc.freeze()
        except BaseException:
            _send(out, ("error", traceback.format_exc()))
            return
        _send(out, ("ready", None))
        while (asked := _recv(inp)) is not None:
            _send(out, _in_child(functools.partial(_Begun._finish, stage, begun, player, state,
                                                   asked)))

    @staticmethod
    def _finish(stage: Stage, begun: Path, player: Any, state: RunState, tl: Timeline) -> Played:
        stage._put_back(begun)
        try:
            return finish(player, state, tl)
        finally:
            stage.r.store.close()
