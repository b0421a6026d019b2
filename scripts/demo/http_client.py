"""A client process of `cairn demo --http`: one session's turns sent over HTTP, its stream read and resumed.

    python -m cairn.demo.http_client URL SESSION TURNS OUT.json

Standard library only (`http.client`), as a client in any language would
be: for each turn it posts the demo's task with an `Idempotency-Key`
(`SESSION-tN`), reads the session's event stream to the turn's end, and
when the server goes away (the demo kills it) waits for it to come back,
posts the same message again (answered from the log: nothing runs twice)
and resumes the stream after the last id it saw. It prints `turn N done`
after each turn, and writes OUT.json: every record id and kind it was
streamed, and each turn's end (`completed`, or `failed` with its phase).
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from cairn.demo.tasks import task_text

#: how long the client waits for the server to come back, in all
BACK_WITHIN_S = 120.0
ENDS = ("turn-completed", "turn-failed", "turn-cancelled")


class Gone(Exception):
    """The server went away mid-request (connection refused, reset or closed)."""


class Client:
    def __init__(self, url: str, session: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.session = session
        self.last_id = ""  # the last event id seen (a record's seq, or seq.k)
        self.records: list[tuple[str, str]] = []  # (id, kind) of every record streamed
        self.reconnects = 0

    def _connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        connection = self._connection()
        try:
            connection.request(
                "POST", path, json.dumps(body), {"content-type": "application/json", **headers}
            )
            reply = connection.getresponse()
            answer: dict[str, Any] = json.loads(reply.read() or b"{}")
        except (OSError, http.client.HTTPException) as exc:
            raise Gone(str(exc)) from None
        finally:
            connection.close()
        if reply.status >= 400:
            raise RuntimeError(f"{path}: {reply.status} {answer}")
        return answer

    def read_to_end(self, turn_id: str) -> dict[str, Any]:
        """The session's stream after `last_id` until turn `turn_id` ends; its end's data."""
        connection = self._connection()
        try:
            headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
            connection.request("GET", f"/v1/sessions/{self.session}/events", headers=headers)
            reply = connection.getresponse()
            if reply.status != 200:
                raise RuntimeError(f"events: {reply.status} {reply.read()[:200]!r}")
            fields: dict[str, str] = {}
            while True:
                line = reply.readline()
                if not line:
                    raise Gone("the stream ended")
                text = line.decode().rstrip("\r\n")
                if text:
                    if not text.startswith(":"):
                        name, _, value = text.partition(": ")
                        fields[name] = value
                    continue
                if "data" not in fields:
                    continue
                event_id, kind, data = fields["id"], fields["event"], json.loads(fields["data"])
                fields = {}
                self.last_id = event_id
                if "." not in event_id:
                    self.records.append((event_id, kind))
                if kind in ENDS and data.get("turn_id") == turn_id:
                    return dict(data)
        except (OSError, http.client.HTTPException) as exc:
            raise Gone(str(exc)) from None
        finally:
            connection.close()

    def wait_for_server(self) -> None:
        deadline = time.monotonic() + BACK_WITHIN_S
        delay = 0.05
        while True:
            connection = self._connection()
            try:
                connection.request("GET", "/v1/health")
                if connection.getresponse().status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            finally:
                connection.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not come back within {BACK_WITHIN_S} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def turn(self, n: int) -> dict[str, Any]:
        """Turn `n` to its end, across any number of server restarts."""
        key = {"Idempotency-Key": f"{self.session}-t{n}"}
        path = f"/v1/sessions/{self.session}/messages"
        while True:
            try:
                answer = self.post(path, {"text": task_text(self.session, n)}, key)
                turn_id = answer.get("turn_id") or answer.get("result", {}).get("turn_id", "")
                if answer.get("result") is not None:  # answered from the log: it ended before
                    ended: dict[str, Any] = answer["result"]
                    self.read_to_end(turn_id)  # the records it has not seen yet
                    return {"turn": n, "turn_id": turn_id, "status": ended["status"], "phase": ended["phase"]}
                end = self.read_to_end(turn_id)
                status = "completed" if end["kind"] == "turn-completed" else end["kind"].removeprefix("turn-")
                return {"turn": n, "turn_id": turn_id, "status": status, "phase": end.get("phase")}
            except Gone:
                self.reconnects += 1
                self.wait_for_server()


def main(argv: list[str]) -> int:
    url, session, turns, out = argv[0], argv[1], int(argv[2]), argv[3]
    client = Client(url, session)
    ends = []
    for n in range(1, turns + 1):
        ends.append(client.turn(n))
        print(f"turn {n} done", flush=True)
    with open(out, "w", encoding="utf-8") as file:
        json.dump(
            {"session": session, "turns": ends, "records": client.records, "reconnects": client.reconnects},
            file,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
