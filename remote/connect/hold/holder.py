"""The holder process: `python -m tfctl.remote.connect.hold.holder SOCKET PERSIST_S LOCK LISTEN`.

Started in the background, in a session of its own, by the first command that wants an agent
session and finds no holder (`borrow.HeldTransport`). That command binds the socket and takes
the lock, and passes both as file descriptors (LOCK, LISTEN): its requests wait in the socket's
backlog while the holder starts, and it borrows every agent session from the holder from its
first request on. When it ends, its sessions are handed back, idle, so the command typed right
after it finds them open (nothing is reopened between two commands). The holder lends a ready
session per request to the commands that follow and opens what they ask for that it does not
hold yet. It exits when no command has used it for PERSIST_S seconds, counted from when the
command that started it has exited too, ending its agent sessions (each agent exits when its
input ends) and closing its connections, so nothing of it outlives that time on a host.

One holder per socket: the lock file is taken before the socket is bound, so two commands
starting one at once leave one. Only the user who started it may talk to it (the folder is
0700 and the peer's uid is checked, SO_PEERCRED).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

from tfctl.remote.agent.wire import ANSWER_MARK
from tfctl.remote.connect.hold import protocol
from tfctl.remote.connect.session.agentclient import payload
from tfctl.remote.connect.ssh import SshPipe, SshTransport
from tfctl.remote.errors import RemoteError

MAX_IDLE_PER_SESSION_KIND = 4
"""Idle agent sessions kept per host and command."""
MAX_SESSIONS_PER_LINK = 8
"""Sessions open at once on one kept connection, idle and lent: sshd's MaxSessions is 10 by
default (sshd_config(5)), and a refused session would cost the connection every other one.
A command asking beyond it uses a connection of its own."""


_MARK = ANSWER_MARK.encode()


class Busy(Exception):
    """The host's kept connection has no room for another session."""


class Holder:
    """The kept connections (one `SshTransport` per link key) and agent sessions (idle, by link
    and command), lent to one command at a time; `clients` and `last_used` decide its end."""

    def __init__(self, persist_s: float) -> None:
        self.persist_s = persist_s
        self.links: dict[str, SshTransport] = {}
        self.idle: dict[tuple[str, str], list[SshPipe]] = {}
        self.opened: dict[str, list[SshPipe | None]] = {}
        """link key → the sessions opened on it (pruned of the closed ones when counted; None
        for one being opened)."""
        self.lock = threading.Lock()
        self.clients = 0
        self.last_used = time.monotonic()
        self.stop = threading.Event()

    # -- connections and sessions -----------------------------------------------------------
    def link(self, fields: dict[str, Any]) -> SshTransport:
        key = protocol.link_key(fields)
        with self.lock:
            found = self.links.get(key)
            if found is None:
                host, options = protocol.host_from(fields)
                found = self.links[key] = SshTransport(host, options)
            return found

    def session(self, fields: dict[str, Any], command: str) -> tuple[SshPipe, bool]:
        """An idle agent session for (host, command), else a new one, booted: (pipe, reused)."""
        key = protocol.link_key(fields)
        with self.lock:
            pool = self.idle.get((key, command), [])
            while pool:
                pipe = pool.pop()
                if pipe.alive:
                    return pipe, True
                pipe.close()
            opened = self.opened.setdefault(key, [])  # one list per link: pruned in place
            opened[:] = [p for p in opened if p is None or not p.channel.closed]
            if len(opened) >= MAX_SESSIONS_PER_LINK:
                raise Busy
            opened.append(None)  # this one's place, taken while it opens
        try:
            pipe = self.link(fields).open_pipe(command)
        finally:
            with self.lock:
                opened.remove(None)
        with self.lock:
            opened.append(pipe)
        pipe.send(payload().line)
        return pipe, False

    def give_back(self, fields: dict[str, Any], command: str, pipe: SshPipe, owed: int) -> None:
        """A session a command is done with, idle again once the answers to its posted requests
        are read (and dropped); closed when they do not come or the pool is full."""
        try:
            for _ in range(owed):
                while (line := pipe.read_line(30.0)) is not None and not line.startswith(_MARK):
                    pass  # the acknowledgement, or noise before the answer
        except (TimeoutError, OSError, EOFError):
            pipe.close()
            return
        with self.lock:
            pool = self.idle.setdefault((protocol.link_key(fields), command), [])
            if pipe.alive and len(pool) < MAX_IDLE_PER_SESSION_KIND:
                pool.append(pipe)
                return
        pipe.close()

    def drop(self, fields: dict[str, Any]) -> None:
        """A command found the host's link dead: its sessions and connection go."""
        key = protocol.link_key(fields)
        with self.lock:
            link = self.links.pop(key, None)
            pipes = [p for (k, _), pool in self.idle.items() if k == key for p in pool]
            for k in [k for k in self.idle if k[0] == key]:
                del self.idle[k]
        for pipe in pipes:
            pipe.close()
        if link is not None:
            link.close()

    def close(self) -> None:
        """End every agent session (its input ends: the agent exits) and every connection."""
        with self.lock:
            pipes = [p for pool in self.idle.values() for p in pool]
            links = list(self.links.values())
            self.idle, self.links = {}, {}
        for pipe in pipes:
            pipe.end_input()
        deadline = time.monotonic() + 2.0
        for pipe in pipes:
            pipe.finish(max(0.0, deadline - time.monotonic()))
        for link in links:
            link.close()

    # -- one command's session --------------------------------------------------------------
    def serve(self, conn: socket.socket) -> None:
        with self.lock:
            self.clients += 1
        try:
            self._serve(conn)
        except (EOFError, OSError, ValueError):
            pass  # the command went (Ctrl-C, exit): what it held was closed in _serve
        finally:
            conn.close()
            with self.lock:
                self.clients -= 1
                self.last_used = time.monotonic()

    def _serve(self, conn: socket.socket) -> None:
        kind, data = protocol.recv_frame(conn)
        asked = json.loads(data)
        if kind == protocol.DROP:
            self.drop(asked)
            return
        if kind == protocol.STOP:
            with self.lock:
                held = {"pid": os.getpid(), "links": len(self.links),
                        "sessions": sum(len(pool) for pool in self.idle.values())}
            protocol.send_json(conn, protocol.READY, held)
            self.stop.set()
            return
        if kind != protocol.OPEN:
            return
        try:
            pipe, reused = self.session(asked, asked["command"])
        except RemoteError as exc:
            protocol.send_json(conn, protocol.ERROR, {"error": protocol.error_fields(exc)})
            return
        except Busy:
            protocol.send_json(conn, protocol.BUSY, {})
            return
        live: SshPipe | None = pipe
        try:
            protocol.send_json(conn, protocol.READY, {"reused": reused})
            while live is not None:
                kind, data = protocol.recv_frame(conn)
                if kind == protocol.SEND:
                    live.send(data)
                elif kind == protocol.READ:
                    _answer_read(conn, live, json.loads(data)["timeout_s"])
                elif kind == protocol.INPUT_END:
                    live.end_input()
                elif kind == protocol.FINISH:
                    code, rest = live.finish(json.loads(data)["wait_s"])
                    protocol.send_json(conn, protocol.EXITED, {"code": code, "rest": rest,
                                             "link_lost": live.link_lost})
                    live = None
                elif kind == protocol.RELEASE:
                    given, live = live, None
                    self.give_back(asked, asked["command"], given, json.loads(data)["owed"])
        finally:
            if live is not None:  # the command went without handing it back: mid-request
                live.close()

    # -- the process --------------------------------------------------------------------------
    def touch(self) -> None:
        with self.lock:
            self.last_used = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.clients else time.monotonic() - self.last_used


def _answer_read(conn: socket.socket, pipe: SshPipe, timeout_s: float | None) -> None:
    try:
        line = pipe.read_line(timeout_s)
    except TimeoutError:
        protocol.send_frame(conn, protocol.TIMEOUT)
        return
    except (OSError, EOFError):
        line = None
    if line is None:
        protocol.send_json(conn, protocol.ENDED, {"link_lost": pipe.link_lost})
    else:
        protocol.send_frame(conn, protocol.LINE, line)


def _peer_is_us(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def main(argv: list[str]) -> int:
    path, persist_s = argv[0], float(argv[1])
    _lock, listening = int(argv[2]), int(argv[3])  # the lock stays held until this exits
    server = socket.socket(fileno=listening)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    holder = Holder(persist_s)
    signal.signal(signal.SIGTERM, lambda *_: holder.stop.set())
    threading.Thread(target=_accept, args=(server, holder), daemon=True).start()
    # The command that started it, by the pid it passed: a command that exited before this
    # line would otherwise leave init (pid 1) as the parent compared with, a client forever.
    starter = int(argv[4])
    while not holder.stop.wait(0.2):
        if starter and os.getppid() == starter:
            holder.touch()  # the command that started it is a client until it exits
        else:
            starter = 0
            if holder.idle_for() >= persist_s:
                break
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # new commands start a holder of their own from here on
    server.close()
    holder.close()
    return 0


def _accept(server: socket.socket, holder: Holder) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # closed: the holder is ending
        if not _peer_is_us(conn):
            conn.close()
            continue
        threading.Thread(target=holder.serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
